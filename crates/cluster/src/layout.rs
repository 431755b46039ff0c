//! Volume bytes to objects to PGs, and object versions.

/// Consecutive objects that share a PG: sequential I/O of up to this many objects stays on
/// one primary and its replicas (one connection, one per-PG queue), while random I/O still
/// spreads over every PG.
pub const OBJECTS_PER_RUN: u64 = 8;

/// Bits of a version below the PG epoch (DESIGN section 2).
pub const VERSION_COUNTER_BITS: u32 = 40;

/// The PG of object `stripe` of volume `inode` in a pool of `pg_count` PGs. Every layer of a
/// family gives a stripe the same PG (`inode::placement_key`).
///
/// A stable function of its inputs: it is part of the on-cluster format, since changing it
/// would move every object.
pub fn object_pg(inode: u64, stripe: u64, pg_count: u32) -> u32 {
    assert!(pg_count > 0, "a pool has at least one PG");
    let run = stripe / OBJECTS_PER_RUN;
    (mix(crate::inode::placement_key(inode) ^ mix(run)) % u64::from(pg_count)) as u32
}

/// splitmix64's finaliser: a fixed, well-distributed 64-bit mix.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The version a primary of PG epoch `epoch` gives the next write of an object whose current
/// version is `current` (`None`: never written or deleted without a trace).
///
/// Versions grow per object, and two primaries of different epochs can never mint the same
/// version: the epoch sits in the high bits, so the first write under a newer epoch jumps
/// above everything an older primary could have minted (as long as one epoch writes one object
/// fewer than 2^40 times). A version is minted only in its epoch's range, which no primary
/// leaves: one that did could mint a version a later epoch's primary mints too.
pub fn mint_version(epoch: u64, current: Option<u64>) -> u64 {
    assert!(epoch >> (u64::BITS - VERSION_COUNTER_BITS) == 0, "pg epoch {epoch} does not fit in a version");
    let floor = epoch << VERSION_COUNTER_BITS;
    let version = match current {
        Some(current) => (current + 1).max(floor),
        None => floor.max(1),
    };
    assert!(
        version >> VERSION_COUNTER_BITS == epoch,
        "version {version:#x} minted after {current:#x?} is outside the range of epoch {epoch}"
    );
    version
}

/// One object's share of a volume request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectRef {
    pub stripe: u64,
    /// Offset of the range within the object.
    pub offset_in_object: u32,
    pub length: u32,
    /// Offset of the range within the request's buffer.
    pub offset_in_request: u64,
}

/// Cuts `[offset, offset + length)` of a volume into per-object ranges, in order.
pub fn split(offset: u64, length: u64, object_size_bytes: u32) -> impl Iterator<Item = ObjectRef> {
    let object_size = u64::from(object_size_bytes);
    let end = offset + length;
    let mut at = offset;
    std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let stripe = at / object_size;
        let within = at % object_size;
        let length = (object_size - within).min(end - at);
        let piece = ObjectRef {
            stripe,
            offset_in_object: within as u32,
            length: length as u32,
            offset_in_request: at - offset,
        };
        at += length;
        Some(piece)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_of_objects_share_a_pg_and_pgs_are_used_evenly() {
        let pg_count = 64;
        for stripe in 0..OBJECTS_PER_RUN {
            assert_eq!(object_pg(7, stripe, pg_count), object_pg(7, 0, pg_count));
        }
        let mut counts = vec![0u32; pg_count as usize];
        for stripe in 0..(64 * 1000 * OBJECTS_PER_RUN) {
            counts[object_pg(1 << 56 | 1, stripe, pg_count) as usize] += 1;
        }
        let ideal = (1000 * OBJECTS_PER_RUN) as f64;
        for count in counts {
            assert!((f64::from(count) - ideal).abs() / ideal < 0.15, "{count} vs {ideal}");
        }
    }

    #[test]
    fn every_layer_of_a_family_places_a_stripe_alike() {
        let (head, snapshot) = (crate::inode::layered(1, 9, 0), crate::inode::layered(1, 9, 4));
        let other = crate::inode::layered(1, 10, 0);
        let mut differs = false;
        for stripe in 0..64 * OBJECTS_PER_RUN {
            assert_eq!(object_pg(head, stripe, 64), object_pg(snapshot, stripe, 64));
            differs |= object_pg(head, stripe, 64) != object_pg(other, stripe, 64);
        }
        assert!(differs, "another family is placed elsewhere");
    }

    #[test]
    fn versions_grow_and_newer_epochs_jump_above_older_ones() {
        assert_eq!(mint_version(0, None), 1);
        assert_eq!(mint_version(3, None), 3 << 40);
        assert_eq!(mint_version(3, Some(3 << 40)), (3 << 40) + 1);
        assert_eq!(mint_version(4, Some((3 << 40) + 99)), 4 << 40);
    }

    #[test]
    #[should_panic(expected = "outside the range of epoch 3")]
    fn a_version_of_a_later_epoch_is_never_minted_on() {
        mint_version(3, Some(5 << 40));
    }

    #[test]
    #[should_panic(expected = "outside the range of epoch 3")]
    fn an_epoch_never_overflows_into_the_next() {
        mint_version(3, Some((4 << 40) - 1));
    }

    #[test]
    fn split_covers_the_range_in_object_pieces() {
        let pieces: Vec<_> = split(100 * 1024, 300 * 1024, 128 * 1024).collect();
        assert_eq!(
            pieces,
            vec![
                ObjectRef { stripe: 0, offset_in_object: 100 * 1024, length: 28 * 1024, offset_in_request: 0 },
                ObjectRef { stripe: 1, offset_in_object: 0, length: 128 * 1024, offset_in_request: 28 * 1024 },
                ObjectRef { stripe: 2, offset_in_object: 0, length: 128 * 1024, offset_in_request: 156 * 1024 },
                ObjectRef { stripe: 3, offset_in_object: 0, length: 16 * 1024, offset_in_request: 284 * 1024 },
            ]
        );
        assert_eq!(split(0, 0, 4096).count(), 0);
    }
}
