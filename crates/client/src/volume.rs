//! `Volume`: block I/O on one volume.
//!
//! Each call is checked (alignment, range) against the current map before anything is sent,
//! cut into per-object pieces, and each piece runs as one wire request to its PG's primary.
//! A call of one piece (any I/O within one object, such as every 4 KiB I/O) runs in the
//! caller's task with nothing spawned and nothing allocated by this crate; the pieces of a
//! larger call run concurrently, at most `PIECES_IN_FLIGHT_MAX` at once.
//!
//! Retry policy of one piece (the reply decides, the map tells where to go next):
//!
//! | outcome of an attempt | what the piece does |
//! |---|---|
//! | `Ok` reply of the request's opcode | done |
//! | no PG table entry, no members, primary not running | wait for a newer map, retry |
//! | cannot connect, connection closed or failed | wait for a newer map, retry |
//! | `NotPrimary`, `WrongEpoch`, `Busy` | wait for a newer map, retry |
//! | the map routes the PG elsewhere (a new epoch or primary) before the reply | retry at once |
//! | no reply within `reply_timeout` | close that connection, retry |
//! | `Corrupt`, `NoSpace`, `IoError` | fail with the matching error |
//! | any other status, or a reply that does not fit the request | fail |
//!
//! Waits start at `retry_backoff_min` and double up to `retry_backoff_max`; a wait for a newer
//! map ends as soon as one arrives. A failover (a new map, a new primary) is retried through;
//! a PG that stays inactive blocks the piece until it serves again, or, with `io_timeout` set,
//! until that long after the start of the call, when it fails with `ClientError::Unavailable`
//! naming the PG and the last problem.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use cluster::{ClusterMap, SnapshotRecord, VolumeRecord};
use futures_util::stream::{self, StreamExt};
use tokio::time::Instant;
use wire::{Request, Response, Status};

use crate::client::Client;
use crate::route::{pieces, route, Piece};
use crate::tracker::WriteTracker;
use crate::{ClientError, Operation, ALLOCATION_OBJECTS_MAX, BLOCK_SIZE_BYTES, PIECES_IN_FLIGHT_MAX};

/// A handle to one open volume. Clones share it; any number of calls may run at once.
#[derive(Clone)]
pub struct Volume {
    inner: Arc<VolumeInner>,
}

struct VolumeInner {
    client: Client,
    /// The volume's name, or a snapshot's `VOLUME@SNAP`.
    name: String,
    target: Target,
    pool: u32,
    object_size_bytes: u32,
    size_bytes_at_open: u64,
    writes: WriteTracker,
}

/// What a handle reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// A volume: its head, which a snapshot or a rollback replaces, found in the map at every
    /// attempt. `family` tells the volume from a later one of the same name.
    Head { family: u64 },
    /// A snapshot: one frozen layer, read only, unless `removal` (its volume is being removed
    /// and the handle trims it away).
    Snapshot { inode: u64, removal: bool },
}

impl Volume {
    pub(crate) fn new(client: Client, record: &VolumeRecord) -> Volume {
        let target = Target::Head { family: cluster::inode::placement_key(record.id) };
        Volume::with_target(
            client,
            record.name.clone(),
            target,
            record.pool,
            record.object_size_bytes,
            record.size_bytes,
        )
    }

    pub(crate) fn snapshot(client: Client, record: &SnapshotRecord) -> Volume {
        Volume::snapshot_target(client, record, false)
    }

    pub(crate) fn snapshot_removal(client: Client, record: &SnapshotRecord) -> Volume {
        Volume::snapshot_target(client, record, true)
    }

    fn snapshot_target(client: Client, record: &SnapshotRecord, removal: bool) -> Volume {
        let target = Target::Snapshot { inode: record.inode, removal };
        let (pool, object_size_bytes, size_bytes) = (record.pool, record.object_size_bytes, record.size_bytes);
        Volume::with_target(client, record.full_name(), target, pool, object_size_bytes, size_bytes)
    }

    fn with_target(
        client: Client,
        name: String,
        target: Target,
        pool: u32,
        object_size_bytes: u32,
        size_bytes: u64,
    ) -> Volume {
        Volume {
            inner: Arc::new(VolumeInner {
                client,
                name,
                target,
                pool,
                object_size_bytes,
                size_bytes_at_open: size_bytes,
                writes: WriteTracker::new(),
            }),
        }
    }

