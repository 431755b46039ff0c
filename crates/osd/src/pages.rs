//! Page masks and the buffers they describe: a whole object's bytes, and the pages of a mask
//! packed in order, as `SecWritePages` and `SecReplace` carry them (bit `i`: page `i`).

use engine::{AlignedBuffer, PAGE_SIZE_BYTES};

const PAGE: usize = PAGE_SIZE_BYTES as usize;

/// The pages of `whole` named in `mask`, in order.
pub(crate) fn pack(whole: &[u8], mask: u64) -> bytes::Bytes {
    let mut packed = Vec::with_capacity(mask.count_ones() as usize * PAGE);
    for page in pages(mask) {
        packed.extend_from_slice(&whole[page * PAGE..][..PAGE]);
    }
    packed.into()
}

/// `whole` with the pages of `mask` replaced by `packed`, which holds them in order.
pub(crate) fn scatter(mut whole: AlignedBuffer, mask: u64, packed: &[u8]) -> AlignedBuffer {
    assert_eq!(packed.len(), mask.count_ones() as usize * PAGE, "one page of data for each page of the mask");
    for (index, page) in pages(mask).enumerate() {
        whole.as_mut_slice()[page * PAGE..][..PAGE].copy_from_slice(&packed[index * PAGE..][..PAGE]);
    }
    whole
}

/// The pages `[offset_bytes, offset_bytes + length_bytes)` of an object covers.
pub(crate) fn of_range(offset_bytes: u32, length_bytes: u32) -> u64 {
    let (first, count) = (offset_bytes / PAGE_SIZE_BYTES, length_bytes / PAGE_SIZE_BYTES);
    debug_assert!(first + count <= 64, "an object has at most 64 pages");
    let ones = if count >= 64 { u64::MAX } else { (1u64 << count) - 1 };
    ones << first
}

/// The whole pages of an object below its first `visible_bytes`.
pub(crate) fn below(visible_bytes: u32) -> u64 {
    of_range(0, visible_bytes / PAGE_SIZE_BYTES * PAGE_SIZE_BYTES)
}

pub(crate) fn pages(mask: u64) -> impl Iterator<Item = usize> {
    (0..64).filter(move |page| mask & (1 << page) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_cover_the_range() {
        assert_eq!(of_range(0, 4096), 1);
        assert_eq!(of_range(8192, 8192), 0b1100);
        assert_eq!(of_range(0, 64 * 4096), u64::MAX);
        assert_eq!(below(0), 0);
        assert_eq!(below(4096 * 3 + 100), 0b111);
        assert_eq!(below(64 * 4096), u64::MAX);
    }

    #[test]
    fn pack_and_scatter_are_inverse_over_the_mask() {
        let whole: Vec<u8> = (0..4 * PAGE).map(|at| (at / PAGE) as u8 + 1).collect();
        let packed = pack(&whole, 0b1010);
        assert_eq!(packed.len(), 2 * PAGE);
        assert!(packed[..PAGE].iter().all(|&byte| byte == 2) && packed[PAGE..].iter().all(|&byte| byte == 4));
        let rebuilt = scatter(AlignedBuffer::zeroed(4 * PAGE), 0b1010, &packed);
        let expected: Vec<u8> =
            whole.iter().enumerate().map(|(at, &byte)| if at / PAGE % 2 == 1 { byte } else { 0 }).collect();
        assert_eq!(rebuilt.as_slice(), &expected[..]);
        assert!(pack(&whole, 0).is_empty());
    }
}
