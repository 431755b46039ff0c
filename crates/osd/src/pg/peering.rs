//! Peering (`docs/design/peering.md`): when the map makes this OSD the primary of a PG at a new
//! epoch, it reads the PG's history, lists the objects of every member of the acting set and of
//! every recorded set, lets `cluster::peering::plan` decide, brings itself and `min_size - 1`
//! others up to date, and only then serves the PG. Members still lacking objects catch up in
//! the background (`recovery.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use cluster::peering::{self, Decision, Listing};
use cluster::{object_pg, ClusterMap};
use engine::ObjectId;
use tokio::time::Instant;
use wire::{PgId, PgTrouble, Request, Response};

use crate::ops::Osd;
use crate::ops::PgView;

use super::recovery::{CopyError, Push};
use super::retry::{self, log_failure};
use super::state::{raise, Active, Pg, Phase};

/// Why a peering did not bring its PG up: what kind of trouble, for `basalt pg ls`, and the
/// details, for the log.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) trouble: PgTrouble,
    pub(crate) reason: String,
}

impl Failure {
    fn new(trouble: PgTrouble, reason: impl Into<String>) -> Failure {
        Failure { trouble, reason: reason.into() }
    }
}

/// The map moved on, or a member went down, while peering ran.
fn moved(reason: impl std::fmt::Display) -> Failure {
    Failure::new(PgTrouble::MapMoved, reason.to_string())
}

/// Copying an object to or from a member failed.
fn copy_failed(reason: impl std::fmt::Display) -> Failure {
    Failure::new(PgTrouble::Copy, reason.to_string())
}

/// PGs peering at once on one OSD.
pub(crate) const PEERING_CONCURRENCY: usize = 8;
/// How long peering waits for the writes of an earlier epoch still in flight here.
const DRAIN_WAIT: Duration = Duration::from_secs(10);
/// Most objects a member may list for one PG: a bound on what a peer can make this OSD hold.
const LISTED_OBJECTS_MAX: usize = 1 << 24;