    /// The volume's name, or `VOLUME@SNAP` for a snapshot.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The inode reads and writes go to now: the volume's head in the current map (the pool id
    /// in the top 8 bits), or the snapshot's layer.
    pub fn id(&self) -> u64 {
        let map = self.inner.client.map();
        self.inode(&map).unwrap_or(match self.inner.target {
            Target::Head { family } => family,
            Target::Snapshot { inode, .. } => inode,
        })
    }

    /// A snapshot: every write, write_zeroes and trim fails with `ClientError::ReadOnly`.
    pub fn is_read_only(&self) -> bool {
        matches!(self.inner.target, Target::Snapshot { removal: false, .. })
    }

    /// The size in the current cluster map (it follows resizes); the size at open if the
    /// volume has left the map.
    pub fn size_bytes(&self) -> u64 {
        let map = self.inner.client.map();
        self.size_in(&map).unwrap_or(self.inner.size_bytes_at_open)
    }

    pub fn object_size_bytes(&self) -> u32 {
        self.inner.object_size_bytes
    }

    /// Reads `length_bytes` at `offset_bytes`; never written ranges read as zeros.
    pub async fn read(&self, offset_bytes: u64, length_bytes: u32) -> Result<Bytes, ClientError> {
        let length = u64::from(length_bytes);
        let (map, pg_count, inode) = self.check(Operation::Read, offset_bytes, length)?;
        if length == 0 {
            return Ok(Bytes::new());
        }
        let started = Instant::now();
        let mut all = pieces(inode, self.inner.pool, pg_count, self.inner.object_size_bytes, offset_bytes, length);
        let first = all.next().expect("a call of non-zero length has a piece");
        if u64::from(first.length_bytes) == length {
            return self.read_piece(map, first, started).await;
        }
        let mut buffer = BytesMut::zeroed(usize::try_from(length).expect("a u32 length fits in usize"));
        let mut reads = stream::iter(std::iter::once(first).chain(all))
            .map(|piece| {
                let map = map.clone();
                async move { self.read_piece(map, piece, started).await.map(|data| (piece, data)) }
            })
            .buffer_unordered(PIECES_IN_FLIGHT_MAX);
        while let Some(result) = reads.next().await {
            let (piece, data) = result?;
            let start = usize::try_from(piece.offset_in_request).expect("within a u32 length");
            buffer[start..start + data.len()].copy_from_slice(&data);
        }
        Ok(buffer.freeze())
    }

    /// Writes `data` at `offset_bytes`. Durable on every replica of the PGs when it returns
    /// `Ok`; on an error, any part of the range may or may not have been written.
    pub async fn write(&self, offset_bytes: u64, data: Bytes) -> Result<(), ClientError> {
        self.mutate(Operation::Write, offset_bytes, data.len() as u64, |piece, inode| {
            let start = usize::try_from(piece.offset_in_request).expect("within the buffer");
            Request::Write {
                pg: piece.pg,
                inode,
                offset_bytes: piece.offset_bytes,
                data: data.slice(start..start + piece.length_bytes as usize),
            }
        })
        .await
    }

    /// Makes the range read as zeros: whole objects are deleted, partial ones zeroed.
    pub async fn write_zeroes(&self, offset_bytes: u64, length_bytes: u64) -> Result<(), ClientError> {
        self.mutate(Operation::WriteZeroes, offset_bytes, length_bytes, zero_request).await
    }

    /// Discards the range; it reads as zeros afterwards (the same requests as `write_zeroes`).
    pub async fn trim(&self, offset_bytes: u64, length_bytes: u64) -> Result<(), ClientError> {
        self.mutate(Operation::Trim, offset_bytes, length_bytes, zero_request).await
    }

