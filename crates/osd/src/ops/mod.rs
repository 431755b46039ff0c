//! The ops: what the OSD does with each request (`docs/design/osd.md` has the rules;
//! `docs/design/wire-protocol.md` the bytes).
//!
//! Split by role, as the request's opcode decides it: `admission` decides, with no I/O, whether
//! this OSD may serve a request at all; `primary` serves clients' reads and writes and
//! replicates the writes; `secondary` applies what a primary sends; this file dispatches and
//! serves the ops that address no PG's data (ObjectInfo, Flush, Ping, Space, PgStates);
//! bringing a PG up after its acting set changed, recovery, scrub and strays are in `crate::pg`.

mod admission;
mod connection;
mod flatten;
mod layers;
mod primary;
mod secondary;

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cluster::ClusterMap;
use engine::{AlignedBuffer, EngineError, ObjectId, Reply, Request as EngineRequest};
use meta::MetaStore;
use tokio::sync::{watch, Notify, Semaphore};
use wire::{Body, Frame, Opcode, PgId, Request, Response, Status};

pub(crate) use self::admission::PgView;
use self::admission::{Admitted, Decision, Role};
pub(crate) use self::connection::{ConnectionState, Ticket};
pub(crate) use self::primary::Mutation;
use crate::barrier::WritesByRevision;
use crate::engine_io::EngineIo;
use crate::liveness::Liveness;
use crate::locks::ObjectLocks;
use crate::op_times::{OpTimes, Timed};
use crate::pacer::Pacer;
use crate::peers::Peers;
use crate::pg::state::PgStates;
use crate::pg::{peering, scrub};
use crate::sealed::SealedHeads;

/// How long a client's op waits for its PG to finish peering before answering `Busy`.
const PEERING_WAIT: Duration = Duration::from_secs(5);

/// How long a Barrier waits for its map and the writes admitted before it.
const BARRIER_WAIT: Duration = Duration::from_secs(10);

