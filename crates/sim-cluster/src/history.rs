//! What each block may read as, from the history of the writes to it.
//!
//! Every write gets an id and contents made from it and the block's address ([`contents`]), so
//! a read names the write it returns, and anything else (bytes no write made, a write's bytes
//! at another block) is invented data. Trims and zeroes write zeros, like the block before
//! anything is written (id 0).
//!
//! Ops are stamped with a logical clock at their start and end. A read that started at `rs`
//! and ended at `re` may return write W when W started before `re` and no other write was
//! certainly in place over W before `rs` (one that started after W ended and ended before
//! `rs`). A write that failed, or never ended, may have landed at any time after its start. So
//! a read returns the latest acknowledged write or one in flight with it; an acknowledged write
//! that a later read cannot find is lost, and an older one found is stale.

use std::collections::BTreeMap;

/// A block: volume index and block index.
pub(crate) type Address = (usize, u64);

pub(crate) const BLOCK_BYTES: usize = 4096;

/// The id of the zeros: the block before any write, and every trim or zeroing.
pub(crate) const ZEROS: u64 = 0;

#[derive(Debug, Clone)]
struct Write {
    id: u64,
    /// What it writes: its own id, or [`ZEROS`].
    reads_as: u64,
    start: u64,
    /// `None` while in flight, and forever for a write that failed.
    end: Option<u64>,
}

/// The history of every block the workload touched.
#[derive(Debug, Default)]
pub(crate) struct History {
    clock: u64,
    /// Ops that ended (acknowledged, failed or read).
    ops: u64,
    acknowledged: u64,
    next_id: u64,
    blocks: BTreeMap<Address, Vec<Write>>,
}

impl History {
    /// A tick of the logical clock.
    pub(crate) fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// A write (`zeros`: a trim or zeroing) starts; returns its id.
    pub(crate) fn write_started(&mut self, address: Address, zeros: bool) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        let start = self.tick();
        let reads_as = if zeros { ZEROS } else { id };
        self.blocks.entry(address).or_insert_with(initial).push(Write { id, reads_as, start, end: None });
        id
    }

    /// The write `id` was acknowledged.
    pub(crate) fn write_acknowledged(&mut self, address: Address, id: u64) {
        let end = self.tick();
        let write = self
            .blocks
            .get_mut(&address)
            .and_then(|writes| writes.iter_mut().find(|write| write.id == id))
            .expect("a write that started");
        write.end = Some(end);
        self.ops += 1;
        self.acknowledged += 1;
    }

    /// Writes acknowledged so far.
    pub(crate) fn acknowledged_writes(&self) -> u64 {
        self.acknowledged
    }

    /// A write failed: it may land or not, at any time from its start.
    pub(crate) fn write_failed(&mut self) {
        self.ops += 1;
    }

    pub(crate) fn ops(&self) -> u64 {
        self.ops
    }

    /// Checks a read of `address` that started at `start` (a tick taken before it was sent) and
    /// just ended, returning `data`. Returns what is wrong with it.
    pub(crate) fn check_read(&mut self, address: Address, start: u64, data: &[u8]) -> Result<u64, String> {
        let end = self.tick();
        self.ops += 1;
        let found = identify(address, data)?;
        let writes = self.blocks.entry(address).or_insert_with(initial);
        let allowed: Vec<&Write> = writes
            .iter()
            .filter(|write| write.start < end)
            .filter(|write| {
                let superseded = writes.iter().any(|other| {
                    other.id != write.id
                        && write.end.is_some_and(|written| other.start > written)
                        && other.end.is_some_and(|other_end| other_end < start)
                });
                !superseded
            })
            .collect();
        if allowed.iter().any(|write| write.reads_as == found) {
            return Ok(found);
        }
        let latest = writes
            .iter()
            .filter(|write| write.end.is_some_and(|written| written < start))
            .max_by_key(|write| write.end)
            .map_or(ZEROS, |write| write.reads_as);
        let what = if writes.iter().any(|write| write.reads_as == found) { "stale" } else { "never written here" };
        Err(format!(
            "volume {} block {} read as write {found} ({what}); the latest acknowledged before the read is {latest}, \
             and it may also read as any of {:?}",
            address.0,
            address.1,
            allowed.iter().map(|write| write.reads_as).collect::<Vec<_>>()
        ))
    }

    /// Every block touched, for the final check.
    pub(crate) fn addresses(&self) -> Vec<Address> {
        self.blocks.keys().copied().collect()
    }
}

