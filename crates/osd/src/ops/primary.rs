//! The primary's ops: clients' reads and writes of a PG's objects. Admission has checked the
//! epoch, the role, the range and the lease.
//!
//! A write takes the object's queue (`locks.rs`), mints the version from the PG epoch and the
//! engine's newest version of the object, writes locally and sends the same version to every
//! other member in parallel, and acknowledges only when all of them have it durable.

use bytes::Bytes;
use cluster::mint_version;
use engine::{AlignedBuffer, ObjectId, Request as EngineRequest};
use wire::{Opcode, PgId, Request, Response, Status};

use std::rc::Rc;

use super::admission::{self, PgView};
use super::{ObjectRead, OpError, Osd};
use crate::limits::OBJECT_SIZE_MAX_BYTES;
use crate::op_times::Timed;
use crate::pg::state::Pg;
use crate::pg::{recovery, scrub};

/// Zeros for WriteZeroes and partial Trims, sliced without allocating.
static ZEROS: [u8; OBJECT_SIZE_MAX_BYTES] = [0; OBJECT_SIZE_MAX_BYTES];

/// A change to one object, as the primary sends it to every member.
pub(crate) enum Mutation {
    Write {
        offset_bytes: u32,
        data: Bytes,
    },
    /// The whole object replaced: the pages of `present` hold `data`'s (the whole object's
    /// bytes), the others none (a copy of an object that holds some pages only).
    Replace {
        data: Bytes,
        present: u64,
    },
    Delete,
}

impl Mutation {
    /// Zeros over `length_bytes` at `offset_bytes`.
    pub(crate) fn zeros(offset_bytes: u32, length_bytes: u32) -> Mutation {
        Mutation::Write { offset_bytes, data: Bytes::from_static(&ZEROS[..length_bytes as usize]) }
    }
}

impl Osd {
    /// A client's read: what the object holds of the range, and where it holds no data, what
    /// the layers below it hold (`layers.rs`).
    pub(crate) async fn primary_read(
        self: &Rc<Self>,
        pg: PgId,
        epoch: u64,
        object: ObjectId,
        offset_bytes: u32,
        length_bytes: u32,
    ) -> Result<Response, OpError> {
        let state = self.pgs.active(pg, epoch, self.peering_wait).await?;
        // What a client reads must survive the next peering as a write it saw acknowledged
        // would: the versions this peering took are on every complete member, and recorded
        // they are what the next peering trusts (`cluster::peering`).
        self.ensure_recorded(&state).await?;
        let below = self.layers_below(object);
        if below.is_empty() {
            let head = self.read_repairing(&state, object, offset_bytes, length_bytes).await?;
            return Ok(Response::Read { data: head.data });
        }
        // A layer that holds nothing of the object costs no trip through the engine: an
        // acknowledged write is journaled, so the object exists once one is.
        let absent = {
            let _object = self.locks.read(object).await;
            self.still_primary(pg, epoch)?;
            self.still_active(&state)?;
            !self.object_exists(object)
        };
        let head = if absent {
            ObjectRead { version: 0, present: 0, data: Bytes::new() }
        } else {
            self.read_repairing(&state, object, offset_bytes, length_bytes).await?
        };
        let (data, _) = self.read_through(&state, head, &below, offset_bytes, length_bytes).await?;
        Ok(Response::Read { data })
    }

    /// Reads a range of an object under its queue. A copy that fails its checksums or cannot be
    /// read here is rewritten from a member's good copy, and the reader gets that: it never sees
    /// the error while one exists.
    pub(crate) async fn read_repairing(
        self: &Rc<Self>,
        state: &Rc<Pg>,
        object: ObjectId,
        offset_bytes: u32,
        length_bytes: u32,
    ) -> Result<ObjectRead, OpError> {
        let (pg, epoch) = (state.id, state.epoch);
        let read = {
            let _object = self.locks.read(object).await;
            self.still_primary(pg, epoch)?;
            self.still_active(state)?;
            self.read(object, offset_bytes, length_bytes).await
        };
        match read {
            Ok(read) => Ok(read),
            Err(error) if scrub::unreadable(&error) => {
                stdx::coverage::mark("read: an unreadable copy repaired from a member's");
                tracing::warn!(osd = self.id, pg = %pg, %object, %error, "repairing a copy that cannot be read");
                match self.repair(state, object).await {
                    // Served from the good copy the repair wrote: the drive that failed the
                    // read may fail the next one too.
                    Ok(Some(copy)) => {
                        let range = offset_bytes as usize..(offset_bytes + length_bytes) as usize;
                        let pages = crate::pages::of_range(offset_bytes, length_bytes);
                        Ok(ObjectRead {
                            version: copy.version,
                            present: copy.present & pages,
                            data: copy.data.slice(range),
                        })
                    }
                    // Every copy reads well now (the drive's error did not last).
                    Ok(None) => {
                        let _object = self.locks.read(object).await;
                        self.still_primary(pg, epoch)?;
                        self.still_active(state)?;
                        self.read(object, offset_bytes, length_bytes).await
                    }
                    Err(scrub::RepairError::Unrepairable(reason)) => {
                        tracing::error!(osd = self.id, pg = %pg, %object, %reason, "cannot repair a copy");
                        Err(error)
                    }
                    Err(scrub::RepairError::Unfinished(reason)) => {
                        tracing::warn!(osd = self.id, pg = %pg, %object, %reason, "the repair of a copy did not finish");
                        Err(OpError::RepairUnfinished { pg, object, reason })
                    }
                }
            }
            Err(error) => Err(error),
        }
    }