    /// Which parts of the range hold data, at object granularity: runs of `(length_bytes,
    /// allocated)` in order, covering the range from `offset_bytes` on. An object that exists
    /// counts as allocated whole; one that was never written (or was trimmed whole) is a hole
    /// and reads as zeros. At most [`ALLOCATION_OBJECTS_MAX`] objects are asked about, so the
    /// runs may cover only a prefix of a long range.
    pub async fn allocation(&self, offset_bytes: u64, length_bytes: u64) -> Result<Vec<(u64, bool)>, ClientError> {
        let (map, pg_count, inode) = self.check(Operation::Allocation, offset_bytes, length_bytes)?;
        let started = Instant::now();
        let asked: Vec<Piece> =
            pieces(inode, self.inner.pool, pg_count, self.inner.object_size_bytes, offset_bytes, length_bytes)
                .take(ALLOCATION_OBJECTS_MAX)
                .collect();
        let answers: Vec<Result<bool, ClientError>> = stream::iter(asked.iter().copied())
            .map(|piece| {
                let map = map.clone();
                async move { self.object_exists(map, piece, started).await }
            })
            .buffered(PIECES_IN_FLIGHT_MAX)
            .collect()
            .await;
        let mut runs: Vec<(u64, bool)> = Vec::new();
        for (piece, answer) in asked.iter().zip(answers) {
            let allocated = answer?;
            match runs.last_mut() {
                Some((length, last)) if *last == allocated => *length += u64::from(piece.length_bytes),
                _ => runs.push((u64::from(piece.length_bytes), allocated)),
            }
        }
        Ok(runs)
    }

