//! Copying objects between the members of a PG, and the PG's history records
//! (`docs/design/peering.md`). A member gets the version the primary holds: only the pages
//! that changed since the version it holds, when the primary's engine remembers every write in
//! between (a member back from a short outage, ADR 0023), else the whole object. Each copy
//! holds the object's write queue, so it cannot interleave with a client's write of the same
//! object.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use cluster::peering::{History, Interval};
use engine::{AlignedBuffer, EngineError, ObjectId, Request as EngineRequest, PAGE_SIZE_BYTES};
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;
use wire::{Opcode, PgId, PgTrouble, Request, Response, Status};

use super::history::Written;
use super::retry::{self, log_failure};
use super::state::{same_members, Active, Pg};
use crate::ops::{ObjectRead, OpError, Osd};

/// A copy of one object from this OSD to a member of its PG.
pub(crate) struct Push<'a> {
    pub(crate) pg: PgId,
    pub(crate) epoch: u64,
    pub(crate) member: u32,
    pub(crate) address: &'a str,
    pub(crate) object: ObjectId,
    /// The version the member holds (`None`: no copy).
    pub(crate) held: Option<u64>,
    /// Other members holding this OSD's version, for when this OSD's copy cannot be read.
    pub(crate) holders: &'a [u32],
}

/// Why a copy of an object to a member did not land.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CopyError {
    /// The member holds, or remembers, a newer version than the one sent (a copy it deleted
    /// at one above the version it held, `stray.rs`, or discarded in peering): the object must
    /// be written again above it.
    #[error("osd.{member} refused {object} at version {version:#x}: it holds or remembers version {current:#x}")]
    Refused { member: u32, object: ObjectId, version: u64, current: u64 },
    /// The member could not be reached: the copy is tried again later.
    #[error(transparent)]
    Peer(#[from] crate::peers::PeerError),
    /// Anything else (a drive failed, no copy could be read, an answer out of place): the copy
    /// is tried again later.
    #[error("{0}")]
    Failed(String),
}

impl From<String> for CopyError {
    fn from(reason: String) -> CopyError {
        CopyError::Failed(reason)
    }
}

impl Osd {
    /// `member`'s whole copy of `object`.
    pub(crate) async fn read_member_copy(
        &self,
        pg: PgId,
        epoch: u64,
        member: u32,
        address: &str,
        object: ObjectId,
    ) -> Result<ObjectRead, String> {
        let request = Request::SecRead { pg, object, offset_bytes: 0, length_bytes: self.object_size_bytes };
        let all = engine::layout::all_pages(self.object_size_bytes / PAGE_SIZE_BYTES);
        match self.peers.call(member, address, epoch, request).await?.response {
            Response::SecRead { version, present, data }
                if data.len() == self.object_size_bytes as usize && present & !all == 0 =>
            {
                Ok(ObjectRead { version, present, data })
            }
            other => Err(format!("osd.{member} answered a whole read of {object} with {other:?}")),
        }
    }

    /// Copies `object` to this OSD from the first of `sources` that answers with a readable
    /// copy at `version` or later (a source's copy may fail its checksums or its drive).
    pub(crate) async fn pull(
        &self,
        pg: PgId,
        epoch: u64,
        sources: &[u32],
        object: ObjectId,
        version: u64,
    ) -> Result<(), String> {
        assert!(!sources.is_empty(), "a pull of {object} names no source");
        let _object = self.locks.write(object).await;
        let mut reasons = Vec::new();
        let Some((source, copy)) =
            self.first_member_copy(pg, epoch, object, sources, |held| held >= version, &mut reasons).await
        else {
            return Err(reasons.join("; "));
        };
        let held = copy.version;
        let write = |version| EngineRequest::ReplaceVersioned {
            object,
            data: AlignedBuffer::from_slice(&copy.data),
            present: copy.present,
            version,
        };
        let written = match self.engine.submit(write(held)).await {
            // Holding exactly that version already, as a copy: the same contents.
            Err(EngineError::StaleVersion { current, .. })
                if current == held && self.engine.with(|engine| engine.object_exists(object)) =>
            {
                Ok(())
            }
            // This OSD knows a newer version than the newest a required set holds: a write no
            // one acknowledged, or the delete that discarded it in this peering (which lands
            // on the pulled version itself when the discarded copy was the one just before it).
            // The pulled copy replaces it at a version above (minted at this epoch, as a write
            // would be); keeping the newer one, or nothing, would lose the acknowledged write.
            Err(EngineError::StaleVersion { current, .. }) => {
                if current == held {
                    stdx::coverage::mark("recovery: a pulled copy lands on a delete at its own version");
                }
                let above = cluster::mint_version(epoch, Some(current));
                tracing::info!(osd = self.id, pg = %pg, %object, pulled = held, current, above, "a pulled copy replaces a newer version no one acknowledged");
                self.engine.submit(write(above)).await.map(|_| ())
            }
            other => other.map(|_| ()),
        };
        written.map_err(|error| format!("writing {object} pulled from osd.{source}: {error}"))
    }