impl Osd {
    /// Follows the map for as long as the OSD runs: starts peering each PG this OSD became the
    /// primary of at a new epoch, forgets the PGs it no longer leads, and retries inactive PGs.
    pub(crate) async fn follow_map(self: Rc<Self>) {
        let mut receiver = self.map.clone();
        // Inactive PGs try again when their pause is over (`retry.rs`), or at once on a new map.
        let mut retry = tokio::time::interval(retry::FIRST);
        retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let map = receiver.borrow_and_update().clone();
            self.start_peering(&map);
            tokio::select! {
                biased;
                changed = receiver.changed() => if changed.is_err() { return },
                _ = retry.tick() => {}
            }
        }
    }

    /// Starts peering where the map calls for it.
    fn start_peering(self: &Rc<Self>, map: &Arc<ClusterMap>) {
        let now = Instant::now();
        let mut led = BTreeSet::new();
        for (&pool, table) in &map.pg_tables {
            for (pg, (epoch, acting)) in table.pgs.iter().enumerate() {
                if acting.first() != Some(&self.id) {
                    continue;
                }
                let id = PgId { pool, pg: pg as u32 };
                if PgView::lookup(map, id).is_none() {
                    continue;
                }
                led.insert(id);
                let current = self.pgs.get(id);
                let again = match &current {
                    None => true,
                    Some(state) if state.epoch != *epoch => true,
                    Some(state) => {
                        self.follow_target(state, table.target(pg));
                        state.with_phase(|phase| matches!(phase, Phase::Inactive { .. })) && state.attempts.due()
                    }
                };
                if again {
                    // A PG that was not serving yet keeps its first sign, for the failover time.
                    let since = current.filter(|state| !state.is_active()).map_or(now, |state| state.since);
                    self.peer(self.pgs.begin(id, *epoch, since));
                }
            }
        }
        self.pgs.retain(|pg| led.contains(&pg));
    }

    /// Takes a new target set of an active PG at the same epoch (the mon changes targets without
    /// a new epoch while the acting set stays). A PG with nothing left to copy may be clean now,
    /// and no recovery is running to record it: one is started.
    fn follow_target(self: &Rc<Self>, state: &Rc<Pg>, target: &[u32]) {
        let idle = state.with_active(|active| {
            if active.target == target {
                return false;
            }
            active.target = target.to_vec();
            active.recovery_left() == (0, 0)
        });
        if idle == Some(true) {
            stdx::coverage::mark("peering: a target change leaves an active pg clean");
            tokio::task::spawn_local(self.clone().recover(state.clone()));
        }
    }

    /// Peers `pg` again at its epoch (a member's connection failed: it may have restarted and
    /// lost what it had not made durable).
    pub(crate) fn peer_again(self: &Rc<Self>, state: &Rc<Pg>) {
        if self.pgs.is_current(state) {
            stdx::coverage::mark("peering: again at the same epoch");
            tracing::info!(osd = self.id, pg = %state.id, epoch = state.epoch, "peering again");
            self.peer(self.pgs.begin(state.id, state.epoch, Instant::now()));
        }
    }

    fn peer(self: &Rc<Self>, state: Rc<Pg>) {
        let osd = self.clone();
        tokio::task::spawn_local(async move {
            let slots = osd.peering_slots.clone();
            let Ok(_slot) = slots.acquire().await else { return };
            if !osd.pgs.is_current(&state) {
                return;
            }
            let started = Instant::now();
            let outcome = osd.run_peering(&state).await;
            match outcome {
                Ok(active) => {
                    state.attempts.succeeded();
                    let recovery = active.recovery_left() != (0, 0);
                    let clean = active.clean();
                    let members = format!("{:?}", active.acting);
                    if osd.pgs.set_phase(&state, Phase::Active(active)) {
                        let peering_ms = started.elapsed().as_millis() as u64;
                        let since_first_sign_ms = state.since.elapsed().as_millis() as u64;
                        let code = state.state_code();
                        // A PG that comes up clean is the healthy case: counted into one summary
                        // line (`Osd::log_quiet_activations`), not logged one by one.
                        if code == wire::PgStateCode::Clean {
                            osd.quiet_activations.note();
                            tracing::debug!(osd = osd.id, pg = %state.id, epoch = state.epoch, members, peering_ms, since_first_sign_ms, "pg active and clean");
                        } else {
                            tracing::info!(
                                osd = osd.id, pg = %state.id, epoch = state.epoch, members, peering_ms,
                                since_first_sign_ms, state = code.name(), "pg active"
                            );
                        }
                        if recovery || clean {
                            tokio::task::spawn_local(osd.clone().recover(state));
                        }
                    }
                }
                Err(Failure { trouble, reason }) => {
                    if osd.pgs.is_current(&state) {
                        stdx::coverage::mark("peering: the pg inactive");
                        let (pause, loudness) = state.attempts.failed(trouble);
                        let (failures, stuck) = (state.attempts.failures(), state.attempts.is_stuck());
                        log_failure!(
                            loudness, osd = osd.id, pg = %state.id, epoch = state.epoch, ?trouble, %reason, failures,
                            stuck, retry_in_ms = pause.as_millis() as u64, "pg inactive"
                        );
                        osd.pgs.set_phase(&state, Phase::Inactive { reason });
                    }
                }
            }
        });
    }

    /// Peering itself: the active state to serve with, or why the PG cannot be served.
    async fn run_peering(self: &Rc<Self>, state: &Rc<Pg>) -> Result<Active, Failure> {
        let pg = state.id;
        if tokio::time::timeout(DRAIN_WAIT, self.pgs.drained(pg)).await.is_err() {
            return Err(Failure::new(PgTrouble::EarlierWrites, "writes of an earlier epoch are still in flight"));
        }
        let map = self.map.borrow().clone();
        let view = PgView::lookup(&map, pg).ok_or_else(|| moved("the pg left the map"))?;
        if view.epoch != state.epoch {
            return Err(moved(format!("the map moved on to epoch {}", view.epoch)));
        }
        let acting = view.members.to_vec();
        let target = map.pg_tables[&pg.pool].target(pg.pg as usize).to_vec();
        let (history, history_revision) = super::history::read(self.store.as_ref(), pg)
            .await
            .map_err(|error| Failure::new(PgTrouble::History, error))?;

        // Every member of the acting set and of every recorded set that is up answers. An OSD
        // marked down on its peers' reports is not asked: a link to it may be cut, and waiting on
        // it would hold the PG; a recorded set that only it can answer for waits for its return.
        let mut asked: BTreeSet<u32> = acting.iter().copied().collect();
        asked.extend(history.required().flat_map(|interval| interval.members.iter().copied()));
        asked.remove(&self.id);
        asked.retain(|&osd| !map.is_marked_down(osd));
        let lists = asked.iter().filter_map(|&osd| {
            let address = map.address(osd)?.to_string();
            Some(async move { (osd, self.list_member(osd, &address, pg, view.pg_count, state.epoch).await) })
        });
        let mut listings: BTreeMap<u32, Listing> = BTreeMap::new();
        for (osd, listing) in futures_util::future::join_all(lists).await {
            match listing {
                Ok(listing) => {
                    listings.insert(osd, listing);
                }
                Err(reason) => {
                    stdx::coverage::mark("peering: a member did not list");
                    tracing::info!(osd = self.id, pg = %pg, peer = osd, %reason, "no list")
                }
            }
        }
        let gate = self.stray_gate.lock().await;
        listings.insert(self.id, self.list_local(pg, view.pg_count));
        drop(gate);

        let inputs = peering::Inputs {
            epoch: state.epoch,
            acting: &acting,
            min_size: view.min_size,
            history: &history,
            listings: &listings,
        };
        let mut plan = match peering::plan(&inputs) {
            Decision::Incomplete { unreachable, .. } => {
                stdx::coverage::mark("peering: incomplete, no member of a required set answered");
                let sets: Vec<String> = unreachable
                    .iter()
                    .map(|interval| format!("{:?} at epoch {}", interval.members, interval.epoch))
                    .collect();
                return Err(Failure::new(
                    PgTrouble::Incomplete,
                    format!("incomplete: no member of {} answered", sets.join(", ")),
                ));
            }
            Decision::TooFewMembers { reached, min_size, .. } => {
                stdx::coverage::mark("peering: fewer members than min_size answered");
                return Err(Failure::new(
                    PgTrouble::TooFewMembers,
                    format!("{reached} acting members answered, fewer than min_size {min_size}"),
                ));
            }
            Decision::Plan(plan) => plan,
        };
        if crate::planted::is_planted(crate::planted::PlantedBug::CatchUpSkipsStaleCopies) {
            for (member, needs) in &mut plan.needs {
                let held =
                    |object| listings.get(member).is_some_and(|listing| listing.iter().any(|(o, _)| *o == object));
                needs.retain(|need| !held(need.object));
            }
        }
        for bad in &plan.bad {
            tracing::warn!(osd = self.id, pg = %pg, ?bad, "a member's list was set aside");
        }

        // Copies that count for nothing go first, so no copy lands on top of one.
        for (&member, stale) in &plan.discard {
            stdx::coverage::mark("peering: copies outside the latest recorded set discarded");
            tracing::info!(osd = self.id, pg = %pg, member, objects = stale.len(), "discarding copies outside the latest recorded set");
            for &(object, held) in stale {
                self.still_current(state).map_err(moved)?;
                self.discard(pg, state.epoch, member, &map, object, held).await.map_err(copy_failed)?;
            }
        }
        // Itself first, from whoever holds each object's newest version, then the members that
        // must be complete before the PG serves. A copy that fails its checksums or its drive is
        // taken from another member holding the same version (never one whose list was set aside).
        let skip: Vec<u32> = std::iter::once(self.id).chain(plan.bad.iter().map(peering::BadListing::osd)).collect();
        for need in plan.needs.get(&self.id).into_iter().flatten() {
            self.still_current(state).map_err(moved)?;
            let mut sources = vec![need.source];
            sources.extend(holders(&listings, need, &skip, need.source));
            self.pull(pg, state.epoch, &sources, need.object, need.version).await.map_err(copy_failed)?;
        }
        // A member that refuses a copy because it holds or remembers a newer version (a copy it
        // deleted as a stray, one discarded earlier) keeps refusing it: the object must be
        // written again above that version, on every member, which takes an active PG. It is
        // left missing on that member, so recovery rewrites it first thing, and until then the
        // member does not count as complete (writes wait if min_size needs it).
        let mut missing: BTreeMap<u32, BTreeMap<ObjectId, Option<u64>>> = BTreeMap::new();
        let mut floors: BTreeMap<ObjectId, u64> = BTreeMap::new();
        for &member in &plan.before_active[1..] {
            for need in &plan.needs[&member] {
                stdx::coverage::mark("peering: a member brought up to date before the pg serves");
                self.still_current(state).map_err(moved)?;
                let address = map.address(member).ok_or_else(|| moved(format!("osd.{member} went down")))?;
                let others = holders(&listings, need, &skip, member);
                let held = held_version(&listings, member, need.object);
                let push =
                    Push { pg, epoch: state.epoch, member, address, object: need.object, held, holders: &others };
                match self.push(&push).await {
                    Ok(_) => {}
                    Err(CopyError::Refused { current, .. }) => {
                        stdx::coverage::mark("peering: a member refused a copy, left for recovery to rewrite");
                        tracing::info!(osd = self.id, pg = %pg, member, object = %need.object, current, "a member holds a newer version; recovery rewrites the object");
                        missing.entry(member).or_default().insert(need.object, held);
                        raise(&mut floors, need.object, current);
                    }
                    Err(error) => return Err(copy_failed(error)),
                }
            }
        }
        self.still_current(state).map_err(moved)?;
        let mut unlisted = BTreeSet::new();
        for &member in &plan.catching_up {
            match plan.needs.get(&member) {
                Some(needs) => {
                    let held = |object| held_version(&listings, member, object);
                    missing.insert(member, needs.iter().map(|need| (need.object, held(need.object))).collect());
                }
                None => {
                    stdx::coverage::mark("peering: a member left to list in recovery");
                    unlisted.insert(member);
                }
            }
        }
        // A discarded copy was deleted one above the version it held: the object's next write
        // goes above that.
        for &(object, held) in plan.discard.values().flatten() {
            raise(&mut floors, object, held + 1);
        }
        Ok(Active { acting, target, history, history_revision, missing, unlisted, floors })
    }

    /// The PgStates reply: every PG this OSD leads, as far as one reply holds.
    pub(crate) fn pg_states(&self) -> Response {
        let pgs =
            self.pgs.all().iter().take(wire::limits::PG_REPORTS_MAX_COUNT as usize).map(|pg| pg.report()).collect();
        Response::PgStates { history_writes: self.pgs.history_writes(), copied_bytes: self.pgs.copied_bytes(), pgs }
    }

    /// The VolumeRedundancy reply: volume `inode`'s objects in the PGs this OSD leads, and those
    /// a member of their PG's target set does not hold yet (every object of a PG whose target
    /// member is not acting, not listed yet, or not active).
    pub(crate) fn volume_redundancy(&self, inode: u64) -> Response {
        let map = self.map.borrow().clone();
        let pool = cluster::VolumeRecord::pool_of(inode);
        let Some(pg_count) = map.pools.get(&pool).map(|pool| pool.pg_count) else {
            return Response::VolumeRedundancy { objects: 0, degraded_objects: 0 };
        };
        // The PGs of the pool this OSD leads: only their objects are walked.
        let mut by_pg: BTreeMap<u32, Vec<ObjectId>> = BTreeMap::new();
        for state in self.pgs.all().into_iter().filter(|state| state.id.pool == pool) {
            let listed = self.list_local(state.id, pg_count);
            let held: Vec<ObjectId> =
                listed.into_iter().map(|(object, _)| object).filter(|object| object.inode == inode).collect();
            if !held.is_empty() {
                by_pg.insert(state.id.pg, held);
            }
        }
        let (mut objects, mut degraded_objects) = (0, 0);
        for (pg, held) in by_pg {
            let Some(state) = self.pgs.get(PgId { pool, pg }) else { continue };
            objects += held.len() as u64;
            let degraded = state.with_active(|active| {
                let whole =
                    active.target.iter().any(|osd| !active.acting.contains(osd) || active.unlisted.contains(osd));
                if whole {
                    return held.len();
                }
                held.iter().filter(|&&object| !active.missing_object(object).is_empty()).count()
            });
            degraded_objects += degraded.unwrap_or(held.len()) as u64;
        }
        Response::VolumeRedundancy { objects, degraded_objects }
    }

    pub(crate) fn still_current(&self, state: &Rc<Pg>) -> Result<(), String> {
        if self.pgs.is_current(state) {
            Ok(())
        } else {
            Err("superseded".into())
        }
    }

    /// This OSD's objects of PG `pg` and their versions, in order.
    pub(crate) fn list_local(&self, pg: PgId, pg_count: u32) -> Listing {
        self.engine.list_pg(pg, pg_count, ObjectId { inode: 0, stripe: 0 }, usize::MAX)
    }

    /// A member's objects of the PG, page by page. A page that is out of order or starts before
    /// what was asked is the member's fault: the whole list fails.
    pub(crate) async fn list_member(
        &self,
        osd: u32,
        address: &str,
        pg: PgId,
        pg_count: u32,
        epoch: u64,
    ) -> Result<Listing, String> {
        let mut listing = Listing::new();
        let mut start = ObjectId { inode: 0, stripe: 0 };
        loop {
            let count_max = wire::limits::LIST_ENTRIES_MAX_COUNT;
            let reply = self.peers.call(osd, address, epoch, Request::SecList { pg, start, count_max }).await?;
            let entries = match reply.response {
                Response::SecList { entries } => entries,
                other => return Err(format!("osd.{osd} answered a list with {other:?}")),
            };
            let full = entries.len() as u32 >= count_max;
            for entry in entries {
                if entry.object < start || listing.last().is_some_and(|&(last, _)| last >= entry.object) {
                    return Err(format!("osd.{osd} listed {} out of order", entry.object));
                }
                let pool = cluster::VolumeRecord::pool_of(entry.object.inode);
                if pool != pg.pool || object_pg(entry.object.inode, entry.object.stripe, pg_count) != pg.pg {
                    return Err(format!("osd.{osd} listed {}, which is not in the pg", entry.object));
                }
                listing.push((entry.object, entry.version));
            }
            if listing.len() > LISTED_OBJECTS_MAX {
                return Err(format!("osd.{osd} listed more than {LISTED_OBJECTS_MAX} objects"));
            }
            let Some(&(last, _)) = listing.last() else { return Ok(listing) };
            if !full {
                return Ok(listing);
            }
            start = successor(last).ok_or_else(|| format!("osd.{osd} listed past the last object id"))?;
        }
    }
}

