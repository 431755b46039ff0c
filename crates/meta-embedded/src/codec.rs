//! A small little-endian binary codec for the log records and the snapshot.
//!
//! Decoding treats its input as untrusted (a damaged file passes its checksum only by
//! accident, and a bug in an older version may have written garbage): every read checks the
//! remaining length and returns a `DecodeError` naming the offset instead of panicking.

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    pub offset_bytes: usize,
    pub reason: &'static str,
}

#[derive(Default)]
pub struct Encoder {
    pub bytes: Vec<u8>,
}

impl Encoder {
    pub fn u8(&mut self, value: u8) {
        self.bytes.push(value);
    }

    pub fn u32(&mut self, value: u32) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    pub fn u64(&mut self, value: u64) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    pub fn i64(&mut self, value: i64) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    /// A length-prefixed byte string. Lengths are bounded by the record size limit, far below
    /// `u32::MAX`.
    pub fn bytes(&mut self, value: &[u8]) {
        let size_bytes = u32::try_from(value.len()).expect("byte string larger than the record limit");
        self.u32(size_bytes);
        self.bytes.extend_from_slice(value);
    }
}

pub struct Decoder<'a> {
    bytes: &'a [u8],
    offset_bytes: usize,
}

impl<'a> Decoder<'a> {
    pub fn new(bytes: &'a [u8]) -> Decoder<'a> {
        Decoder { bytes, offset_bytes: 0 }
    }

    pub fn error(&self, reason: &'static str) -> DecodeError {
        DecodeError { offset_bytes: self.offset_bytes, reason }
    }

    pub fn is_empty(&self) -> bool {
        self.offset_bytes == self.bytes.len()
    }

    fn take(&mut self, size_bytes: usize) -> Result<&'a [u8], DecodeError> {
        let remaining = self.bytes.len() - self.offset_bytes;
        if size_bytes > remaining {
            return Err(self.error("truncated"));
        }
        let slice = &self.bytes[self.offset_bytes..self.offset_bytes + size_bytes];
        self.offset_bytes += size_bytes;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut array = [0u8; N];
        array.copy_from_slice(self.take(N)?);
        Ok(array)
    }

    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }

    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    pub fn bytes(&mut self) -> Result<Vec<u8>, DecodeError> {
        let size_bytes = usize::try_from(self.u32()?).map_err(|_| self.error("length overflows usize"))?;
        Ok(self.take(size_bytes)?.to_vec())
    }

    pub fn string(&mut self) -> Result<String, DecodeError> {
        let start = self.offset_bytes;
        String::from_utf8(self.bytes()?).map_err(|_| DecodeError { offset_bytes: start, reason: "key is not UTF-8" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        let mut encoder = Encoder::default();
        encoder.u8(7);
        encoder.u32(0xdead_beef);
        encoder.i64(-5);
        encoder.bytes(b"value");
        let bytes = encoder.bytes;
        let mut decoder = Decoder::new(&bytes);
        assert_eq!(decoder.u8(), Ok(7));
        assert_eq!(decoder.u32(), Ok(0xdead_beef));
        assert_eq!(decoder.i64(), Ok(-5));
        assert_eq!(decoder.string().as_deref(), Ok("value"));
        assert!(decoder.is_empty());
        for cut in 0..bytes.len() {
            let mut decoder = Decoder::new(&bytes[..cut]);
            let result = (|| {
                decoder.u8()?;
                decoder.u32()?;
                decoder.i64()?;
                decoder.bytes()
            })();
            assert_eq!(result.unwrap_err().reason, "truncated");
        }
    }
}
