//! The ops: what the OSD does with each request, as a PG's primary, as a replica, and for
//! admin queries (`docs/design/osd.md` has the rules; `docs/design/wire-protocol.md` the bytes).
//!
//! Every op on a PG's data first settles the epoch (older than ours: `WrongEpoch`; newer: wait
//! a moment for the map, then `Busy` at a primary and `WrongEpoch` at a replica), then the role
//! (primary ops only at the primary, replica ops only at members), then the arguments (the
//! object belongs to the PG, the range is 4 KiB aligned and inside one object), then fencing
//! (no lease, no service). Only then does it touch the engine or the network.
//!
//! A primary write takes the object's queue (`locks.rs`), mints the version from the PG epoch
//! and the engine's newest version of the object, writes locally and sends the same version to
//! every other member in parallel, and acknowledges only when all of them have it durable.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cluster::layout::VERSION_COUNTER_BITS;
use cluster::{mint_version, object_pg, ClusterMap};
use engine::{AlignedBuffer, EngineError, ObjectId, Reply, Request as EngineRequest, PAGE_SIZE_BYTES};
use tokio::sync::{watch, Notify};
use wire::{Body, Frame, ListEntry, Opcode, PgId, Request, Response, Status};

use crate::engine_io::EngineIo;
use crate::limits::OBJECT_SIZE_MAX_BYTES;
use crate::liveness::Liveness;
use crate::locks::ObjectLocks;
use crate::peers::Peers;

/// Zeros for WriteZeroes and partial Trims, sliced without allocating.
static ZEROS: [u8; OBJECT_SIZE_MAX_BYTES] = [0; OBJECT_SIZE_MAX_BYTES];

/// Why an op failed; [`OpError::status`] decides what the requester sees.
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
    #[error("busy: {0}")]
    Busy(String),
    #[error("engine: {0}")]
    Engine(#[from] EngineError),
    #[error("replica osd.{osd} failed the op with {status}")]
    Replica { osd: u32, status: Status },
}

impl OpError {
    pub(crate) fn status(&self) -> Status {
        match self {
            OpError::NotPrimary { .. } => Status::NotPrimary,
            OpError::WrongEpoch { .. } => Status::WrongEpoch,
            OpError::EpochAhead { .. } | OpError::Busy(_) => Status::Busy,
            OpError::InvalidArgument(_) => Status::InvalidArgument,
            OpError::OutOfRange(_) => Status::OutOfRange,
            OpError::NoSuchObject => Status::NoSuchObject,
            OpError::Engine(error) => engine_status(error),
            OpError::Replica { status, .. } => *status,
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
        EngineError::Disk(_) | EngineError::Poisoned { .. } => Status::IoError,
    }
}

/// A PG as one map publishes it.
struct PgView {
    map: Arc<ClusterMap>,
    pool: u32,
    pg: u32,
    epoch: u64,
    pg_count: u32,
    min_size: u8,
}

impl PgView {
    fn lookup(map: &Arc<ClusterMap>, pg: PgId) -> Option<PgView> {
        let pool = map.pools.get(&pg.pool)?;
        let table = map.pg_tables.get(&pg.pool)?;
        if pg.pg >= pool.pg_count || pool.pg_count == 0 {
            return None;
        }
        let (epoch, _) = table.pgs.get(pg.pg as usize)?;
        Some(PgView {
            map: map.clone(),
            pool: pg.pool,
            pg: pg.pg,
            epoch: *epoch,
            pg_count: pool.pg_count,
            min_size: pool.min_size,
        })
    }

    /// Primary first.
    fn members(&self) -> &[u32] {
        &self.map.pg_tables[&self.pool].pgs[self.pg as usize].1
    }
}

/// A change to one object, as the primary sends it to every member.
enum Mutation {
    Write { offset_bytes: u32, data: Bytes },
    Delete,
}

/// What a connection knows about its own requests: the writes in flight, so a Flush can wait
/// for those that came before it.
#[derive(Default)]
pub(crate) struct ConnectionState {
    next_write: Cell<u64>,
    writes: RefCell<BTreeSet<u64>>,
    write_done: Notify,
}

/// What a request reserved on its connection when it arrived (before it runs).
pub(crate) enum Ticket<'a> {
    None,
    /// Held until the write has replied; dropping it lets later Flushes go.
    Write {
        _ticket: WriteTicket<'a>,
    },
    /// Waits for the writes numbered below `upto`.
    Flush {
        upto: u64,
    },
}