    /// Copies the object to the member (`push` says which and what it holds). Returns the
    /// bytes sent.
    pub(crate) async fn push(&self, push: &Push<'_>) -> Result<u64, CopyError> {
        let _object = self.locks.write(push.object).await;
        self.push_held(push).await
    }

    /// [`Osd::push`] for a caller that holds the object's write queue. A member holding an
    /// older version this OSD's engine remembers the writes since receives only the pages they
    /// changed; any other gets the whole object.
    pub(crate) async fn push_held(&self, push: &Push<'_>) -> Result<u64, CopyError> {
        if let Some(sent) = self.push_pages(push).await? {
            stdx::coverage::mark("recovery: only the changed pages sent");
            self.pgs.count_copied(sent);
            return Ok(sent);
        }
        let &Push { pg, epoch, member, address, object, holders, .. } = push;
        let copy = self.copy_to_send(pg, epoch, object, holders).await?;
        let mut page_mask = copy.present;
        if crate::planted::is_planted(crate::planted::PlantedBug::CopyDropsThePageMask) {
            page_mask = engine::layout::all_pages(self.object_size_bytes / PAGE_SIZE_BYTES);
        }
        let version = copy.version;
        let data = crate::pages::pack(&copy.data, page_mask);
        let sent = data.len() as u64;
        let request = Request::SecReplace { pg, object, version, page_mask, data };
        let reply = self.peers.call(member, address, epoch, request).await?;
        copy_outcome(member, object, version, Opcode::SecReplace, reply.response)?;
        self.pgs.count_copied(sent);
        Ok(sent)
    }

    /// Sends the member the pages this OSD's version changed since the version it holds (since
    /// the object was created, for no copy). `None` when that cannot be done and the whole
    /// object must go instead: the engine does not remember every write since then (it
    /// restarted, forgot the oldest, or the member's version was never on its line), this copy
    /// cannot be read, or the member no longer holds that version. The caller holds the
    /// object's write queue.
    async fn push_pages(&self, push: &Push<'_>) -> Result<Option<u64>, CopyError> {
        let &Push { pg, epoch, member, address, object, held, .. } = push;
        let known = self.engine.with(|engine| {
            let current = engine.object_exists(object).then(|| engine.object_version(object)).flatten()?;
            Some((current, engine.pages_changed_since(object, held, current)?))
        });
        let Some((current, page_mask)) = known else { return Ok(None) };
        if page_mask == 0 {
            return Ok(None);
        }
        let page = PAGE_SIZE_BYTES as usize;
        let (first, last) = (page_mask.trailing_zeros(), 63 - page_mask.leading_zeros());
        let span_bytes = (last - first + 1) * PAGE_SIZE_BYTES;
        let Ok(ObjectRead { version, present, data: span }) =
            self.read(object, first * PAGE_SIZE_BYTES, span_bytes).await
        else {
            return Ok(None);
        };
        // Pages a write changed hold data; a span reading otherwise is not the version counted on.
        if version != current || present & page_mask != page_mask {
            return Ok(None);
        }
        let mut data = Vec::with_capacity(page_mask.count_ones() as usize * page);
        for bit in (first..=last).filter(|bit| page_mask & (1 << bit) != 0) {
            data.extend_from_slice(&span[(bit - first) as usize * page..][..page]);
        }
        let sent = data.len() as u64;
        let base_version = held.unwrap_or(wire::ABSENT_VERSION);
        let request = Request::SecWritePages { pg, object, base_version, version, page_mask, data: data.into() };
        let reply = self.peers.call(member, address, epoch, request).await?;
        match reply.response {
            Response::Failed { status: Status::BaseNotHeld, opcode: Opcode::SecWritePages } => {
                stdx::coverage::mark("recovery: a member lacks the base version, the object goes whole");
                Ok(None)
            }
            response => copy_outcome(member, object, version, Opcode::SecWritePages, response).map(|()| Some(sent)),
        }
    }