/// The zeros every block starts as, written before the clock's first tick.
fn initial() -> Vec<Write> {
    vec![Write { id: ZEROS, reads_as: ZEROS, start: 0, end: Some(0) }]
}

/// The bytes write `id` puts at `address`: its id and the address, then bytes drawn from both.
pub(crate) fn contents(address: Address, id: u64) -> Vec<u8> {
    assert_ne!(id, ZEROS, "write 0 is the zeros");
    let mut data = vec![0u8; BLOCK_BYTES];
    data[..8].copy_from_slice(&id.to_le_bytes());
    data[8..16].copy_from_slice(&(address.0 as u64).to_le_bytes());
    data[16..24].copy_from_slice(&address.1.to_le_bytes());
    let mut state = id ^ (address.1 << 20) ^ ((address.0 as u64) << 52);
    for chunk in data[24..].chunks_mut(8) {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut mixed = state;
        mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        mixed ^= mixed >> 31;
        chunk.copy_from_slice(&mixed.to_le_bytes()[..chunk.len()]);
    }
    data
}

/// Which write `data` is, read at `address`; an error for bytes no write put there.
fn identify(address: Address, data: &[u8]) -> Result<u64, String> {
    if data.len() != BLOCK_BYTES {
        return Err(format!("volume {} block {} read {} bytes, not {BLOCK_BYTES}", address.0, address.1, data.len()));
    }
    if data.iter().all(|&byte| byte == 0) {
        return Ok(ZEROS);
    }
    let id = u64::from_le_bytes(data[..8].try_into().expect("8 bytes"));
    if id != ZEROS && contents(address, id) == data {
        return Ok(id);
    }
    Err(format!(
        "volume {} block {} read bytes no write put there (they begin {:02x?})",
        address.0,
        address.1,
        &data[..24]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BLOCK: Address = (0, 7);

    #[test]
    fn a_read_may_return_the_latest_acknowledged_write_or_one_in_flight() {
        let mut history = History::default();
        let first = history.write_started(BLOCK, false);
        history.write_acknowledged(BLOCK, first);
        let second = history.write_started(BLOCK, false);
        let start = history.tick();
        assert_eq!(history.check_read(BLOCK, start, &contents(BLOCK, first)), Ok(first));
        assert_eq!(history.check_read(BLOCK, start, &contents(BLOCK, second)), Ok(second));
        history.write_acknowledged(BLOCK, second);
        let start = history.tick();
        let stale = history.check_read(BLOCK, start, &contents(BLOCK, first)).expect_err("stale");
        assert!(stale.contains("stale"), "{stale}");
        assert!(history.check_read(BLOCK, start, &[0; BLOCK_BYTES]).is_err(), "the zeros are long gone");
    }

    #[test]
    fn a_failed_write_may_land_at_any_time_and_bytes_from_elsewhere_are_invented() {
        let mut history = History::default();
        let failed = history.write_started(BLOCK, false);
        let trim = history.write_started(BLOCK, true);
        history.write_acknowledged(BLOCK, trim);
        let start = history.tick();
        assert_eq!(history.check_read(BLOCK, start, &contents(BLOCK, failed)), Ok(failed));
        assert_eq!(history.check_read(BLOCK, start, &[0; BLOCK_BYTES]), Ok(ZEROS));
        let elsewhere = history.check_read(BLOCK, start, &contents((0, 8), failed)).expect_err("moved");
        assert!(elsewhere.contains("no write put there"), "{elsewhere}");
        let mut torn = contents(BLOCK, failed);
        torn[4000] ^= 1;
        assert!(history.check_read(BLOCK, start, &torn).is_err());
    }
}