pub(crate) struct WriteTicket<'a> {
    state: &'a ConnectionState,
    seq: u64,
}

impl Drop for WriteTicket<'_> {
    fn drop(&mut self) {
        self.state.writes.borrow_mut().remove(&self.seq);
        self.state.write_done.notify_waiters();
    }
}

impl ConnectionState {
    /// Reserves the request's place in the connection's order; called as each request is read,
    /// before any of it runs.
    pub(crate) fn ticket(&self, frame: &Frame) -> Ticket<'_> {
        match frame.opcode() {
            Opcode::Write | Opcode::WriteZeroes | Opcode::Trim => {
                let seq = self.next_write.get();
                self.next_write.set(seq + 1);
                self.writes.borrow_mut().insert(seq);
                Ticket::Write { _ticket: WriteTicket { state: self, seq } }
            }
            Opcode::Flush => Ticket::Flush { upto: self.next_write.get() },
            _ => Ticket::None,
        }
    }

    async fn writes_before(&self, upto: u64) {
        loop {
            let done = self.write_done.notified();
            if self.writes.borrow().first().is_none_or(|&oldest| oldest >= upto) {
                return;
            }
            done.await;
        }
    }
}

/// The OSD's state on its thread.
pub(crate) struct Osd {
    pub(crate) id: u32,
    pub(crate) engine: Rc<EngineIo>,
    pub(crate) liveness: Rc<Liveness>,
    pub(crate) peers: Peers,
    object_size_bytes: u32,
    map: watch::Receiver<Arc<ClusterMap>>,
    locks: ObjectLocks,
    epoch_wait: Duration,
    ops_in_flight: Cell<usize>,
    ops_idle: Notify,
    stopping: Cell<bool>,
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
        map: watch::Receiver<Arc<ClusterMap>>,
        epoch_wait: Duration,
    ) -> Osd {
        let object_size_bytes = engine.with(|engine| engine.object_size_bytes());
        Osd {
            id,
            engine,
            liveness,
            peers,
            object_size_bytes,
            map,
            locks: ObjectLocks::default(),
            epoch_wait,
            ops_in_flight: Cell::new(0),
            ops_idle: Notify::new(),
            stopping: Cell::new(false),
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
    pub(crate) async fn handle(&self, frame: Frame, connection: &ConnectionState, ticket: Ticket<'_>) -> Frame {
        let request_id = frame.request_id;
        let request_epoch = frame.epoch;
        let Body::Request(request) = frame.body else {
            unreachable!("the connection hands only requests to the handler");
        };
        let opcode = request.opcode();
        let pg = request.pg();
        self.ops_in_flight.set(self.ops_in_flight.get() + 1);
        let _op = OpGuard { osd: self };
        self.engine.note_activity();
        let result = if self.stopping.get() && opcode != Opcode::Ping {
            Err(OpError::Busy("the osd is shutting down".into()))
        } else {
            self.execute(request_epoch, request, connection, ticket).await
        };
        let epoch = pg.map_or(0, |pg| self.current_epoch(pg));
        self.engine.note_activity();
        match result {
            Ok(response) => Frame::response(request_id, epoch, response),
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

    async fn execute(
        &self,
        epoch: u64,
        request: Request,
        connection: &ConnectionState,
        ticket: Ticket<'_>,
    ) -> Result<Response, OpError> {
        match request {
            Request::Read { pg, inode, offset_bytes, length_bytes } => {
                let view = self.primary_pg(pg, epoch).await?;
                let (object, offset) = self.locate(&view, inode, offset_bytes, u64::from(length_bytes))?;
                self.fence()?;
                let _object = self.locks.read(object).await;
                self.recheck_primary(pg, epoch)?;
                let data = self.read(object, offset, length_bytes).await?.1;
                Ok(Response::Read { data })
            }
            Request::Stat { pg, object } => {
                let view = self.primary_pg(pg, epoch).await?;
                let object = self.check_object(&view, object)?;
                self.fence()?;
                let _object = self.locks.read(object).await;
                self.recheck_primary(pg, epoch)?;
                if !self.object_exists(object) {
                    return Err(OpError::NoSuchObject);
                }
                let version = self.engine.with(|engine| engine.object_version(object)).unwrap_or(0);
                Ok(Response::Stat { version })
            }
            Request::Write { pg, inode, offset_bytes, data } => {
                let view = self.primary_pg(pg, epoch).await?;
                let (object, offset) = self.locate(&view, inode, offset_bytes, data.len() as u64)?;
                self.replicate(pg, epoch, object, Mutation::Write { offset_bytes: offset, data }).await?;
                drop(ticket);
                Ok(Response::Write)
            }
            Request::WriteZeroes { pg, inode, offset_bytes, length_bytes } => {
                let view = self.primary_pg(pg, epoch).await?;
                let (object, offset) = self.locate(&view, inode, offset_bytes, u64::from(length_bytes))?;
                let data = Bytes::from_static(&ZEROS[..length_bytes as usize]);
                self.replicate(pg, epoch, object, Mutation::Write { offset_bytes: offset, data }).await?;
                drop(ticket);
                Ok(Response::WriteZeroes)
            }
            Request::Trim { pg, inode, offset_bytes, length_bytes } => {
                let view = self.primary_pg(pg, epoch).await?;
                let (object, offset) = self.locate(&view, inode, offset_bytes, u64::from(length_bytes))?;
                let mutation = if offset == 0 && length_bytes == self.object_size_bytes {
                    Mutation::Delete
                } else {
                    Mutation::Write { offset_bytes: offset, data: Bytes::from_static(&ZEROS[..length_bytes as usize]) }
                };
                self.replicate(pg, epoch, object, mutation).await?;
                drop(ticket);
                Ok(Response::Trim)
            }
            Request::Flush => {
                if let Ticket::Flush { upto } = ticket {
                    connection.writes_before(upto).await;
                }
                Ok(Response::Flush)
            }
            Request::SecWrite { pg, object, version, offset_bytes, data } => {
                let view = self.secondary_pg(pg, epoch).await?;
                let object = self.check_object(&view, object)?;
                check_version(version, epoch)?;
                self.check_range(offset_bytes, data.len() as u64)?;
                self.fence()?;
                let request = EngineRequest::WriteVersioned {
                    object,
                    offset_bytes,
                    data: AlignedBuffer::from_slice(&data),
                    version,
                };
                self.apply_versioned(object, version, request).await?;
                Ok(Response::SecWrite)
            }
            Request::SecDelete { pg, object, version } => {
                let view = self.secondary_pg(pg, epoch).await?;
                let object = self.check_object(&view, object)?;
                check_version(version, epoch)?;
                self.fence()?;
                self.apply_versioned(object, version, EngineRequest::DeleteVersioned { object, version }).await?;
                Ok(Response::SecDelete)
            }
            Request::SecRead { pg, object, offset_bytes, length_bytes } => {
                let view = self.secondary_pg(pg, epoch).await?;
                let object = self.check_object(&view, object)?;
                self.check_range(offset_bytes, u64::from(length_bytes))?;
                self.fence()?;
                if !self.object_exists(object) {
                    return Err(OpError::NoSuchObject);
                }
                let (version, data) = self.read(object, offset_bytes, length_bytes).await?;
                Ok(Response::SecRead { version, data })
            }
            Request::SecList { pg, start, count_max } => {
                let view = self.secondary_pg(pg, epoch).await?;
                self.fence()?;
                let count_max = count_max.min(wire::limits::LIST_ENTRIES_MAX_COUNT) as usize;
                let start = ObjectId { inode: start.inode, stripe: start.stripe };
                let entries = self.engine.with(|engine| {
                    engine
                        .list_objects()
                        .into_iter()
                        .filter(|(object, _)| {
                            *object >= start && object_pg(object.inode, object.stripe, view.pg_count) == view.pg
                        })
                        .take(count_max)
                        .map(|(object, version)| ListEntry { object: wire_object(object), version })
                        .collect()
                });
                Ok(Response::SecList { entries })
            }
            Request::ObjectInfo { pg, object } => {
                let map = self.map.borrow().clone();
                let view = PgView::lookup(&map, pg)
                    .ok_or_else(|| OpError::InvalidArgument(format!("pg {}.{} does not exist", pg.pool, pg.pg)))?;
                let object = self.check_object(&view, object)?;
                let _object = self.locks.read(object).await;
                if !self.object_exists(object) {
                    return Err(OpError::NoSuchObject);
                }
                let (version, data) = self.read(object, 0, self.object_size_bytes).await?;
                Ok(Response::ObjectInfo { version, data_crc32c: crc32c::crc32c(&data) })
            }
            Request::Ping => Ok(Response::Ping),
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

    /// The PG's epoch in the current map (zero if it does not exist).
    fn current_epoch(&self, pg: PgId) -> u64 {
        let map = self.map.borrow();
        map.pg_tables.get(&pg.pool).and_then(|table| table.pgs.get(pg.pg as usize)).map_or(0, |(epoch, _)| *epoch)
    }

    /// The PG at exactly the request's epoch: older is `WrongEpoch`; newer waits up to
    /// `epoch_wait` for the map to catch up, then is `EpochAhead`.
    async fn pg_at_epoch(&self, pg: PgId, epoch: u64) -> Result<PgView, OpError> {
        let deadline = tokio::time::Instant::now() + self.epoch_wait;
        let mut receiver = self.map.clone();
        loop {
            let map = receiver.borrow_and_update().clone();
            let view = PgView::lookup(&map, pg);
            let ours = view.as_ref().map_or(0, |view| view.epoch);
            match view {
                Some(view) if view.epoch == epoch => return Ok(view),
                Some(view) if epoch < view.epoch => return Err(OpError::WrongEpoch { ours, theirs: epoch }),
                None if epoch == 0 => {
                    return Err(OpError::InvalidArgument(format!("pg {}.{} does not exist", pg.pool, pg.pg)))
                }
                _ => {}
            }
            let changed = tokio::time::timeout_at(deadline, receiver.changed()).await;
            if !matches!(changed, Ok(Ok(()))) {
                if ours == 0 && PgView::lookup(&map, pg).is_none() {
                    return Err(OpError::InvalidArgument(format!("pg {}.{} does not exist", pg.pool, pg.pg)));
                }
                return Err(OpError::EpochAhead { ours, theirs: epoch });
            }
        }
    }

    /// The PG for a primary op: at the request's epoch, with this OSD as its primary.
    async fn primary_pg(&self, pg: PgId, epoch: u64) -> Result<PgView, OpError> {
        let view = self.pg_at_epoch(pg, epoch).await?;
        let primary = view.members().first().copied();
        if primary != Some(self.id) {
            return Err(OpError::NotPrimary { primary });
        }
        Ok(view)
    }

    /// After waiting for the object's queue: the map may have moved on meanwhile.
    fn recheck_primary(&self, pg: PgId, epoch: u64) -> Result<PgView, OpError> {
        let map = self.map.borrow().clone();
        let Some(view) = PgView::lookup(&map, pg) else {
            return Err(OpError::WrongEpoch { ours: 0, theirs: epoch });
        };
        if view.epoch != epoch {
            return Err(OpError::WrongEpoch { ours: view.epoch, theirs: epoch });
        }
        let primary = view.members().first().copied();
        if primary != Some(self.id) {
            return Err(OpError::NotPrimary { primary });
        }
        Ok(view)
    }

    /// The PG for a replica op: at exactly the request's epoch, with this OSD a member.
    async fn secondary_pg(&self, pg: PgId, epoch: u64) -> Result<PgView, OpError> {
        let view = self.pg_at_epoch(pg, epoch).await.map_err(|error| match error {
            OpError::EpochAhead { ours, theirs } => OpError::WrongEpoch { ours, theirs },
            other => other,
        })?;
        if !view.members().contains(&self.id) {
            return Err(OpError::InvalidArgument(format!(
                "osd.{} is not a member of pg {}.{} at epoch {epoch}",
                self.id, pg.pool, pg.pg
            )));
        }
        Ok(view)
    }

    fn fence(&self) -> Result<(), OpError> {
        if self.liveness.may_serve() {
            Ok(())
        } else {
            Err(OpError::Busy("the osd's lease is not current".into()))
        }
    }

    fn check_object(&self, view: &PgView, object: wire::ObjectId) -> Result<ObjectId, OpError> {
        let actual = object_pg(object.inode, object.stripe, view.pg_count);
        if actual != view.pg {
            return Err(OpError::InvalidArgument(format!(
                "object {:#x}:{} belongs to pg {}.{actual}, not {}.{}",
                object.inode, object.stripe, view.pool, view.pool, view.pg
            )));
        }
        Ok(ObjectId { inode: object.inode, stripe: object.stripe })
    }

    /// A range within an object: non-empty, 4 KiB aligned, inside the object.
    fn check_range(&self, offset_bytes: u32, length_bytes: u64) -> Result<(), OpError> {
        let page = u64::from(PAGE_SIZE_BYTES);
        if length_bytes == 0 || u64::from(offset_bytes) % page != 0 || length_bytes % page != 0 {
            return Err(OpError::InvalidArgument(format!(
                "range offset_bytes={offset_bytes} length_bytes={length_bytes} is empty or not 4 KiB aligned"
            )));
        }
        if u64::from(offset_bytes) + length_bytes > u64::from(self.object_size_bytes) {
            return Err(OpError::OutOfRange(format!(
                "range offset_bytes={offset_bytes} length_bytes={length_bytes} exceeds the object size of {} bytes",
                self.object_size_bytes
            )));
        }
        Ok(())
    }

    /// The object and offset within it of a volume range, which must lie in one object of the PG.
    fn locate(
        &self,
        view: &PgView,
        inode: u64,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> Result<(ObjectId, u32), OpError> {
        let page = u64::from(PAGE_SIZE_BYTES);
        if length_bytes == 0 || offset_bytes % page != 0 || length_bytes % page != 0 {
            return Err(OpError::InvalidArgument(format!(
                "range offset_bytes={offset_bytes} length_bytes={length_bytes} is empty or not 4 KiB aligned"
            )));
        }
        let object_size = u64::from(self.object_size_bytes);
        let stripe = offset_bytes / object_size;
        // Cannot truncate: below the object size, a u32.
        let offset_in_object = (offset_bytes % object_size) as u32;
        if u64::from(offset_in_object) + length_bytes > object_size {
            return Err(OpError::OutOfRange(format!(
                "range offset_bytes={offset_bytes} length_bytes={length_bytes} crosses the end of object {stripe} ({object_size}-byte objects)"
            )));
        }
        let object = self.check_object(view, wire::ObjectId { inode, stripe })?;
        Ok((object, offset_in_object))
    }

    fn object_exists(&self, object: ObjectId) -> bool {
        self.engine.with(|engine| engine.object_exists(object))
    }

    async fn read(&self, object: ObjectId, offset_bytes: u32, length_bytes: u32) -> Result<(u64, Bytes), OpError> {
        match self.engine.submit(EngineRequest::Read { object, offset_bytes, length_bytes }).await? {
            Reply::Read { version, data } => Ok((version, Bytes::from_owner(BufferBytes(data)))),
            other => unreachable!("the engine answered a read with {other:?}"),
        }
    }

    /// A replica applies the primary's version. Already holding exactly that version means a
    /// retried request: success. Holding a newer one means this replica saw a write the primary
    /// did not (an unacknowledged op); the op fails with `Busy` and the client's retry, with a
    /// newer version, goes through.
    async fn apply_versioned(&self, object: ObjectId, version: u64, request: EngineRequest) -> Result<(), OpError> {
        match self.engine.submit(request).await {
            Ok(_) => Ok(()),
            Err(EngineError::StaleVersion { current, .. }) if current == version => Ok(()),
            Err(EngineError::StaleVersion { current, .. }) => {
                tracing::warn!(osd = self.id, %object, version, current, "refusing an older version from the primary");
                Err(OpError::Busy(format!("object {object} is at version {current}, newer than {version}")))
            }
            Err(error) => Err(error.into()),
        }
    }

    /// The primary's write path: queue on the object, mint the version, write everywhere, and
    /// succeed only if every member of the PG has it durable.
    async fn replicate(&self, pg: PgId, epoch: u64, object: ObjectId, mutation: Mutation) -> Result<(), OpError> {
        self.fence()?;
        let _object = self.locks.write(object).await;
        let view = self.recheck_primary(pg, epoch)?;
        let members = view.members();
        if members.len() < usize::from(view.min_size.max(1)) {
            return Err(OpError::Busy(format!(
                "pg {}.{} has {} members, fewer than min_size {}",
                pg.pool,
                pg.pg,
                members.len(),
                view.min_size
            )));
        }
        let mut replicas = Vec::with_capacity(members.len() - 1);
        for &osd in &members[1..] {
            let address = view.map.address(osd).ok_or_else(|| OpError::Busy(format!("member osd.{osd} is down")))?;
            replicas.push((osd, address));
        }
        let known = self.engine.with(|engine| engine.object_version(object));
        if matches!(mutation, Mutation::Delete) && known.is_none() {
            // Never written here, so nowhere in the PG (members hold the same objects).
            return Ok(());
        }
        let version = mint_version(epoch, known);
        let wire_object = wire_object(object);
        let (local, remote) = match mutation {
            Mutation::Write { offset_bytes, data } => (
                EngineRequest::WriteVersioned { object, offset_bytes, data: AlignedBuffer::from_slice(&data), version },
                Request::SecWrite { pg, object: wire_object, version, offset_bytes, data },
            ),
            Mutation::Delete => (
                EngineRequest::DeleteVersioned { object, version },
                Request::SecDelete { pg, object: wire_object, version },
            ),
        };
        // Queued locally first; the sends go out while the local request waits for the next
        // engine poll, which comes once this task yields.
        let local = self.engine.submit(local);
        let remotes = replicas.iter().map(|(osd, address)| self.peers.call(*osd, address, epoch, remote.clone()));
        let (local, remotes) = futures_util::future::join(local, futures_util::future::join_all(remotes)).await;
        local?;
        for ((osd, _), result) in replicas.iter().zip(remotes) {
            replica_outcome(*osd, epoch, result)?;
        }
        // Nothing is acknowledged once the lease may have run out, even if it is durable.
        self.fence()
    }
}

fn replica_outcome(osd: u32, epoch: u64, result: Result<net::Reply, String>) -> Result<(), OpError> {
    let reply = result.map_err(|reason| OpError::Busy(format!("replica osd.{osd}: {reason}")))?;
    match reply.response {
        Response::SecWrite | Response::SecDelete => Ok(()),
        Response::Failed { status: Status::NoSuchObject, opcode: Opcode::SecDelete } => Ok(()),
        Response::Failed { status: Status::WrongEpoch, .. } => {
            Err(OpError::Busy(format!("replica osd.{osd} is at epoch {} of the pg, this osd at {epoch}", reply.epoch)))
        }
        Response::Failed { status: status @ (Status::NoSpace | Status::Corrupt | Status::IoError), .. } => {
            Err(OpError::Replica { osd, status })
        }
        Response::Failed { status, .. } => Err(OpError::Busy(format!("replica osd.{osd} answered {status}"))),
        other => Err(OpError::Busy(format!("replica osd.{osd} answered with an unexpected {}", other.opcode()))),
    }
}

/// A primary of epoch `epoch` mints versions below `(epoch + 1) << 40` (`cluster::mint_version`);
/// a higher one is a bug or hostile, and storing it would let a later mint overflow.
fn check_version(version: u64, epoch: u64) -> Result<(), OpError> {
    if version == 0 || version >> VERSION_COUNTER_BITS > epoch {
        return Err(OpError::InvalidArgument(format!(
            "version {version:#x} cannot come from a primary of epoch {epoch}"
        )));
    }
    Ok(())
}

fn wire_object(object: ObjectId) -> wire::ObjectId {
    wire::ObjectId { inode: object.inode, stripe: object.stripe }
}

/// Lends an engine buffer to `Bytes` without copying it.
struct BufferBytes(AlignedBuffer);

impl AsRef<[u8]> for BufferBytes {
    fn as_ref(&self) -> &[u8] {
        self.0.as_slice()
    }
}