    /// The whole copy of `object` to send a member: this OSD's, or when that cannot be read here (its checksums fail, or the drive fails the read), the first of
    /// `holders` that answers with a readable copy at the same version. The copy here stays as
    /// it is until a client's read or a scrub rewrites it from a good one (that needs the PG
    /// active); a member must not wait for that to receive what it lacks.
    async fn copy_to_send(
        &self,
        pg: PgId,
        epoch: u64,
        object: ObjectId,
        holders: &[u32],
    ) -> Result<ObjectRead, String> {
        let error = match self.read(object, 0, self.object_size_bytes).await {
            Ok(copy) => return Ok(copy),
            Err(error) if super::scrub::unreadable(&error) => error,
            Err(error) => return Err(format!("reading {object}: {error}")),
        };
        let ours = self.engine.with(|engine| engine.object_version(object));
        let mut reasons = vec![format!("reading {object}: {error}")];
        match self.first_member_copy(pg, epoch, object, holders, |held| Some(held) == ours, &mut reasons).await {
            Some((holder, copy)) => {
                stdx::coverage::mark("recovery: a member's copy sent for an unreadable one here");
                tracing::warn!(osd = self.id, pg = %pg, %object, %error, holder, "sending a member's copy of an object this osd cannot read");
                Ok(copy)
            }
            None => Err(reasons.join("; ")),
        }
    }

    /// The whole copy of `object` of the first of `members` that answers with one at a version
    /// `wanted` takes, and that member. Why each other member's did not do goes into `reasons`.
    async fn first_member_copy(
        &self,
        pg: PgId,
        epoch: u64,
        object: ObjectId,
        members: &[u32],
        wanted: impl Fn(u64) -> bool,
        reasons: &mut Vec<String>,
    ) -> Option<(u32, ObjectRead)> {
        for &member in members {
            let Some(address) = self.map.borrow().address(member).map(str::to_string) else {
                reasons.push(format!("osd.{member} went down"));
                continue;
            };
            match self.read_member_copy(pg, epoch, member, &address, object).await {
                Ok(copy) if wanted(copy.version) => return Some((member, copy)),
                Ok(copy) => reasons.push(format!("osd.{member} holds {object} at version {:#x}", copy.version)),
                Err(reason) => reasons.push(reason),
            }
        }
        None
    }

    /// Rewrites `object`, whole, on every member at a new version above `current`, the version
    /// a member refused a copy for because it holds or remembers it (a write no one
    /// acknowledged, a copy it deleted one version above the one it held, `stray.rs`, or
    /// discarded in peering). `holders` are as for [`Osd::push`]. The caller holds the object's
    /// write queue.
    async fn rewrite_held(
        self: &Rc<Self>,
        state: &Rc<Pg>,
        object: ObjectId,
        current: u64,
        holders: &[u32],
    ) -> Result<(), String> {
        state.with_active(|active| active.raise_floor(object, current));
        let copy = self.copy_to_send(state.id, state.epoch, object, holders).await?;
        stdx::coverage::mark("recovery: an object a member refused rewritten above");
        tracing::info!(osd = self.id, pg = %state.id, %object, "rewriting an object a member refused at its version");
        let mutation = crate::ops::Mutation::Replace { data: copy.data, present: copy.present };
        Box::pin(self.replicate_held(state, object, mutation)).await.map_err(|error| error.to_string())
    }

