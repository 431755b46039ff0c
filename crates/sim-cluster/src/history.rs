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
    snapshots: Vec<Snapshot>,
}

/// A snapshot of a volume taken between two ticks, as a read of every block over that span:
/// each block holds the latest write acknowledged before the start or one in flight with the
/// call (ADR 0026's cut). What each block of it was first read as is pinned: a snapshot never
/// changes.
#[derive(Debug)]
struct Snapshot {
    volume: usize,
    start: u64,
    end: u64,
    pinned: BTreeMap<u64, u64>,
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
        let allowed = allowed_over(writes, start, end);
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

    /// A snapshot of `volume` was asked for at tick `start` and returned at `end`; returns its
    /// index.
    pub(crate) fn snapshot_taken(&mut self, volume: usize, start: u64, end: u64) -> usize {
        self.snapshots.push(Snapshot { volume, start, end, pinned: BTreeMap::new() });
        self.snapshots.len() - 1
    }

    /// Checks a read of `block` of snapshot `index` that returned `data`: what the block may
    /// hold by the cut, and what it was read as before if it was.
    pub(crate) fn check_snapshot_read(&mut self, index: usize, block: u64, data: &[u8]) -> Result<u64, String> {
        self.ops += 1;
        let (volume, start, end) = {
            let snapshot = &self.snapshots[index];
            (snapshot.volume, snapshot.start, snapshot.end)
        };
        let address = (volume, block);
        let found = identify(address, data)?;
        if let Some(&pinned) = self.snapshots[index].pinned.get(&block) {
            if pinned != found {
                return Err(format!(
                    "snapshot {index} of volume {volume}: block {block} read as write {found}, after {pinned}: a snapshot changed"
                ));
            }
            return Ok(found);
        }
        let writes = self.blocks.entry(address).or_insert_with(initial);
        let allowed = allowed_over(writes, start, end);
        if !allowed.iter().any(|write| write.reads_as == found) {
            return Err(format!(
                "snapshot {index} of volume {volume} (taken from tick {start} to {end}): block {block} reads as write \
                 {found}, not one the cut allows: {:?}",
                allowed.iter().map(|write| write.reads_as).collect::<Vec<_>>()
            ));
        }
        self.snapshots[index].pinned.insert(block, found);
        Ok(found)
    }

    /// The cut across blocks: if a write is in the snapshot, so is every write acknowledged
    /// before it was issued. Checked over the blocks read of it so far.
    pub(crate) fn check_snapshot_cut(&self, index: usize) -> Result<(), String> {
        let snapshot = &self.snapshots[index];
        let writes_of = |block: u64| self.blocks.get(&(snapshot.volume, block)).map_or(&[][..], Vec::as_slice);
        // The writes a block may hold: for the zeros, every trim the cut allows reads as them.
        // Which one it holds is unknown, so each rule takes the one that asks the least: the
        // oldest for what the block asks of the others, the newest for what it asks of itself.
        let candidates = |block: u64, found: u64| -> Vec<&Write> {
            allowed_over(writes_of(block), snapshot.start, snapshot.end)
                .into_iter()
                .filter(|write| write.reads_as == found)
                .collect()
        };
        let latest_issue = snapshot
            .pinned
            .iter()
            .filter_map(|(&block, &found)| candidates(block, found).iter().map(|write| write.start).min())
            .max()
            .unwrap_or(0);
        for (&block, &found) in &snapshot.pinned {
            let Some(write) = candidates(block, found).into_iter().max_by_key(|write| write.start) else { continue };
            let newer = writes_of(block).iter().find(|other| {
                other.id != write.id
                    && write.end.is_some_and(|written| other.start > written)
                    && other.end.is_some_and(|other_end| other_end < latest_issue)
            });
            if let Some(newer) = newer {
                return Err(format!(
                    "snapshot {index} of volume {}: block {block} holds write {found}, but write {} was acknowledged \
                     (tick {:?}) before a write the snapshot holds was issued (tick {latest_issue})",
                    snapshot.volume, newer.reads_as, newer.end
                ));
            }
        }
        Ok(())
    }

    /// The blocks of snapshot `index` read so far, and what they hold.
    pub(crate) fn snapshot_blocks(&self, index: usize) -> BTreeMap<u64, u64> {
        self.snapshots[index].pinned.clone()
    }

