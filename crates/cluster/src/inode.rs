//! Inode numbers: which pool, family and layer an object belongs to (ADR 0026).
//!
//! `pool (8 bits) | layered (1) | family (35) | layer (20)`. A layered inode is one layer of a
//! family: a volume's head, one of its snapshots, or a clone made from one of them. Every layer
//! of a family is placed by the family alone, so the objects of one stripe of every layer share
//! a PG and its primary reads through a chain of layers from its own drive. Inodes without the
//! layered bit are volumes created before layers existed: `pool | number (56)`, placed by the
//! whole inode; they take no snapshots.

/// The bit that marks an inode as a layer of a family.
pub const LAYERED: u64 = 1 << 55;
pub const LAYER_BITS: u32 = 20;
pub const FAMILY_BITS: u32 = 35;
/// The most layers one family holds.
pub const LAYERS_MAX: u64 = 1 << LAYER_BITS;
/// The most families one pool holds.
pub const FAMILIES_MAX: u64 = 1 << FAMILY_BITS;
const LAYER_MASK: u64 = LAYERS_MAX - 1;
const POOL_SHIFT: u32 = 56;

/// Layer `layer` of family `family` in `pool`.
pub fn layered(pool: u32, family: u64, layer: u64) -> u64 {
    assert!(pool < 1 << 8, "pool {pool} does not fit in an inode");
    assert!(family < FAMILIES_MAX, "family {family} does not fit in an inode");
    assert!(layer < LAYERS_MAX, "layer {layer} does not fit in an inode");
    (u64::from(pool) << POOL_SHIFT) | LAYERED | (family << LAYER_BITS) | layer
}

/// Volume `number` of `pool`, numbered before layers existed.
pub fn unlayered(pool: u32, number: u64) -> u64 {
    (u64::from(pool) << POOL_SHIFT) | (number & ((1 << POOL_SHIFT) - 1))
}

pub fn pool(inode: u64) -> u32 {
    (inode >> POOL_SHIFT) as u32
}

pub fn is_layered(inode: u64) -> bool {
    inode & LAYERED != 0
}

/// The family of a layered inode.
pub fn family(inode: u64) -> Option<u64> {
    is_layered(inode).then_some((inode & !LAYERED & ((1 << POOL_SHIFT) - 1)) >> LAYER_BITS)
}

/// The layer number of a layered inode.
pub fn layer(inode: u64) -> Option<u64> {
    is_layered(inode).then_some(inode & LAYER_MASK)
}

/// What places an inode's objects: for a layered inode, the unlayered inode numbered like its
/// family (a volume opened family `n` is placed as a volume numbered `n` was before layers: the
/// same counter numbers both, so no two volumes of a pool share a key); the inode itself
/// otherwise. Two inodes with the same key have each stripe's objects in the same PG.
pub fn placement_key(inode: u64) -> u64 {
    match family(inode) {
        Some(family) => unlayered(pool(inode), family),
        None => inode,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_layers_share_their_family_key() {
        let head = layered(3, FAMILIES_MAX - 1, 0);
        let snapshot = layered(3, FAMILIES_MAX - 1, LAYERS_MAX - 1);
        for inode in [head, snapshot] {
            assert_eq!(pool(inode), 3);
            assert_eq!(family(inode), Some(FAMILIES_MAX - 1));
            assert!(is_layered(inode));
        }
        assert_eq!((layer(head), layer(snapshot)), (Some(0), Some(LAYERS_MAX - 1)));
        assert_eq!(placement_key(head), placement_key(snapshot));
        assert_ne!(placement_key(layered(3, 7, 1)), placement_key(layered(3, 8, 1)));
        assert_ne!(placement_key(layered(3, 7, 1)), placement_key(layered(4, 7, 1)));
    }

    #[test]
    fn unlayered_inodes_keep_their_numbering_and_placement() {
        let old = unlayered(1, 1);
        assert_eq!(old, 72057594037927937);
        assert_eq!((pool(old), family(old), layer(old)), (1, None, None));
        assert_eq!(placement_key(old), old);
        assert_eq!(placement_key(layered(1, 1, 7)), old, "family 1 is placed as volume 1 was");
        assert!(!is_layered(unlayered(1, 12345)));
    }

    #[test]
    #[should_panic(expected = "does not fit")]
    fn a_layer_past_the_limit_is_refused() {
        layered(1, 1, LAYERS_MAX);
    }
}