    /// Deletes `member`'s copy of `object`, held at version `held`, with a version just above it:
    /// below any version a later epoch mints, so the object's next write is accepted.
    pub(crate) async fn discard(
        &self,
        pg: PgId,
        epoch: u64,
        member: u32,
        map: &cluster::ClusterMap,
        object: ObjectId,
        held: u64,
    ) -> Result<(), String> {
        let version = held + 1;
        if member == self.id {
            let _object = self.locks.write(object).await;
            return match self.engine.submit(EngineRequest::DeleteVersioned { object, version }).await {
                Ok(_) | Err(EngineError::StaleVersion { .. }) => Ok(()),
                Err(error) => Err(format!("discarding {object}: {error}")),
            };
        }
        let address = map.address(member).ok_or_else(|| format!("osd.{member} went down"))?;
        let reply = self.peers.call(member, address, epoch, Request::SecDelete { pg, object, version }).await?;
        match reply.response {
            Response::SecDelete
            | Response::Failed { status: wire::Status::NoSuchObject, opcode: Opcode::SecDelete } => Ok(()),
            other => Err(format!("osd.{member} answered the discard of {object} with {other:?}")),
        }
    }

    /// Makes sure the PG's history covers a write at this epoch (`Active::recorded`), writing
    /// the acting set into it if not.
    pub(crate) async fn ensure_recorded(self: &Rc<Self>, state: &Rc<Pg>) -> Result<(), OpError> {
        let pg = state.id;
        if state.with_active(|active| active.recorded()) != Some(false) {
            return Ok(());
        }
        let _recording = state.recording.lock().await;
        let Some((recorded, history, revision)) =
            state.with_active(|active| (active.recorded(), active.with_interval(state.epoch), active.history_revision))
        else {
            return Err(OpError::PgPeering { pg, epoch: state.epoch });
        };
        if recorded {
            return Ok(());
        }
        self.fence()?;
        match self.write_history(state, history, revision).await {
            Ok(Written::At(_)) => {
                tracing::info!(osd = self.id, pg = %pg, epoch = state.epoch, "recorded the acting set in the pg's history");
                Ok(())
            }
            Ok(Written::Changed) => Err(OpError::HistoryChanged { pg }),
            Ok(Written::TableMoved) => Err(OpError::HistoryNotRecorded {
                pg,
                reason: "the PG table changed after this OSD's map; not recorded".to_string(),
            }),
            Err(reason) => Err(OpError::HistoryNotRecorded { pg, reason }),
        }
    }

    /// Replaces the PG's history record if it is still at `revision`, and the active state's copy
    /// with it; a record someone else changed makes the PG peer again.
    async fn write_history(
        self: &Rc<Self>,
        state: &Rc<Pg>,
        history: History,
        revision: i64,
    ) -> Result<Written, String> {
        self.pgs.count_history_write();
        let map_revision = self.map.borrow().revision;
        let written = super::history::write(self.store.as_ref(), state.id, &history, revision, map_revision).await?;
        match written {
            Written::At(revision) => {
                state.with_active(|active| {
                    active.history = history;
                    active.history_revision = revision;
                });
            }
            Written::Changed => {
                stdx::coverage::mark("recovery: the history changed under this primary");
                self.peer_again(state)
            }
            // The map catches up; the write is tried again under it if this epoch holds.
            Written::TableMoved => stdx::coverage::mark("recovery: a history write fenced by a newer PG table"),
        }
        Ok(written)
    }