    /// A rollback of volume `volume` to the snapshot whose blocks read as `held` (every other
    /// block as zeros) starts: one write per block touched, each reading as the snapshot's.
    /// Returns the writes, to acknowledge when the rollback returns.
    pub(crate) fn rollback_started(&mut self, volume: usize, held: &BTreeMap<u64, u64>) -> Vec<(Address, u64)> {
        let blocks: Vec<Address> = self.blocks.keys().copied().filter(|address| address.0 == volume).collect();
        let start = self.tick();
        let mut started = Vec::new();
        for address in blocks {
            self.next_id += 1;
            let id = self.next_id;
            let reads_as = held.get(&address.1).copied().unwrap_or(ZEROS);
            self.blocks.get_mut(&address).expect("a block touched").push(Write { id, reads_as, start, end: None });
            started.push((address, id));
        }
        started
    }

    /// Writes that started and were never made (a rollback the mon refused).
    pub(crate) fn cancel(&mut self, writes: &[(Address, u64)]) {
        for (address, id) in writes {
            if let Some(history) = self.blocks.get_mut(address) {
                history.retain(|write| write.id != *id);
            }
        }
    }

    /// The volume snapshot `index` is of.
    pub(crate) fn snapshot_volume(&self, index: usize) -> usize {
        self.snapshots[index].volume
    }
}

/// The writes a read over ticks `start` to `end` may return: started before it ended, and not
/// certainly overwritten before it started (by a write that started after it ended and ended
/// before `start`).
fn allowed_over(writes: &[Write], start: u64, end: u64) -> Vec<&Write> {
    writes
        .iter()
        .filter(|write| write.start < end)
        .filter(|write| {
            !writes.iter().any(|other| {
                other.id != write.id
                    && write.end.is_some_and(|written| other.start > written)
                    && other.end.is_some_and(|other_end| other_end < start)
            })
        })
        .collect()
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
    fn a_snapshot_holds_a_cut_and_never_changes() {
        let mut history = History::default();
        let (a, b) = ((0, 1), (0, 2));
        let old_a = history.write_started(a, false);
        history.write_acknowledged(a, old_a);
        let start = history.tick();
        let in_flight = history.write_started(b, false);
        let end = history.tick();
        let after = history.write_started(a, false);
        history.write_acknowledged(a, after);
        history.write_acknowledged(b, in_flight);
        let snapshot = history.snapshot_taken(0, start, end);
        // A write issued after the call returned is not in it; one in flight may be.
        assert!(history.check_snapshot_read(snapshot, 1, &contents(a, after)).is_err());
        assert_eq!(history.check_snapshot_read(snapshot, 1, &contents(a, old_a)), Ok(old_a));
        assert_eq!(history.check_snapshot_read(snapshot, 2, &contents(b, in_flight)), Ok(in_flight));
        assert_eq!(history.check_snapshot_cut(snapshot), Ok(()));
        // Once read, a block reads the same for ever.
        let changed = history.check_snapshot_read(snapshot, 2, &[0; BLOCK_BYTES]).expect_err("changed");
        assert!(changed.contains("a snapshot changed"), "{changed}");
    }

    #[test]
    fn a_snapshot_holding_a_write_holds_every_write_acknowledged_before_it_was_issued() {
        let mut history = History::default();
        let (a, b) = ((0, 1), (0, 2));
        let start = history.tick();
        let first = history.write_started(a, false);
        history.write_acknowledged(a, first);
        let second = history.write_started(b, false);
        let end = history.tick();
        history.write_acknowledged(b, second);
        let snapshot = history.snapshot_taken(0, start, end);
        // Each block alone may read either way, but b's write in it brings a's.
        assert_eq!(history.check_snapshot_read(snapshot, 1, &[0; BLOCK_BYTES]), Ok(ZEROS));
        assert_eq!(history.check_snapshot_read(snapshot, 2, &contents(b, second)), Ok(second));
        let broken = history.check_snapshot_cut(snapshot).expect_err("the cut is broken");
        assert!(broken.contains("before a write the snapshot holds was issued"), "{broken}");
    }

    #[test]
    fn zeros_in_a_snapshot_ask_the_other_blocks_only_what_the_oldest_trim_would() {
        let mut history = History::default();
        let (a, b) = ((0, 1), (0, 2));
        let start = history.tick();
        // b's write is acknowledged early in the call and the snapshot lacks it; a reads as
        // zeros, which the untouched block was before any trim: a trim issued later in the call
        // must not count as held.
        let early = history.write_started(b, false);
        history.write_acknowledged(b, early);
        let late_trim = history.write_started(a, true);
        history.write_acknowledged(a, late_trim);
        let end = history.tick();
        let snapshot = history.snapshot_taken(0, start, end);
        assert_eq!(history.check_snapshot_read(snapshot, 1, &[0; BLOCK_BYTES]), Ok(ZEROS));
        assert_eq!(history.check_snapshot_read(snapshot, 2, &[0; BLOCK_BYTES]), Ok(ZEROS));
        assert_eq!(history.check_snapshot_cut(snapshot), Ok(()));
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