/// Why an op failed; [`OpError::status`] decides what the requester sees. Every variant that
/// answers `Busy` is a condition the requester outlives by retrying.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpError {
    #[error("not the primary of the pg (its primary is {primary:?})")]
    NotPrimary { primary: Option<u32> },
    #[error("request epoch {theirs} differs from this osd's {ours}")]
    WrongEpoch { ours: u64, theirs: u64 },
    #[error("request epoch {theirs} is ahead of this osd's {ours} and the map did not catch up")]
    EpochAhead { ours: u64, theirs: u64 },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("out of range: {0}")]
    OutOfRange(String),
    #[error("no such object")]
    NoSuchObject,
    #[error("the osd is shutting down")]
    ShuttingDown,
    #[error("the osd's lease is not current")]
    LeaseNotCurrent,
    #[error("pg {}.{} has {members} members, fewer than min_size {min_size}", pg.pool, pg.pg)]
    TooFewMembers { pg: PgId, members: usize, min_size: u8 },
    #[error("member osd.{osd} is down")]
    MemberDown { osd: u32 },
    #[error("secondary osd.{osd}: {source}")]
    SecondaryUnreachable { osd: u32, source: crate::peers::PeerError },
    #[error("secondary osd.{osd} is at epoch {theirs} of the pg, this osd at {ours}")]
    SecondaryAtOtherEpoch { osd: u32, theirs: u64, ours: u64 },
    #[error("secondary osd.{osd} failed the op with {status}")]
    SecondaryFailed { osd: u32, status: Status },
    /// A member holds or remembers a newer version of the object than the one sent.
    #[error("secondary osd.{osd} holds or remembers version {current:#x} of the object, newer than the one sent")]
    SecondaryHoldsNewer { osd: u32, current: u64 },
    #[error("secondary osd.{osd} answered with an unexpected {opcode}")]
    SecondaryAnsweredOther { osd: u32, opcode: Opcode },
    #[error("object {object} is at version {current:#x}, newer than {version:#x}")]
    NewerVersionHeld { object: ObjectId, version: u64, current: u64 },
    #[error("no readable copy of object {object} at base version {base_version:#x} here: {reason}")]
    BaseNotHeld { object: ObjectId, base_version: u64, reason: String },
    #[error("pg {}.{} is peering at epoch {epoch}", pg.pool, pg.pg)]
    PgPeering { pg: PgId, epoch: u64 },
    #[error("pg {}.{} is inactive: {reason}", pg.pool, pg.pg)]
    PgInactive { pg: PgId, reason: String },
    #[error("pg {}.{}: member osd.{osd} has not been listed yet", pg.pool, pg.pg)]
    MemberNotListed { pg: PgId, osd: u32 },
    #[error("pg {}.{}: its history changed under this primary", pg.pool, pg.pg)]
    HistoryChanged { pg: PgId },
    #[error("pg {}.{}: cannot record its acting set: {reason}", pg.pool, pg.pg)]
    HistoryNotRecorded { pg: PgId, reason: String },
    /// This copy cannot be read and the repair from a member's copy could not finish now (a
    /// member did not answer): the client retries, and the read succeeds once the repair can.
    #[error("pg {}.{}: {object}: this copy cannot be read and its repair did not finish: {reason}", pg.pool, pg.pg)]
    RepairUnfinished { pg: PgId, object: ObjectId, reason: String },
    /// This OSD's drive, or a member's, is past the cluster's full ratio: no new objects.
    #[error("osd.{osd} is {used_percent}% full, at or past the full ratio of {full_percent}%: no new objects")]
    Full { osd: u32, used_percent: u32, full_percent: u32 },
    /// The layer is a snapshot's: no client write changes it.
    #[error("layer {inode:#x} is frozen: a snapshot holds it")]
    LayerFrozen { inode: u64 },
    #[error("layer {inode:#x} is a head waiting for its snapshot's seal")]
    LayerSealing { inode: u64 },
    /// No volume's head nor snapshot in this OSD's map: its map is behind the client's, or the
    /// layer was replaced (a rollback) or is being removed.
    #[error("layer {inode:#x} is not in this osd's cluster map")]
    LayerUnknown { inode: u64 },
    #[error("the map of revision {revision} or the writes admitted before it did not arrive in time")]
    BarrierNotReached { revision: u64 },
    #[error("engine: {0}")]
    Engine(#[from] EngineError),
}

impl OpError {
    pub(crate) fn status(&self) -> Status {
        match self {
            OpError::NotPrimary { .. } => Status::NotPrimary,
            OpError::WrongEpoch { .. } => Status::WrongEpoch,
            OpError::InvalidArgument(_) => Status::InvalidArgument,
            OpError::OutOfRange(_) => Status::OutOfRange,
            OpError::NoSuchObject => Status::NoSuchObject,
            OpError::Engine(error) => engine_status(error),
            OpError::Full { .. } => Status::NoSpace,
            OpError::BaseNotHeld { .. } => Status::BaseNotHeld,
            OpError::NewerVersionHeld { .. } => Status::NewerVersion,
            OpError::LayerFrozen { .. } => Status::ReadOnly,
            // A secondary's lack of space is the write's; anything else it answers is a state
            // the write outlives by retrying (a failed drive stops its OSD, which then leaves
            // the PG).
            OpError::SecondaryFailed { status: status @ (Status::NoSpace | Status::Corrupt), .. } => *status,
            OpError::EpochAhead { .. }
            | OpError::ShuttingDown
            | OpError::LeaseNotCurrent
            | OpError::TooFewMembers { .. }
            | OpError::MemberDown { .. }
            | OpError::SecondaryUnreachable { .. }
            | OpError::SecondaryAtOtherEpoch { .. }
            | OpError::SecondaryFailed { .. }
            | OpError::SecondaryHoldsNewer { .. }
            | OpError::SecondaryAnsweredOther { .. }
            | OpError::PgPeering { .. }
            | OpError::PgInactive { .. }
            | OpError::MemberNotListed { .. }
            | OpError::HistoryChanged { .. }
            | OpError::HistoryNotRecorded { .. }
            | OpError::RepairUnfinished { .. }
            | OpError::LayerSealing { .. }
            | OpError::LayerUnknown { .. }
            | OpError::BarrierNotReached { .. } => Status::Busy,
        }
    }
}