    /// Background recovery of an active PG: lists the members peering could not, copies every
    /// object each member lacks, and records the PG clean once every target member holds
    /// everything. Stops when the PG's state is superseded.
    ///
    /// Up to `recovery_in_flight_max` copies of the PG are in flight at once, each for another
    /// object (the pacer holds the whole OSD to that bound): one at a time, a PG's copy would
    /// wait out every round trip and durable write in turn, and a backfill onto one new OSD,
    /// which spans few PGs per primary, would go at a fraction of the disk's rate.
    pub(crate) async fn recover(self: Rc<Self>, state: Rc<Pg>) {
        let started = Instant::now();
        let (objects_at_start, _) = state.with_active(|active| active.recovery_left()).unwrap_or_default();
        let mut copied_bytes = 0u64;
        let copying: RefCell<BTreeSet<(u32, ObjectId)>> = RefCell::new(BTreeSet::new());
        let mut copies = FuturesUnordered::new();
        // When members left unlisted are listed again (`retry.rs`).
        let mut list_after = Instant::now();
        while self.pgs.is_current(&state) {
            // Nothing is copied to a member before it is listed; one that cannot be listed keeps
            // no other member from its copies.
            let unlisted = state.with_active(|active| active.unlisted.clone()).unwrap_or_default();
            if !unlisted.is_empty() && Instant::now() >= list_after {
                for member in unlisted {
                    match self.list_missing(&state, member).await {
                        Ok(()) => state.attempts.succeeded(),
                        Err(reason) => {
                            stdx::coverage::mark("recovery: a listing retried");
                            let (pause, loudness) = state.attempts.failed(PgTrouble::Listing);
                            log_failure!(
                                loudness, osd = self.id, pg = %state.id, member, %reason,
                                failures = state.attempts.failures(), stuck = state.attempts.is_stuck(),
                                retry_in_ms = pause.as_millis() as u64, "recovery cannot list a member"
                            );
                            list_after = Instant::now() + pause;
                        }
                    }
                }
            }
            while copies.len() < self.pacer.in_flight_max() {
                let next = state.with_active(|active| next_copy(active, &copying.borrow())).flatten();
                let Some((member, object)) = next else { break };
                copying.borrow_mut().insert((member, object));
                let (this, state, copying) = (&self, &state, &copying);
                copies.push(async move {
                    let result = this.copy_missing(state, member, object).await;
                    match &result {
                        Ok(_) => state.attempts.succeeded(),
                        Err(reason) => {
                            stdx::coverage::mark("recovery: a copy retried");
                            let (pause, loudness) = state.attempts.failed(PgTrouble::Copy);
                            log_failure!(
                                loudness, osd = this.id, pg = %state.id, member, %object, %reason,
                                failures = state.attempts.failures(), stuck = state.attempts.is_stuck(),
                                retry_in_ms = pause.as_millis() as u64, "recovery cannot copy an object"
                            );
                            // The object stays taken for the pause: no other slot retries it at once.
                            tokio::time::sleep(pause).await;
                        }
                    }
                    copying.borrow_mut().remove(&(member, object));
                    result
                });
            }
            if copies.is_empty() {
                // Nothing in flight and nothing to start: done, unless a member is left to list.
                if state.with_active(|active| active.unlisted.is_empty()) != Some(false) {
                    break;
                }
                tokio::time::sleep_until(list_after.max(Instant::now() + retry::FIRST)).await;
                continue;
            }
            if let Some(result) = copies.next().await {
                copied_bytes += result.unwrap_or(0);
            }
        }
        drop(copies);
        if !self.pgs.is_current(&state) || state.with_active(|active| active.clean()) != Some(true) {
            return;
        }
        if objects_at_start > 0 {
            tracing::info!(
                osd = self.id, pg = %state.id, epoch = state.epoch, objects = objects_at_start,
                bytes = copied_bytes, recovery_ms = started.elapsed().as_millis() as u64, "pg recovered"
            );
        }
        // A record the lease or the store refused now is tried again: a backfilling PG ends
        // only with it.
        while self.pgs.is_current(&state) {
            let Err(reason) = self.record_clean(&state).await else { break };
            stdx::coverage::mark("recovery: the clean record retried");
            let (pause, loudness) = state.attempts.failed(PgTrouble::History);
            log_failure!(
                loudness, osd = self.id, pg = %state.id, epoch = state.epoch, %reason,
                failures = state.attempts.failures(), stuck = state.attempts.is_stuck(),
                retry_in_ms = pause.as_millis() as u64, "cannot record the pg clean"
            );
            tokio::time::sleep(pause).await;
        }
        state.attempts.succeeded();
    }