    /// Whether the object, or a layer below it that shows through, holds data.
    pub(crate) async fn primary_stat(
        self: &Rc<Self>,
        pg: PgId,
        epoch: u64,
        object: ObjectId,
    ) -> Result<Response, OpError> {
        let _object = self.object_query(pg, epoch, object).await?;
        match self.stat_through(object) {
            Some(version) => Ok(Response::Stat { version }),
            None => Err(OpError::NoSuchObject),
        }
    }

    /// Which pages of `object` differ from layer `since`'s (`Request::Changes`).
    pub(crate) async fn primary_changes(
        self: &Rc<Self>,
        pg: PgId,
        epoch: u64,
        object: ObjectId,
        since: u64,
    ) -> Result<Response, OpError> {
        let _object = self.object_query(pg, epoch, object).await?;
        Ok(Response::Changes { pages: self.changes_since(object, since).await? })
    }

    /// What a query of one object (Stat, Changes) waits for: its PG serving with its acting set
    /// recorded, and the object's read queue, this OSD still its primary after both.
    async fn object_query(
        self: &Rc<Self>,
        pg: PgId,
        epoch: u64,
        object: ObjectId,
    ) -> Result<crate::locks::ObjectGuard<'_>, OpError> {
        let state = self.pgs.active(pg, epoch, self.peering_wait).await?;
        self.ensure_recorded(&state).await?;
        let guard = self.locks.read(object).await;
        self.still_primary(pg, epoch)?;
        self.still_active(&state)?;
        Ok(guard)
    }

    /// After a wait (for the object's queue), the map may have moved on.
    pub(crate) fn still_primary(&self, pg: PgId, epoch: u64) -> Result<(), OpError> {
        let map = self.map.borrow().clone();
        admission::still_primary(PgView::lookup(&map, pg), self.id, epoch)
    }

    /// After a wait, the PG may be peering again.
    pub(crate) fn still_active(&self, state: &Rc<Pg>) -> Result<(), OpError> {
        if self.pgs.is_current(state) && state.is_active() {
            Ok(())
        } else {
            Err(OpError::PgPeering { pg: state.id, epoch: state.epoch })
        }
    }

    /// The write path: wait for the PG to be active, queue on the object, record the complete
    /// members in the PG's history if it is not clean, mint the version, write on every member
    /// that holds the object (every member for a whole-object write), and succeed only if each
    /// of them has it durable.
    pub(crate) async fn replicate(
        self: &Rc<Self>,
        pg: PgId,
        epoch: u64,
        object: ObjectId,
        mutation: Mutation,
    ) -> Result<(), OpError> {
        let state = self.pgs.active(pg, epoch, self.peering_wait).await?;
        let result = self.replicate_active(&state, object, mutation).await;
        if result.as_ref().is_err_and(recovery::lost_member) {
            self.peer_again(&state);
        }
        result
    }

    async fn replicate_active(
        self: &Rc<Self>,
        state: &Rc<Pg>,
        object: ObjectId,
        mutation: Mutation,
    ) -> Result<(), OpError> {
        let _object = self.locks.write(object).await;
        self.replicate_held(state, object, mutation).await
    }

    /// [`Osd::replicate`] for a caller that holds the object's write queue.
    pub(crate) async fn replicate_held(
        self: &Rc<Self>,
        state: &Rc<Pg>,
        object: ObjectId,
        mutation: Mutation,
    ) -> Result<(), OpError> {
        let (pg, epoch) = (state.id, state.epoch);
        let _in_flight = self.pgs.write_started(pg);
        let map = self.map.borrow().clone();
        let view = PgView::lookup(&map, pg);
        admission::still_primary(view, self.id, epoch)?;
        self.still_active(state)?;
        let view = view.expect("still_primary found the pg");
        let members = view.members;
        if members.len() < usize::from(view.min_size.max(1)) {
            return Err(OpError::TooFewMembers { pg, members: members.len(), min_size: view.min_size });
        }
        if let Some(osd) = state.with_active(|active| active.unlisted.first().copied()).flatten() {
            return Err(OpError::MemberNotListed { pg, osd });
        }
        let known = self.engine.with(|engine| engine.object_version(object));
        if matches!(mutation, Mutation::Delete) && known.is_none() {
            // Not here, so on no complete member (the primary holds every object). When every
            // member of every recorded set is one of them, the object is nowhere peering could
            // find it. Otherwise a recorded member away from the acting set may still hold a
            // copy (a delete that was not acknowledged reached the others, and write-back has
            // forgotten its version here since): the delete goes on as zeros at a new version,
            // newer than that copy, or the copy would come back when that member returns.
            if state.with_active(|active| active.recorded_members_complete()) != Some(false) {
                return Ok(());
            }
            stdx::coverage::mark("primary: a delete of an object not held here zeros it for an absent member");
        }
        if known.is_none() {
            self.refuse_new_object(object, &members[1..])?;
        }
        self.ensure_recorded(state).await?;
        // Peering tells a deleted object from one never received only by its version, so a PG
        // that is not clean, or whose history still names other members, keeps the object and
        // zeros it.
        let mutation = match mutation {
            Mutation::Delete if state.with_active(|active| active.deletes_remove()) != Some(true) => {
                Mutation::zeros(0, self.object_size_bytes)
            }
            other => other,
        };
        // A whole-object write replaces whatever a member holds; any other write skips the
        // members that still lack the object (their copy would be the old one with this write on
        // top): recovery copies it to them later, whole, at its newest version. The members
        // that lack nothing get every write, and the history records only them. A member that
        // lacks only this object is complete once a whole write lands, and counts toward
        // min_size for it: that is how recovery rewrites an object a member refused.
        let whole = match &mutation {
            Mutation::Write { offset_bytes: 0, data } => data.len() == self.object_size_bytes as usize,
            Mutation::Write { .. } | Mutation::Delete => false,
            Mutation::Replace { .. } => true,
        };
        let (skipped, complete) = state
            .with_active(|active| {
                let skipped = if whole { Vec::new() } else { active.missing_object(object) };
                let complete = |osd: &&u32| {
                    if whole {
                        active.complete_with(**osd, object)
                    } else {
                        active.is_complete(**osd)
                    }
                };
                (skipped, active.acting.iter().filter(complete).count())
            })
            .ok_or(OpError::PgPeering { pg, epoch })?;
        if complete < usize::from(view.min_size.max(1)) {
            return Err(OpError::TooFewMembers { pg, members: complete, min_size: view.min_size });
        }
        let mut secondaries = Vec::with_capacity(members.len() - 1);
        for &osd in members[1..].iter().filter(|osd| !skipped.contains(osd)) {
            let address = map.address(osd).ok_or(OpError::MemberDown { osd })?;
            secondaries.push((osd, address));
        }
        let floor = state.with_active(|active| active.floors.get(&object).copied()).flatten();
        // Above every version this PG minted at this epoch too: the engine forgets a deleted
        // object's version once write-back passes the delete, and a member still holding the
        // delete would take a write at that same version for a retry of it and skip it.
        let version = mint_version(epoch, known.max(floor).max(state.minted.get()));
        state.minted.set(Some(version));
        let deleting = matches!(mutation, Mutation::Delete);
        let (local, remote) = match mutation {
            Mutation::Write { offset_bytes, data } => (
                EngineRequest::WriteVersioned { object, offset_bytes, data: AlignedBuffer::from_slice(&data), version },
                Request::SecWrite { pg, object, version, offset_bytes, data },
            ),
            Mutation::Replace { data, present } => (
                EngineRequest::ReplaceVersioned { object, data: AlignedBuffer::from_slice(&data), present, version },
                Request::SecReplace {
                    pg,
                    object,
                    version,
                    page_mask: present,
                    data: crate::pages::pack(&data, present),
                },
            ),
            Mutation::Delete => {
                (EngineRequest::DeleteVersioned { object, version }, Request::SecDelete { pg, object, version })
            }
        };
        // Queued locally first; the sends go out while the local request waits for the next
        // engine poll, which comes once this task yields.
        let submitted = tokio::time::Instant::now();
        let local = self.engine.submit(local);
        let local = async {
            let result = local.await;
            self.op_times.record(Timed::LocalCommit, submitted.elapsed());
            result
        };
        let remotes = secondaries.iter().map(|(osd, address)| self.peers.call(*osd, address, epoch, remote.clone()));
        let remotes = async {
            let results = futures_util::future::join_all(remotes).await;
            self.op_times.record(Timed::Replicas, submitted.elapsed());
            results
        };
        // A member that stopped answering must not hold the write past the PG's next epoch: the
        // new epoch's peering waits for it. The local write is always waited for, so the next
        // version minted for this object comes after it.
        let remotes = async {
            tokio::select! {
                biased;
                results = remotes => Some(results),
                () = self.epoch_moved(pg, epoch) => None,
            }
        };
        let (local, remotes) = if crate::planted::is_planted(crate::planted::PlantedBug::AckBeforeReplicas) {
            let mut remotes = std::pin::pin!(remotes);
            let started = futures_util::FutureExt::now_or_never(remotes.as_mut());
            (local.await, Some(started.flatten().unwrap_or_default()))
        } else {
            futures_util::future::join(local, remotes).await
        };
        if local.is_err() {
            // The secondaries may hold this version now, with contents this OSD does not: the
            // next write must mint above it, or they would take it for a retry of this one and
            // skip it.
            state.with_active(|active| active.raise_floor(object, version));
        }
        local?;
        // The object's queue kept every other write out: what the engine holds now is what this
        // op minted, and the version every secondary was sent (a delete's version stays until
        // write-back forgets the object).
        let held = self.engine.with(|engine| engine.object_version(object));
        assert!(
            held == Some(version) || (deleting && held.is_none()),
            "object {object} changed under its write queue: minted {version:#x}, the engine holds {held:#x?}"
        );
        let Some(remotes) = remotes else {
            return Err(OpError::WrongEpoch { ours: self.current_epoch(pg), theirs: epoch });
        };
        for ((osd, _), result) in secondaries.iter().zip(remotes) {
            let outcome = secondary_outcome(*osd, epoch, result);
            if let Err(OpError::SecondaryFailed { status: Status::NoSpace, osd }) = &outcome {
                self.member_full(*osd);
            }
            if let Err(OpError::SecondaryHoldsNewer { current, .. }) = &outcome {
                // It holds or remembers a newer version (a write no one acknowledged, a copy it
                // deleted): the retry mints above it.
                state.with_active(|active| active.raise_floor(object, *current));
            }
            outcome?;
        }
        if whole {
            // Every member holds the object now, whatever it lacked before.
            state.with_active(|active| {
                for member in active.missing_object(object) {
                    recovery::forget(active, member, object);
                }
                active.floors.remove(&object);
            });
        }
        // Nothing is acknowledged once the PG moved on or the lease may have run out, even if
        // it is durable.
        self.still_primary(pg, epoch)?;
        self.fence()
    }

    /// Resolves once the map shows `pg` at another epoch than `epoch`.
    async fn epoch_moved(&self, pg: PgId, epoch: u64) {
        let mut receiver = self.map.clone();
        let moved = receiver
            .wait_for(|map| map.pg_epoch_and_primary(pg.pool, pg.pg).is_none_or(|(current, _)| current != epoch))
            .await
            .is_ok();
        if !moved {
            std::future::pending::<()>().await;
        }
    }
}

/// What a secondary's reply to a SecWrite or SecDelete means for the write.
fn secondary_outcome(osd: u32, epoch: u64, result: Result<net::Reply, crate::peers::PeerError>) -> Result<(), OpError> {
    let reply = result.map_err(|source| OpError::SecondaryUnreachable { osd, source })?;
    match reply.response {
        Response::SecWrite | Response::SecReplace | Response::SecDelete => Ok(()),
        Response::Failed { status: Status::NoSuchObject, opcode: Opcode::SecDelete } => Ok(()),
        Response::NewerVersionHeld { current, .. } => Err(OpError::SecondaryHoldsNewer { osd, current }),
        Response::Failed { status: Status::WrongEpoch, .. } => {
            Err(OpError::SecondaryAtOtherEpoch { osd, theirs: reply.epoch, ours: epoch })
        }
        Response::Failed { status, .. } => Err(OpError::SecondaryFailed { osd, status }),
        other => Err(OpError::SecondaryAnsweredOther { osd, opcode: other.opcode() }),
    }
}
