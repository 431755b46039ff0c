//! Heap buffers aligned for `O_DIRECT`.
//!
//! Direct I/O needs the memory address, the length and the file offset aligned to the logical
//! sector size. Every buffer is aligned to 4 KiB, which satisfies 512-byte and 4 KiB devices.

use std::alloc::{self, Layout};
use std::ptr::NonNull;

pub const BUFFER_ALIGNMENT_BYTES: usize = 4096;

/// An owned, zero-initialised, 4 KiB-aligned byte buffer.
pub struct AlignedBuffer {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer owns its allocation exclusively, like a `Vec<u8>`.
unsafe impl Send for AlignedBuffer {}
// SAFETY: shared references only allow reads of initialised bytes.
unsafe impl Sync for AlignedBuffer {}

impl AlignedBuffer {
    /// Allocates `len` zeroed bytes. A zero length allocates nothing.
    pub fn zeroed(len: usize) -> AlignedBuffer {
        if len == 0 {
            return AlignedBuffer { ptr: Self::dangling(), len: 0 };
        }
        let layout = Self::layout(len);
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else { alloc::handle_alloc_error(layout) };
        AlignedBuffer { ptr, len }
    }

    /// Allocates a buffer holding a copy of `bytes`.
    pub fn from_slice(bytes: &[u8]) -> AlignedBuffer {
        let mut buffer = AlignedBuffer::zeroed(bytes.len());
        buffer.as_mut_slice().copy_from_slice(bytes);
        buffer
    }

    pub fn empty() -> AlignedBuffer {
        AlignedBuffer::zeroed(0)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` is valid for `len` initialised bytes (or dangling with len 0).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` is valid for `len` bytes and `&mut self` guarantees exclusivity.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    fn layout(len: usize) -> Layout {
        Layout::from_size_align(len, BUFFER_ALIGNMENT_BYTES).expect("buffer length overflows")
    }

    /// A non-null, aligned address for empty buffers; never dereferenced (length zero).
    fn dangling() -> NonNull<u8> {
        NonNull::new(std::ptr::without_provenance_mut(BUFFER_ALIGNMENT_BYTES)).expect("non-zero address")
    }
}

impl Drop for AlignedBuffer {
    fn drop(&mut self) {
        if self.len != 0 {
            // SAFETY: allocated in `zeroed` with the same layout.
            unsafe { alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
        }
    }
}

impl Clone for AlignedBuffer {
    fn clone(&self) -> AlignedBuffer {
        AlignedBuffer::from_slice(self.as_slice())
    }
}

impl std::fmt::Debug for AlignedBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuffer({} bytes)", self.len)
    }
}

impl std::ops::Deref for AlignedBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::ops::DerefMut for AlignedBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_zeroed() {
        for len in [0, 512, 4096, 131072] {
            let buffer = AlignedBuffer::zeroed(len);
            assert_eq!(buffer.len(), len);
            assert_eq!(buffer.as_ptr() as usize % BUFFER_ALIGNMENT_BYTES, 0);
            assert!(buffer.iter().all(|&b| b == 0));
        }
        let copy = AlignedBuffer::from_slice(&[7u8; 4096]).clone();
        assert!(copy.iter().all(|&b| b == 7));
    }
}