    /// Lists `member`'s objects of the PG and records what it lacks.
    async fn list_missing(self: &Rc<Self>, state: &Rc<Pg>, member: u32) -> Result<(), String> {
        let pg = state.id;
        let map = self.map.borrow().clone();
        let address = map.address(member).ok_or_else(|| format!("osd.{member} is down"))?.to_string();
        let pg_count = map.pools.get(&pg.pool).ok_or("the pool is gone")?.pg_count;
        let mut theirs: BTreeMap<ObjectId, u64> =
            self.list_member(member, &address, pg, pg_count, state.epoch).await?.into_iter().collect();
        // Every acknowledged version reached this OSD before the PG served, and writes since go
        // to no unlisted member: a copy it holds that this OSD lacks (the PG deleted the object
        // while it was away) or holds older is no acknowledged write. Left there, it would come
        // back as the PG's newest once the member is recorded clean with the others; it is
        // deleted first, one above its version, and the object's next write goes above that.
        let ours: BTreeMap<ObjectId, u64> = self.list_local(pg, pg_count).into_iter().collect();
        let beyond: Vec<(ObjectId, u64)> = theirs
            .iter()
            .filter(|(object, held)| ours.get(object).is_none_or(|version| version < held))
            .map(|(&object, &held)| (object, held))
            .collect();
        if !beyond.is_empty() {
            stdx::coverage::mark("recovery: copies a member listed late holds beyond the primary's discarded");
            tracing::info!(osd = self.id, pg = %pg, member, objects = beyond.len(), "discarding copies no write acknowledged");
            // A member of the latest recorded set is one whose copies a later peering trusts
            // alone; once a copy is deleted, it holds less than the acknowledged writes until
            // the object is copied back. So the set of this epoch's complete members (without
            // it: it is still unlisted) is recorded first.
            let trusted = state.with_active(|active| {
                active.history.required().last().is_some_and(|set| set.members.contains(&member))
            });
            if trusted == Some(true) {
                stdx::coverage::mark("recovery: the complete members recorded before a trusted member's copies go");
                self.ensure_recorded(state).await.map_err(|error| error.to_string())?;
            }
        }
        for (object, held) in beyond {
            self.still_current(state)?;
            state.with_active(|active| active.raise_floor(object, held + 1));
            self.discard(pg, state.epoch, member, &map, object, held).await?;
            theirs.remove(&object);
        }
        self.still_current(state)?;
        // Writes go to no unlisted member, so what it lacks now it lacks from here on;
        // what it holds older than this OSD holds it must receive.
        let ours = self.list_local(pg, pg_count);
        let stale_too = !crate::planted::is_planted(crate::planted::PlantedBug::CatchUpSkipsStaleCopies);
        let needs: BTreeMap<ObjectId, Option<u64>> = ours
            .into_iter()
            .filter(|(object, version)| theirs.get(object).is_none_or(|held| stale_too && held < version))
            .map(|(object, _)| (object, theirs.get(&object).copied()))
            .collect();
        self.still_current(state)?;
        state.with_active(|active| {
            active.unlisted.remove(&member);
            active.missing.insert(member, needs);
        });
        Ok(())
    }

    /// Copies `object` to `member`, which lacks it or holds an older version, when the pacer
    /// lets it. Returns the bytes sent (none when a client's write copied it meanwhile).
    async fn copy_missing(self: &Rc<Self>, state: &Rc<Pg>, member: u32, object: ObjectId) -> Result<u64, String> {
        let pg = state.id;
        let map = self.map.borrow().clone();
        let address = map.address(member).ok_or_else(|| format!("osd.{member} is down"))?.to_string();
        let min_size = map.pools.get(&pg.pool).map_or(1, |pool| pool.min_size);
        let priority = state.with_active(|active| active.priority(min_size)).ok_or("the pg is not active")?;
        let _permit = self.pacer.admit(priority, u64::from(self.object_size_bytes)).await;
        let _object = self.locks.write(object).await;
        // A client's whole-object write may have copied it meanwhile.
        let still_missing = state.with_active(|active| active.missing_object(object).contains(&member));
        if still_missing != Some(true) {
            return Ok(0);
        }
        let (holders, held) = state
            .with_active(|active| (holding_members(active, self.id, object), held_by(active, member, object)))
            .unwrap_or_default();
        let push = Push { pg, epoch: state.epoch, member, address: &address, object, held, holders: &holders };
        let sent = match self.push_held(&push).await {
            Ok(sent) => sent,
            Err(CopyError::Refused { current, .. }) => {
                self.rewrite_held(state, object, current, &holders).await?;
                u64::from(self.object_size_bytes)
            }
            Err(error @ (CopyError::Peer(_) | CopyError::Failed(_))) => return Err(error.to_string()),
        };
        state.with_active(|active| forget(active, member, object));
        Ok(sent)
    }