/// The status of an engine error.
pub(crate) fn engine_status(error: &EngineError) -> Status {
    match error {
        EngineError::InvalidArgument { .. } => Status::InvalidArgument,
        EngineError::OutOfRange { .. } => Status::OutOfRange,
        EngineError::NoSpace { .. } => Status::NoSpace,
        EngineError::Corrupt { .. } | EngineError::MetaCorrupt { .. } => Status::Corrupt,
        // A version race the requester resolves by retrying with a fresh version.
        EngineError::StaleVersion { .. } => Status::Busy,
        EngineError::Disk(_) => Status::IoError,
        // The drive failed a write: this OSD is stopping (`serve`), and the request is retried
        // on the members left.
        EngineError::Poisoned { .. } => Status::Busy,
    }
}

/// The OSD's state on its thread.
pub(crate) struct Osd {
    pub(crate) id: u32,
    pub(crate) engine: Rc<EngineIo>,
    pub(crate) liveness: Rc<Liveness>,
    pub(crate) peers: Peers,
    pub(crate) store: Arc<dyn MetaStore>,
    pub(crate) pgs: PgStates,
    pub(crate) peering_slots: Rc<Semaphore>,
    pub(crate) object_size_bytes: u32,
    pub(crate) map: watch::Receiver<Arc<ClusterMap>>,
    pub(crate) locks: ObjectLocks,
    pub(crate) epoch_wait: Duration,
    /// How long a client's op waits for its PG to finish peering before answering `Busy`.
    pub(crate) peering_wait: Duration,
    pub(crate) ops_in_flight: Cell<usize>,
    pub(crate) ops_idle: Notify,
    pub(crate) stopping: Cell<bool>,
    /// Paces recovery, backfill and scrub against client ops (`pacer.rs`).
    pub(crate) pacer: Pacer,
    pub(crate) scrubs: scrub::ScrubLog,
    /// PGs whose stray copies could not be removed, tried again after the pause.
    pub(crate) stray_failures: crate::pg::retry::PerPg,
    /// Held by a stray copy's delete from its membership check to its commit, and by every
    /// listing of a PG's objects, so a listing never names a copy a delete decided on under an
    /// older map is about to remove (`stray.rs`).
    pub(crate) stray_gate: tokio::sync::Mutex<()>,
    /// Members that answered a write with `NoSpace`, and when: new objects of their PGs are
    /// refused for [`MEMBER_FULL_HOLD`] before this OSD writes its own copy.
    pub(crate) members_full: std::cell::RefCell<std::collections::BTreeMap<u32, tokio::time::Instant>>,
    /// PGs that came up clean since the last summary line.
    pub(crate) quiet_activations: QuietActivations,
    /// Client writes in flight by the map that admitted them, for the seal of a snapshot.
    pub(crate) client_writes: WritesByRevision,
    /// Heads the mon said are sealed ahead of this OSD's map.
    pub(crate) sealed_heads: SealedHeads,
    /// How long reads, writes and their phases took, for the stop line.
    pub(crate) op_times: OpTimes,
}

/// Counts PGs that came up clean, for one summary line once a burst of them is over (a healthy
/// start logs one line per OSD, not one per PG).
#[derive(Default)]
pub(crate) struct QuietActivations {
    count: Cell<u64>,
    last: Cell<Option<tokio::time::Instant>>,
}

impl QuietActivations {
    pub(crate) fn note(&self) {
        self.count.set(self.count.get() + 1);
        self.last.set(Some(tokio::time::Instant::now()));
    }

    /// The count, once a second has passed since the last activation; resets it.
    fn take_settled(&self) -> Option<u64> {
        let settled = self.last.get().is_some_and(|last| last.elapsed() >= Duration::from_secs(1));
        (settled && self.count.get() > 0).then(|| self.count.replace(0))
    }
}

/// How long the engine sees nothing before the OSD asks it to empty its journal.
const IDLE_WRITEBACK_AFTER: Duration = Duration::from_secs(2);