/// The members, other than `skip` and `other`, that listed `need`'s object at its version.
fn holders(listings: &BTreeMap<u32, Listing>, need: &peering::Need, skip: &[u32], other: u32) -> Vec<u32> {
    listings
        .iter()
        .filter(|(osd, _)| **osd != other && !skip.contains(osd))
        .filter(|(_, listing)| {
            listing
                .binary_search_by_key(&need.object, |&(object, _)| object)
                .is_ok_and(|index| listing[index].1 == need.version)
        })
        .map(|(&osd, _)| osd)
        .collect()
}

/// The version of `object` that `member` listed, if it listed one.
fn held_version(listings: &BTreeMap<u32, Listing>, member: u32, object: ObjectId) -> Option<u64> {
    let listing = listings.get(&member)?;
    let index = listing.binary_search_by_key(&object, |&(object, _)| object).ok()?;
    Some(listing[index].1)
}

/// The object after `object` in `(inode, stripe)` order.
fn successor(object: ObjectId) -> Option<ObjectId> {
    match object.stripe.checked_add(1) {
        Some(stripe) => Some(ObjectId { inode: object.inode, stripe }),
        None => Some(ObjectId { inode: object.inode.checked_add(1)?, stripe: 0 }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(stripe: u64) -> ObjectId {
        ObjectId { inode: 1, stripe }
    }

    #[test]
    fn holders_are_the_other_members_listing_the_same_version() {
        let listings: BTreeMap<u32, Listing> = [
            (1, vec![(object(1), 5), (object(2), 7)]),
            (2, vec![(object(2), 7)]),
            (3, vec![(object(1), 4), (object(2), 7)]),
            (4, vec![(object(2), 6)]),
        ]
        .into_iter()
        .collect();
        let need = peering::Need { object: object(2), version: 7, source: 1 };
        assert_eq!(holders(&listings, &need, &[], 1), vec![2, 3]);
        assert_eq!(holders(&listings, &need, &[1, 2], 3), Vec::<u32>::new());
        let need = peering::Need { object: object(1), version: 5, source: 1 };
        assert_eq!(holders(&listings, &need, &[2], 3), vec![1]);
    }
}
