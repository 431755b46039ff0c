//! The event loop: each disk completion goes to the part that submitted its request, and the
//! steps after every batch run in a fixed order (write-back, sealing records, flush barriers).
//! Also what every part shares to submit I/O, complete requests and stop taking writes after a
//! failure.

use platform::{AlignedBuffer, Disk, DiskCompletion, DiskOp, DiskRequest};

use super::{Engine, Io, PendingEntry, PendingKind, QueuedWrite};
use crate::{Completion, EngineError, Reply};

impl<D: Disk> Engine<D> {
    pub(super) fn on_disk_completion(&mut self, completion: DiskCompletion) {
        let io = self.ios.remove(&completion.id).expect("completion of a known request");
        let DiskCompletion { buffer, result, offset_bytes, .. } = completion;
        match io {
            Io::BigData { write } => self.on_big_data(write, result),
            Io::JournalRecord { seq } => self.on_record_written(seq, buffer, result),
            Io::ReadRun { read, run } => self.on_read_run(read, run, buffer, result),
            Io::MetaLoad { page } => self.on_meta_load(page, buffer, result),
            Io::WritebackCopyRead { run } => self.on_writeback_copy_read(run, buffer, result),
            Io::WritebackCopyWrite | Io::WritebackBarrier | Io::MetaWrite | Io::Superblock => {
                let job = self.writeback_job.as_mut().expect("write-back job");
                job.ios_pending -= 1;
                if let Err(error) = result {
                    self.poison(format!("write-back write at offset_bytes={offset_bytes} failed: {error}"));
                }
            }
        }
    }

    pub(super) fn advance(&mut self) {
        self.advance_writeback_job();
        self.maybe_start_writeback_job();
        self.advance_writeback_job();
        self.seal_records();
        self.complete_flush_waiters();
    }

    pub(super) fn complete(&mut self, user_data: u64, result: Result<Reply, EngineError>) {
        self.completions.push(Completion { user_data, result });
    }

    pub(super) fn submit_io(&mut self, io: Io, op: DiskOp, offset_bytes: u64, buffer: AlignedBuffer) {
        if matches!(io, Io::WritebackBarrier | Io::Superblock) {
            self.stats.writeback_barriers += 1;
        }
        let id = self.next_io_id;
        self.next_io_id += 1;
        self.ios.insert(id, io);
        self.disk.submit(DiskRequest { id, op, offset_bytes, buffer });
    }

    pub(super) fn poison(&mut self, reason: String) {
        if self.poisoned.is_none() {
            self.poisoned = Some(reason);
        }
        let reason = self.poisoned.clone().expect("set above");
        let pending: Vec<PendingEntry> = self.pending.drain(..).collect();
        self.pending_bytes = 0;
        for entry in pending {
            self.writes_in_flight.remove(&entry.write_seq);
            if let PendingKind::Big { block, .. } = entry.kind {
                self.release_block(block);
            }
            self.complete(entry.user_data, Err(EngineError::Poisoned { reason: reason.clone() }));
        }
        let mut queues: Vec<QueuedWrite> = self.object_queues.values_mut().flat_map(|queue| queue.drain(..)).collect();
        // In admission order, not the hash map's: the same inputs complete in the same order.
        queues.sort_unstable_by_key(|queued| queued.write_seq);
        for queued in queues {
            self.writes_in_flight.remove(&queued.write_seq);
            self.complete(queued.user_data, Err(EngineError::Poisoned { reason: reason.clone() }));
        }
        self.complete_flush_waiters();
    }
}