/// How long a member's `NoSpace` keeps a primary from creating objects in its PGs.
const MEMBER_FULL_HOLD: Duration = Duration::from_secs(5);

/// What admission found for an op, the PG's pool's PG count, the revision of the map that
/// admitted it, and the sealing head whose seal its acknowledgement waits for.
struct AdmittedOp {
    admitted: Admitted,
    pg_count: u32,
    revision: i64,
    sealing: Option<u64>,
}

/// Counts an op in flight, for the shutdown's wait.
struct OpGuard<'a> {
    osd: &'a Osd,
}

impl Drop for OpGuard<'_> {
    fn drop(&mut self) {
        let count = self.osd.ops_in_flight.get() - 1;
        self.osd.ops_in_flight.set(count);
        if count == 0 {
            self.osd.ops_idle.notify_waiters();
        }
    }
}

impl Osd {
    pub(crate) fn new(
        id: u32,
        engine: Rc<EngineIo>,
        liveness: Rc<Liveness>,
        peers: Peers,
        store: Arc<dyn MetaStore>,
        map: watch::Receiver<Arc<ClusterMap>>,
        epoch_wait: Duration,
    ) -> Osd {
        let object_size_bytes = engine.with(|engine| engine.object_size_bytes());
        let pacer = Pacer::new(map.borrow().settings.clone());
        Osd {
            id,
            engine,
            liveness,
            peers,
            store,
            pgs: PgStates::default(),
            peering_slots: Rc::new(Semaphore::new(peering::PEERING_CONCURRENCY)),
            object_size_bytes,
            map,
            locks: ObjectLocks::default(),
            epoch_wait,
            peering_wait: PEERING_WAIT,
            ops_in_flight: Cell::new(0),
            ops_idle: Notify::new(),
            stopping: Cell::new(false),
            pacer,
            scrubs: scrub::ScrubLog::default(),
            stray_failures: Default::default(),
            stray_gate: tokio::sync::Mutex::new(()),
            members_full: Default::default(),
            quiet_activations: QuietActivations::default(),
            client_writes: WritesByRevision::default(),
            sealed_heads: SealedHeads::default(),
            op_times: OpTimes::default(),
        }
    }

    /// Refuses a new object (`object` not held here) while this OSD's drive is past the full
    /// ratio, or while one of `members` answered `NoSpace` within [`MEMBER_FULL_HOLD`]:
    /// overwrites and deletes go on, and a write is refused before any copy of it is made.
    pub(crate) fn refuse_new_object(&self, object: ObjectId, members: &[u32]) -> Result<(), OpError> {
        if self.object_exists(object) {
            return Ok(());
        }
        let full_percent = self.map.borrow().settings.full_ratio_percent;
        let used_percent = self.engine.with(|engine| engine.used_percent());
        if used_percent >= full_percent {
            return Err(OpError::Full { osd: self.id, used_percent, full_percent });
        }
        let mut full = self.members_full.borrow_mut();
        full.retain(|_, at| at.elapsed() < MEMBER_FULL_HOLD);
        match members.iter().find(|member| full.contains_key(member)) {
            Some(&osd) => Err(OpError::Full { osd, used_percent: 100, full_percent }),
            None => Ok(()),
        }
    }

    /// Remembers that `member` answered a write with `NoSpace`.
    pub(crate) fn member_full(&self, member: u32) {
        self.members_full.borrow_mut().insert(member, tokio::time::Instant::now());
    }