    /// Replaces the PG's history with "clean at this epoch" when it says more than that.
    /// `false` when it should have and could not (the lease or the store refused): the caller
    /// tries again.
    async fn record_clean(self: &Rc<Self>, state: &Rc<Pg>) -> Result<(), String> {
        let pg = state.id;
        let _recording = state.recording.lock().await;
        let Some((history, revision, needed, first)) = state.with_active(|active| {
            // A PG's first clean record is written too: from then on its history always names
            // the members that hold its writes, which is what lets peering tell them from others.
            // A PG with old members (acting, outside the target) is complete for the mon only
            // when its history says clean at this very epoch: that is what ends its backfill.
            let backfilling = active.acting.iter().any(|osd| !active.target.contains(osd));
            let needed = !active.history.intervals.is_empty()
                || active.history.clean.as_ref().is_none_or(|clean| {
                    !same_members(&clean.members, &active.acting) || (backfilling && clean.epoch != state.epoch)
                });
            let clean = Interval { epoch: state.epoch, members: active.acting.clone() };
            let first = active.history.clean.is_none();
            (History { clean: Some(clean), intervals: Vec::new() }, active.history_revision, needed, first)
        }) else {
            return Ok(());
        };
        if !needed {
            return Ok(());
        }
        self.fence().map_err(|error| error.to_string())?;
        match self.write_history(state, history, revision).await {
            // A new PG's first record is the healthy start, not news.
            Ok(Written::At(_)) if first => tracing::debug!(osd = self.id, pg = %pg, epoch = state.epoch, "pg clean"),
            Ok(Written::At(_)) => tracing::info!(osd = self.id, pg = %pg, epoch = state.epoch, "pg clean"),
            // Someone else wrote it: the PG peers again.
            Ok(Written::Changed) => {}
            // Tried again once the map catches up, if the epoch holds.
            Ok(Written::TableMoved) => return Err("the PG table changed after this OSD's map".to_string()),
            Err(reason) => return Err(reason),
        }
        Ok(())
    }
}

/// What a member's answer to a copy of `object` at `version` (a SecReplace or a SecWritePages,
/// `opcode`) means.
fn copy_outcome(
    member: u32,
    object: ObjectId,
    version: u64,
    opcode: Opcode,
    response: Response,
) -> Result<(), CopyError> {
    match response {
        Response::SecWritePages | Response::SecReplace if response.opcode() == opcode => Ok(()),
        Response::NewerVersionHeld { current, opcode: answered } if answered == opcode => {
            Err(CopyError::Refused { member, object, version, current })
        }
        Response::Failed { status, opcode: answered } if answered == opcode => {
            Err(format!("osd.{member} failed the copy of {object} ({opcode}): {status}").into())
        }
        other => Err(format!("osd.{member} answered the copy of {object} ({opcode}) with {other:?}").into()),
    }
}

/// The next object to copy that no copy in flight (`copying`) is already sending: members in
/// order, each's objects in order.
fn next_copy(active: &Active, copying: &BTreeSet<(u32, ObjectId)>) -> Option<(u32, ObjectId)> {
    active.missing.iter().find_map(|(&member, objects)| {
        objects.keys().map(|&object| (member, object)).find(|copy| !copying.contains(copy))
    })
}

/// The acting members other than `primary` that hold `object` at the version the primary does:
/// every one not recorded as lacking it (members are listed before anything is copied to them).
fn holding_members(active: &Active, primary: u32, object: ObjectId) -> Vec<u32> {
    let lacking = active.missing_object(object);
    active.acting.iter().copied().filter(|osd| *osd != primary && !lacking.contains(osd)).collect()
}

/// The version of `object` that `member`, which lacks its newest, holds.
fn held_by(active: &Active, member: u32, object: ObjectId) -> Option<u64> {
    active.missing.get(&member).and_then(|objects| objects.get(&object)).copied().flatten()
}

/// `member` holds `object` now.
pub(crate) fn forget(active: &mut Active, member: u32, object: ObjectId) {
    if let Some(objects) = active.missing.get_mut(&member) {
        objects.remove(&object);
    }
}

/// Whether a write's failure means a member may not hold what the primary takes it to hold:
/// its connection broke (it may have restarted without what it had not made durable), or it
/// failed the op (its drive failed, it answered out of place). The PG peers again, so that
/// the member is listed before it counts as complete: a retried delete of an object the
/// primary no longer holds would otherwise take that member for one without a copy, and
/// acknowledge while it keeps the old data. A full member is not lost: it refuses new objects.
pub(crate) fn lost_member(error: &OpError) -> bool {
    match error {
        OpError::SecondaryUnreachable { .. } | OpError::SecondaryAnsweredOther { .. } => true,
        OpError::SecondaryFailed { status, .. } => *status != wire::Status::NoSpace,
        _ => false,
    }
}