    async fn object_exists(&self, map: Arc<ClusterMap>, piece: Piece, started: Instant) -> Result<bool, ClientError> {
        let stat = |inode| Request::Stat { pg: piece.pg, object: wire::ObjectId { inode, stripe: piece.stripe } };
        match self.run_piece(map, Operation::Allocation, &piece, &stat, started).await {
            Ok((Response::Stat { .. }, _)) => Ok(true),
            Ok((other, osd)) => {
                Err(self.bad_reply(Operation::Allocation, &piece, osd, format!("a {} reply to a Stat", other.opcode())))
            }
            Err(ClientError::Refused { status: Status::NoSuchObject, .. }) => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// The visible snapshots below this handle's layer in its chain, newest first: what
    /// [`Volume::changes`] may compare it with (a snapshot older than a rollback's is not; a
    /// clone's parent snapshots, of another volume, are).
    pub fn earlier_snapshots(&self) -> Vec<SnapshotRecord> {
        let map = self.inner.client.map();
        let Some(inode) = self.inode(&map) else { return Vec::new() };
        map.chain(inode)
            .skip(1)
            .filter_map(|(layer, _)| map.snapshot_of(layer))
            .filter(|record| !record.hidden && !record.deleting)
            .cloned()
            .collect()
    }

    /// Which pages of the range may differ from snapshot `since` (one of
    /// [`Volume::earlier_snapshots`], `SNAP` for one of this volume's, `VOLUME@SNAP` for any):
    /// runs of `(length_bytes, changed)` in order, from
    /// `offset_bytes` on, never `false` where the content differs. The OSDs answer from what
    /// each layer above `since` holds, reading no data. At most [`ALLOCATION_OBJECTS_MAX`]
    /// objects are asked about, so the runs may cover only a prefix of a long range.
    pub async fn changes(
        &self,
        since: &str,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> Result<Vec<(u64, bool)>, ClientError> {
        let (map, pg_count, inode) = self.check(Operation::Changes, offset_bytes, length_bytes)?;
        let volume = match cluster::split_snapshot_name(&self.inner.name) {
            Some((volume, _)) => volume,
            None => self.inner.name.as_str(),
        };
        let full_name = match cluster::split_snapshot_name(since) {
            Some(_) => since.to_string(),
            None => cluster::snapshot_name(volume, since),
        };
        let Some(record) = map.snapshots.get(&full_name).filter(|record| !record.hidden && !record.deleting) else {
            return Err(ClientError::NoSuchSnapshot { name: full_name });
        };
        if record.inode == inode || !map.chain(inode).any(|(layer, _)| layer == record.inode) {
            return Err(ClientError::NotEarlier { layer: self.inner.name.clone(), since: full_name });
        }
        let since_inode = record.inode;
        let started = Instant::now();
        let asked: Vec<Piece> =
            pieces(inode, self.inner.pool, pg_count, self.inner.object_size_bytes, offset_bytes, length_bytes)
                .take(ALLOCATION_OBJECTS_MAX)
                .collect();
        let answers: Vec<Result<u64, ClientError>> = stream::iter(asked.iter().copied())
            .map(|piece| {
                let map = map.clone();
                async move { self.object_changes(map, piece, since_inode, started).await }
            })
            .buffered(PIECES_IN_FLIGHT_MAX)
            .collect()
            .await;
        let object_size = u64::from(self.inner.object_size_bytes);
        let mut runs: Vec<(u64, bool)> = Vec::new();
        for (piece, answer) in asked.iter().zip(answers) {
            let pages = answer?;
            let first = (piece.offset_bytes % object_size) / BLOCK_SIZE_BYTES;
            for page in first..first + u64::from(piece.length_bytes) / BLOCK_SIZE_BYTES {
                let changed = pages & (1 << page) != 0;
                match runs.last_mut() {
                    Some((length, last)) if *last == changed => *length += BLOCK_SIZE_BYTES,
                    _ => runs.push((BLOCK_SIZE_BYTES, changed)),
                }
            }
        }
        Ok(runs)
    }

    async fn object_changes(
        &self,
        map: Arc<ClusterMap>,
        piece: Piece,
        since: u64,
        started: Instant,
    ) -> Result<u64, ClientError> {
        let changes =
            |inode| Request::Changes { pg: piece.pg, object: wire::ObjectId { inode, stripe: piece.stripe }, since };
        match self.run_piece(map, Operation::Changes, &piece, &changes, started).await? {
            (Response::Changes { pages }, _) => Ok(pages),
            (other, osd) => {
                Err(self.bad_reply(Operation::Changes, &piece, osd, format!("a {} reply to a Changes", other.opcode())))
            }
        }
    }

    /// Waits until every write, write_zeroes and trim issued on this volume handle (or its
    /// clones) before the call has finished. Sends nothing: acknowledged writes are durable.
    pub async fn flush(&self) -> Result<(), ClientError> {
        self.inner.writes.wait_for_earlier_writes().await;
        Ok(())
    }

    /// The inode calls go to in `map`: the volume's current head, or the snapshot's layer;
    /// `None` once the volume or snapshot has left the map.
    fn inode(&self, map: &ClusterMap) -> Option<u64> {
        match self.inner.target {
            Target::Head { family } => map
                .volumes
                .get(&self.inner.name)
                .filter(|record| cluster::inode::placement_key(record.id) == family)
                .map(|record| record.id),
            Target::Snapshot { inode, .. } => {
                map.snapshots.get(&self.inner.name).filter(|record| record.inode == inode).map(|_| inode)
            }
        }
    }

    /// The volume's or snapshot's size in `map`, if it is still there.
    fn size_in(&self, map: &ClusterMap) -> Option<u64> {
        self.inode(map)?;
        match self.inner.target {
            Target::Head { .. } => map.volumes.get(&self.inner.name).map(|record| record.size_bytes),
            Target::Snapshot { .. } => map.snapshots.get(&self.inner.name).map(|record| record.size_bytes),
        }
    }

    /// Checks a call against the current map; returns the map, the pool's PG count and the
    /// inode the call goes to.
    fn check(
        &self,
        operation: Operation,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> Result<(Arc<ClusterMap>, u32, u64), ClientError> {
        let volume = || self.inner.name.clone();
        if offset_bytes % BLOCK_SIZE_BYTES != 0 || length_bytes % BLOCK_SIZE_BYTES != 0 {
            return Err(ClientError::InvalidArgument {
                volume: volume(),
                operation,
                offset_bytes,
                length_bytes,
                reason: "offset and length must be multiples of 4096 bytes",
            });
        }
        if self.is_read_only() && !matches!(operation, Operation::Read | Operation::Allocation | Operation::Changes) {
            return Err(ClientError::ReadOnly { volume: volume(), operation });
        }
        let map = self.inner.client.map();
        let (Some(inode), Some(size_bytes)) = (self.inode(&map), self.size_in(&map)) else {
            return Err(ClientError::NoSuchVolume { name: volume() });
        };
        if offset_bytes.checked_add(length_bytes).is_none_or(|end| end > size_bytes) {
            return Err(ClientError::OutOfRange {
                volume: volume(),
                operation,
                offset_bytes,
                length_bytes,
                size_bytes,
            });
        }
        let Some(pool) = map.pools.get(&self.inner.pool).filter(|pool| pool.pg_count > 0) else {
            return Err(ClientError::InvalidVolume {
                name: volume(),
                reason: format!("its pool {} is no longer in the cluster map", self.inner.pool),
            });
        };
        let pg_count = pool.pg_count;
        Ok((map, pg_count, inode))
    }

    /// Runs a write-like call: every piece's request from `make`, the reply's opcode checked.
    async fn mutate(
        &self,
        operation: Operation,
        offset_bytes: u64,
        length_bytes: u64,
        make: impl Fn(&Piece, u64) -> Request + Sync,
    ) -> Result<(), ClientError> {
        let (map, pg_count, inode) = self.check(operation, offset_bytes, length_bytes)?;
        if length_bytes == 0 {
            return Ok(());
        }
        let _ticket = self.inner.writes.begin();
        let started = Instant::now();
        let mut all =
            pieces(inode, self.inner.pool, pg_count, self.inner.object_size_bytes, offset_bytes, length_bytes);
        let first = all.next().expect("a call of non-zero length has a piece");
        if u64::from(first.length_bytes) == length_bytes {
            return self.mutate_piece(map, operation, first, &|inode| make(&first, inode), started).await;
        }
        let make = &make;
        let mut mutations = stream::iter(std::iter::once(first).chain(all))
            .map(|piece| {
                let map = map.clone();
                async move { self.mutate_piece(map, operation, piece, &|inode| make(&piece, inode), started).await }
            })
            .buffer_unordered(PIECES_IN_FLIGHT_MAX);
        while let Some(result) = mutations.next().await {
            result?;
        }
        Ok(())
    }

    async fn read_piece(&self, map: Arc<ClusterMap>, piece: Piece, started: Instant) -> Result<Bytes, ClientError> {
        let read = |inode| Request::Read {
            pg: piece.pg,
            inode,
            offset_bytes: piece.offset_bytes,
            length_bytes: piece.length_bytes,
        };
        let (response, osd) = self.run_piece(map, Operation::Read, &piece, &read, started).await?;
        match response {
            Response::Read { data } if data.len() == piece.length_bytes as usize => Ok(data),
            Response::Read { data } => Err(self.bad_reply(
                Operation::Read,
                &piece,
                osd,
                format!("{} bytes for a read of {}", data.len(), piece.length_bytes),
            )),
            other => Err(self.bad_reply(Operation::Read, &piece, osd, format!("a {} reply to a Read", other.opcode()))),
        }
    }

    async fn mutate_piece(
        &self,
        map: Arc<ClusterMap>,
        operation: Operation,
        piece: Piece,
        request: &(dyn Fn(u64) -> Request + Sync),
        started: Instant,
    ) -> Result<(), ClientError> {
        let (response, osd) = self.run_piece(map, operation, &piece, request, started).await?;
        let opcode = request(0).opcode();
        if response.opcode() != opcode {
            let reason = format!("a {} reply to a {opcode}", response.opcode());
            return Err(self.bad_reply(operation, &piece, osd, reason));
        }
        Ok(())
    }

    /// Sends one piece's request to its PG's primary until it gets an answer or the deadline
    /// passes (the policy is in the module comment). `request` makes the request for the inode
    /// the volume's head is in each attempt's map. Returns the `Ok` response and the OSD that
    /// gave it.
    async fn run_piece(
        &self,
        mut map: Arc<ClusterMap>,
        operation: Operation,
        piece: &Piece,
        request: &(dyn Fn(u64) -> Request + Sync),
        started: Instant,
    ) -> Result<(Response, u32), ClientError> {
        let client = &self.inner.client;
        let options = &client.inner.options;
        let deadline = options.io_timeout.map(|timeout| started + timeout);
        let mut backoff = options.retry_backoff_min;
        let mut last_problem: Option<String> = None;
        loop {
            if let Some(problem) = last_problem.take() {
                // The pause before this attempt may have run into the deadline.
                let now = Instant::now();
                if deadline.is_some_and(|deadline| now >= deadline) {
                    return Err(self.unavailable(operation, piece, now.duration_since(started), problem));
                }
            }
            let mut moved = false;
            let Some(inode) = self.inode(&map) else {
                return Err(ClientError::NoSuchVolume { name: self.inner.name.clone() });
            };
            let problem = match route(&map, piece.pg) {
                Err(reason) => reason,
                Ok(route) => {
                    let connect_by = deadline.unwrap_or_else(|| Instant::now() + options.connect_timeout);
                    match client.connection(route.osd, route.address, connect_by).await {
                        Err(error) => format!("osd.{}: {}", route.osd, error.reason),
                        Ok(connection) => {
                            let call = connection.call(route.epoch, request(inode));
                            let reply_by = Instant::now() + options.reply_timeout;
                            let give_up = deadline.map_or(reply_by, |deadline| deadline.min(reply_by));
                            tokio::select! {
                                biased;
                                reply = call => match reply {
                                    Ok(reply) => match reply.response {
                                        Response::Failed { status, .. } => match status {
                                            // ReadOnly: the head moved on (a snapshot, a
                                            // rollback) in a map newer than this one.
                                            Status::NotPrimary | Status::WrongEpoch | Status::Busy | Status::ReadOnly => format!(
                                                "osd.{} at {} answered {status} (request epoch {}, its epoch {})",
                                                route.osd, route.address, route.epoch, reply.epoch
                                            ),
                                            _ => return Err(self.status_error(operation, piece, route.osd, status)),
                                        },
                                        response => return Ok((response, route.osd)),
                                    },
                                    Err(error) => format!("osd.{}: {error}", route.osd),
                                },
                                () = client.route_moved(piece.pg, route.epoch, route.osd) => {
                                    moved = true;
                                    format!("pg moved on from osd.{} at epoch {} before it replied", route.osd, route.epoch)
                                }
                                () = tokio::time::sleep_until(give_up) => {
                                    let reason = "no reply in time";
                                    client.drop_connection(route.osd, &connection, reason);
                                    format!("osd.{} at {}: {reason}", route.osd, route.address)
                                }
                            }
                        }
                    }
                }
            };
            let now = Instant::now();
            if deadline.is_some_and(|deadline| now >= deadline) {
                return Err(self.unavailable(operation, piece, now.duration_since(started), problem));
            }
            tracing::debug!(volume = %self.inner.name, pg = ?piece.pg, %problem, "retrying");
            if !moved {
                let pause = deadline.map_or(backoff, |deadline| backoff.min(deadline - now));
                client.wait_for_newer_map(map.revision, pause).await;
                backoff = (backoff * 2).min(options.retry_backoff_max);
            }
            map = client.map();
            last_problem = Some(problem);
        }
    }

    fn unavailable(&self, operation: Operation, piece: &Piece, waited: Duration, problem: String) -> ClientError {
        ClientError::Unavailable {
            volume: self.inner.name.clone(),
            operation,
            offset_bytes: piece.offset_bytes,
            pg: piece.pg,
            waited_ms: u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
            problem,
        }
    }

    fn status_error(&self, operation: Operation, piece: &Piece, osd: u32, status: Status) -> ClientError {
        let (volume, offset_bytes, pg) = (self.inner.name.clone(), piece.offset_bytes, piece.pg);
        match status {
            Status::Corrupt => ClientError::Corrupt { volume, operation, offset_bytes, pg, osd },
            Status::NoSpace => ClientError::NoSpace { volume, operation, offset_bytes, pg, osd },
            Status::IoError => ClientError::Io { volume, operation, offset_bytes, pg, osd },
            _ => ClientError::Refused { volume, operation, offset_bytes, pg, osd, status },
        }
    }

    fn bad_reply(&self, operation: Operation, piece: &Piece, osd: u32, reason: String) -> ClientError {
        ClientError::BadReply {
            volume: self.inner.name.clone(),
            operation,
            offset_bytes: piece.offset_bytes,
            osd,
            reason,
        }
    }
}

impl std::fmt::Debug for Volume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Volume")
            .field("name", &self.inner.name)
            .field("target", &self.inner.target)
            .field("object_size_bytes", &self.inner.object_size_bytes)
            .finish_non_exhaustive()
    }
}

/// Whole objects are trimmed (a layer over a parent keeps them as zeros, `docs/design/osd.md`),
/// parts of objects zeroed.
fn zero_request(piece: &Piece, inode: u64) -> Request {
    let (pg, offset_bytes, length_bytes) = (piece.pg, piece.offset_bytes, piece.length_bytes);
    if piece.whole_object {
        Request::Trim { pg, inode, offset_bytes, length_bytes }
    } else {
        Request::WriteZeroes { pg, inode, offset_bytes, length_bytes }
    }
}