    /// Sets the pace of background copies every tick, for as long as the OSD runs.
    pub(crate) async fn pace(self: Rc<Self>) {
        let mut tick = tokio::time::interval(crate::pacer::TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut logged = (tokio::time::Instant::now(), 0);
        loop {
            tick.tick().await;
            let settings = self.map.borrow().settings.clone();
            self.pacer.tick(&settings);
            self.engine.write_back_when_idle(IDLE_WRITEBACK_AFTER);
            if let Some(count) = self.quiet_activations.take_settled() {
                tracing::info!(osd = self.id, pgs = count, led = self.pgs.all().len(), "pgs active and clean");
            }
            let (rate, granted) = self.pacer.figures();
            if logged.0.elapsed() >= Duration::from_secs(10) && granted != logged.1 {
                let copied = granted - logged.1;
                tracing::info!(
                    osd = self.id,
                    rate_bytes_per_s = rate,
                    copied_bytes = copied,
                    "background copies paced"
                );
                logged = (tokio::time::Instant::now(), granted);
            }
        }
    }

    /// Refuses new ops from now on and waits until those in flight have replied, or `timeout`.
    /// Returns how many are still in flight.
    pub(crate) async fn stop_ops(&self, timeout: Duration) -> usize {
        self.stopping.set(true);
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let idle = self.ops_idle.notified();
            if self.ops_in_flight.get() == 0 {
                return 0;
            }
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                return self.ops_in_flight.get();
            }
        }
    }

    /// Serves one request frame and returns its reply frame.
    pub(crate) async fn handle(
        self: &Rc<Self>,
        frame: Frame,
        connection: &ConnectionState,
        ticket: Ticket<'_>,
    ) -> Frame {
        let request_id = frame.request_id;
        let request_epoch = frame.epoch;
        let Body::Request(request) = frame.body else {
            unreachable!("the connection hands only requests to the handler");
        };
        let opcode = request.opcode();
        let pg = request.pg();
        let started = tokio::time::Instant::now();
        self.ops_in_flight.set(self.ops_in_flight.get() + 1);
        let _op = OpGuard { osd: self };
        self.engine.note_activity();
        let result = if self.stopping.get() && opcode != Opcode::Ping {
            Err(OpError::ShuttingDown)
        } else {
            self.execute(request_epoch, request, connection, ticket).await
        };
        let epoch = pg.map_or(0, |pg| self.current_epoch(pg));
        self.engine.note_activity();
        if result.is_ok() && matches!(opcode, Opcode::Read | Opcode::Write | Opcode::WriteZeroes | Opcode::Trim) {
            self.pacer.client_op(started.elapsed());
        }
        let timed = match opcode {
            Opcode::Read => Some(Timed::Read),
            Opcode::Write => Some(Timed::Write),
            Opcode::SecWrite => Some(Timed::SecWrite),
            _ => None,
        };
        if let (Some(timed), true) = (timed, result.is_ok()) {
            self.op_times.record(timed, started.elapsed());
        }
        match result {
            Ok(response) => Frame::response(request_id, epoch, response),
            // Only a secondary's op can meet a newer version: a primary mints above what it holds.
            Err(OpError::NewerVersionHeld { current, .. }) => {
                assert!(opcode.is_secondary(), "{opcode} refused for a newer version held");
                Frame::response(request_id, epoch, Response::NewerVersionHeld { opcode, current })
            }
            Err(error) => {
                let status = error.status();
                match status {
                    Status::Corrupt | Status::IoError | Status::NoSpace => {
                        tracing::warn!(osd = self.id, request_id, %opcode, ?pg, %error, "op failed")
                    }
                    _ => tracing::debug!(osd = self.id, request_id, %opcode, ?pg, %error, "op failed"),
                }
                Frame::response(request_id, epoch, Response::Failed { opcode, status })
            }
        }
    }

    /// Admits the request, then hands it to its role's path.
    async fn execute(
        self: &Rc<Self>,
        epoch: u64,
        request: Request,
        connection: &ConnectionState,
        ticket: Ticket<'_>,
    ) -> Result<Response, OpError> {
        let AdmittedOp { admitted, pg_count, revision, sealing } = self.admit(epoch, &request).await?;
        let object = || admitted.object.expect("admission located the object");
        let _write = matches!(request, Request::Write { .. } | Request::WriteZeroes { .. } | Request::Trim { .. })
            .then(|| self.client_writes.admitted(revision));
        // A write to a head waiting for its seal runs now and is acknowledged once the head is
        // sealed (ADR 0026): its ack, not its landing, is what must follow every OSD's refusal
        // of the frozen layer.
        let sealed = || async move {
            match sealing {
                Some(inode) => self.until_sealed(inode, tokio::time::Instant::now() + self.epoch_wait).await,
                None => Ok(()),
            }
        };
        match request {
            Request::Read { pg, length_bytes, .. } => {
                let (object, offset) = object();
                self.primary_read(pg, epoch, object, offset, length_bytes).await
            }
            Request::Stat { pg, .. } => self.primary_stat(pg, epoch, object().0).await,
            Request::Changes { pg, since, .. } => self.primary_changes(pg, epoch, object().0, since).await,
            Request::Flatten { pg, inode, start, count_max } => {
                self.primary_flatten(pg, epoch, inode, start, count_max).await
            }
            Request::Write { pg, data, .. } => {
                let (object, offset_bytes) = object();
                self.replicate(pg, epoch, object, Mutation::Write { offset_bytes, data }).await?;
                sealed().await?;
                drop(ticket);
                Ok(Response::Write)
            }
            Request::WriteZeroes { pg, length_bytes, .. } => {
                let (object, offset) = object();
                self.replicate(pg, epoch, object, Mutation::zeros(offset, length_bytes)).await?;
                sealed().await?;
                drop(ticket);
                Ok(Response::WriteZeroes)
            }
            Request::Trim { pg, length_bytes, .. } => {
                let (object, offset) = object();
                self.replicate(pg, epoch, object, self.trim_mutation(object, offset, length_bytes)).await?;
                sealed().await?;
                drop(ticket);
                Ok(Response::Trim)
            }
            Request::SecWrite { version, data, .. } => {
                let (object, offset) = object();
                self.sec_write(object, version, offset, &data).await
            }
            Request::SecWritePages { base_version, version, page_mask, data, .. } => {
                self.sec_write_pages(object().0, base_version, version, page_mask, &data).await
            }
            Request::SecReplace { version, page_mask, data, .. } => {
                self.sec_replace(object().0, version, page_mask, &data).await
            }
            Request::SecDelete { version, .. } => self.sec_delete(object().0, version).await,
            Request::SecRead { length_bytes, .. } => {
                let (object, offset) = object();
                self.sec_read(object, offset, length_bytes).await
            }
            Request::SecList { pg, start, count_max } => Ok(self.sec_list(pg, pg_count, start, count_max).await),
            Request::ObjectInfo { .. } => self.object_info(object().0).await,
            Request::Flush => {
                if let Ticket::Flush { mark } = ticket {
                    connection.writes_before(mark).await;
                }
                Ok(Response::Flush)
            }
            Request::Ping => Ok(Response::Ping),
            Request::PgStates => Ok(self.pg_states()),
            Request::VolumeRedundancy { inode } => Ok(self.volume_redundancy(inode)),
            Request::VolumeUsage { inode } => Ok(self.volume_usage(inode)),
            Request::Barrier { revision } => self.barrier(revision).await,
            Request::Sealed { inode } => {
                self.sealed_heads.seal(inode, &self.map.borrow());
                Ok(Response::Sealed)
            }
            Request::Space => {
                let space = self.engine.with(|engine| engine.space());
                Ok(Response::Space {
                    used_bytes: space.used_bytes,
                    total_bytes: space.total_bytes,
                    object_count: space.object_count,
                })
            }
        }
    }

    /// Admission on the current map; a request ahead of it, or one naming a layer the map does
    /// not know (the client's map is ahead: a new head), waits up to `epoch_wait` for the map
    /// to catch up. A write to a head waiting for its seal is admitted, to be acknowledged only
    /// once the head is sealed ([`Osd::until_sealed`]).
    async fn admit(&self, epoch: u64, request: &Request) -> Result<AdmittedOp, OpError> {
        let deadline = tokio::time::Instant::now() + self.epoch_wait;
        let mut receiver = self.map.clone();
        loop {
            let map = receiver.borrow_and_update().clone();
            let view = request.pg().and_then(|pg| PgView::lookup(&map, pg));
            let osd = admission::Osd {
                id: self.id,
                object_size_bytes: self.object_size_bytes,
                may_serve: self.liveness.may_serve(),
            };
            let op = |admitted, sealing| AdmittedOp {
                admitted,
                pg_count: view.map_or(0, |view| view.pg_count),
                revision: map.revision,
                sealing,
            };
            match admission::admit(view, osd, epoch, request) {
                Decision::Admit(admitted) => match layers::check_layer(&map, request, &self.sealed_heads) {
                    Ok(()) => return Ok(op(admitted, None)),
                    Err(OpError::LayerSealing { inode }) => return Ok(op(admitted, Some(inode))),
                    Err(error @ OpError::LayerUnknown { .. }) => {
                        if !matches!(tokio::time::timeout_at(deadline, receiver.changed()).await, Ok(Ok(()))) {
                            return Err(error);
                        }
                        continue;
                    }
                    Err(error) => return Err(error),
                },
                Decision::Refuse(error) => return Err(error),
                Decision::WaitForMap => {}
            }
            let changed = tokio::time::timeout_at(deadline, receiver.changed()).await;
            if !matches!(changed, Ok(Ok(()))) {
                let pg = request.pg().expect("only requests addressing a pg wait for the map");
                let map = receiver.borrow().clone();
                return Err(admission::map_behind(PgView::lookup(&map, pg), Role::of(request), pg, epoch));
            }
        }
    }

    /// Answers once this OSD applied the map of `revision` and no client write admitted under
    /// an older map is in flight: from then on, no write to a layer that map froze lands.
    async fn barrier(&self, revision: u64) -> Result<Response, OpError> {
        let target = i64::try_from(revision).unwrap_or(i64::MAX);
        let mut receiver = self.map.clone();
        let reached = async {
            let _ = receiver.wait_for(|map| map.revision >= target).await;
            self.client_writes.drained_before(target).await;
        };
        tokio::time::timeout(BARRIER_WAIT, reached).await.map_err(|_| OpError::BarrierNotReached { revision })?;
        Ok(Response::Barrier)
    }

    /// The PG's epoch in the current map (zero if it does not exist).
    fn current_epoch(&self, pg: PgId) -> u64 {
        self.map.borrow().pg_epoch_and_primary(pg.pool, pg.pg).map_or(0, |(epoch, _)| epoch)
    }

    pub(crate) fn fence(&self) -> Result<(), OpError> {
        if self.liveness.may_serve() {
            Ok(())
        } else {
            Err(OpError::LeaseNotCurrent)
        }
    }

    /// The version, crc32c (unwritten ranges read as zeros) and pages present of a whole object.
    async fn object_info(&self, object: ObjectId) -> Result<Response, OpError> {
        let _object = self.locks.read(object).await;
        if !self.object_exists(object) {
            return Err(OpError::NoSuchObject);
        }
        let read = self.read(object, 0, self.object_size_bytes).await?;
        Ok(Response::ObjectInfo {
            version: read.version,
            data_crc32c: crc32c::crc32c(&read.data),
            present: read.present,
        })
    }

    pub(crate) fn object_exists(&self, object: ObjectId) -> bool {
        self.engine.with(|engine| engine.object_exists(object))
    }

    pub(crate) async fn read(
        &self,
        object: ObjectId,
        offset_bytes: u32,
        length_bytes: u32,
    ) -> Result<ObjectRead, OpError> {
        match self.engine.submit(EngineRequest::Read { object, offset_bytes, length_bytes }).await? {
            Reply::Read { version, data, present } => {
                Ok(ObjectRead { version, present, data: Bytes::from_owner(BufferBytes(data)) })
            }
            other => unreachable!("the engine answered a read with {other:?}"),
        }
    }
}

/// What a member holds of a range of an object: its version, the pages of the range that hold
/// data (bit `i`: page `i` of the object; the others read as zeros because no write gave them
/// any), and the bytes.
#[derive(Debug, Clone)]
pub(crate) struct ObjectRead {
    pub(crate) version: u64,
    pub(crate) present: u64,
    pub(crate) data: Bytes,
}

/// Lends an engine buffer to `Bytes` without copying it.
struct BufferBytes(AlignedBuffer);

impl AsRef<[u8]> for BufferBytes {
    fn as_ref(&self) -> &[u8] {
        self.0.as_slice()
    }
}
