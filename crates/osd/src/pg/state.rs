//! What this OSD knows of the PGs it is primary of (`docs/design/peering.md`): each is peering,
//! inactive (and why), or active with the members that are still catching up.
//!
//! One [`Pg`] per PG and epoch: a new epoch, or peering again at the same one, replaces it, so
//! a peering or recovery task that finds its `Pg` no longer current stops. Ops wait for their
//! PG's `Pg` to be active at their epoch. Nothing here does I/O.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use stdx::HashMap;
use tokio::time::Instant;

use cluster::peering::{History, Interval};
use engine::ObjectId;
use tokio::sync::Notify;
use wire::{PgId, PgReport, PgStateCode};

use super::retry::Attempts;
use crate::ops::OpError;
use crate::pacer::Priority;

/// One PG at one epoch, as its primary sees it.
pub(crate) struct Pg {
    pub(crate) id: PgId,
    pub(crate) epoch: u64,
    phase: RefCell<Phase>,
    /// When the change that made this PG peer was first seen here, for the failover's duration.
    pub(crate) since: Instant,
    /// History writes of this PG run one at a time.
    pub(crate) recording: tokio::sync::Mutex<()>,
    /// Failures in a row of its peering and recovery at this epoch, shared by every `Pg` of
    /// the epoch (peering again makes a new one).
    pub(crate) attempts: Rc<Attempts>,
    /// The last version a write of the PG minted at this epoch, shared likewise: every version
    /// minted goes above it.
    pub(crate) minted: Rc<Cell<Option<u64>>>,
}

pub(crate) enum Phase {
    /// Collecting the members' lists and bringing the first members up to date.
    Peering,
    /// Not serving: a recorded set is unreachable, or too few members answered (the kind of
    /// trouble is in the PG's `attempts`).
    Inactive {
        reason: String,
    },
    Active(Active),
}

/// An active PG.
pub(crate) struct Active {
    /// Primary first.
    pub(crate) acting: Vec<u32>,
    pub(crate) target: Vec<u32>,
    /// The PG's history as last read or written here, and the store revision of that record
    /// (0: no record).
    pub(crate) history: History,
    pub(crate) history_revision: i64,
    /// Acting members that take new writes but still lack objects: what each must receive,
    /// and the version of it the member holds (`None`: none), which catch-up builds on.
    pub(crate) missing: BTreeMap<u32, BTreeMap<ObjectId, Option<u64>>>,
    /// Acting members whose lists peering did not get: what they lack is not known yet, so no
    /// write goes to them until recovery has listed them.
    pub(crate) unlisted: BTreeSet<u32>,
    /// Versions some member may remember of an object (a copy it deleted or discarded) above
    /// what this OSD holds: the object's next write must go above them.
    pub(crate) floors: BTreeMap<ObjectId, u64>,
}

impl Active {
    /// Every target member is acting, and every acting member (old members that left the
    /// target included, until the mon drops them) holds every object. Asked on every write: no
    /// allocation.
    pub(crate) fn clean(&self) -> bool {
        self.target.iter().all(|osd| self.acting.contains(osd))
            && self.unlisted.is_empty()
            && self.missing.values().all(BTreeMap::is_empty)
    }

    /// Whether a delete may remove the object rather than zero it: the PG is clean and its
    /// recorded history names only the acting members, so that every member peering could
    /// take a copy from gets the delete. A member of an older recorded set (one marked out and
    /// back, before the clean record was written) would otherwise offer its old copy as the
    /// newest, and the deleted data would come back.
    pub(crate) fn deletes_remove(&self) -> bool {
        self.clean()
            && self.history.intervals.is_empty()
            && self.history.clean.as_ref().is_some_and(|clean| same_members(&clean.members, &self.acting))
    }

    /// Whether every member of every set the history records is a complete acting member.
    pub(crate) fn recorded_members_complete(&self) -> bool {
        self.history.required().all(|set| set.members.iter().all(|&osd| self.is_complete(osd)))
    }

    /// Whether the history already finds every write this epoch acknowledges: the latest set
    /// it records is made of complete members (every write reaches each of them, so the
    /// member of that set peering reaches holds it; peering trusts only that set's copies,
    /// `cluster::peering`). Only otherwise does a write cost a record.
    /// Being clean in memory is not enough: until the clean record is written, the history
    /// may name only older sets, whose members outside the acting set miss this epoch's writes
    /// (and a clean record can wait, the store cut off, while the lease still runs). Nor is an
    /// interval recorded earlier in this epoch by itself: after peering again at the same epoch
    /// (a member restarted) one of its members may be catching up, and writes skip it.
    pub(crate) fn recorded(&self) -> bool {
        self.history.required().last().is_some_and(|set| set.members.iter().all(|&osd| self.is_complete(osd)))
    }

    /// The history with this epoch's complete members appended: the members every write of
    /// the epoch reaches. A member still catching up is left out, since a write of an object it
    /// lacks skips it; it joins the record when the PG is recorded clean.
    pub(crate) fn with_interval(&self, epoch: u64) -> History {
        let mut history = self.history.clone();
        let members: Vec<u32> = self.acting.iter().copied().filter(|&osd| self.is_complete(osd)).collect();
        assert_eq!(members.first(), self.acting.first(), "the primary holds every object of its pg");
        history.intervals.push(Interval { epoch, members });
        history
    }

    /// Whether acting member `osd` holds every object of the PG: listed, and lacking nothing.
    /// Only such members get every write, so only they count toward `min_size` and are
    /// recorded in the history. Asked on every write: no allocation.
    pub(crate) fn is_complete(&self, osd: u32) -> bool {
        self.acting.contains(&osd)
            && !self.unlisted.contains(&osd)
            && self.missing.get(&osd).is_none_or(BTreeMap::is_empty)
    }

    /// Whether acting member `osd` holds every object of the PG once it receives `object`
    /// whole: complete, or lacking that object only.
    pub(crate) fn complete_with(&self, osd: u32, object: ObjectId) -> bool {
        self.acting.contains(&osd)
            && !self.unlisted.contains(&osd)
            && self.missing.get(&osd).is_none_or(|objects| objects.keys().all(|&lacking| lacking == object))
    }

    /// How urgent this PG's copies are: by how many acting members hold everything, against
    /// `min_size` and the target's size.
    pub(crate) fn priority(&self, min_size: u8) -> Priority {
        let complete = self.acting.iter().filter(|&&osd| self.is_complete(osd)).count();
        if complete <= usize::from(min_size) {
            Priority::AtMinSize
        } else if complete < self.target.len() {
            Priority::Degraded
        } else {
            Priority::Misplaced
        }
    }

    /// The next write of `object` must go above `version`.
    pub(crate) fn raise_floor(&mut self, object: ObjectId, version: u64) {
        raise(&mut self.floors, object, version);
    }

    /// The members that still need `object`.
    pub(crate) fn missing_object(&self, object: ObjectId) -> Vec<u32> {
        self.missing.iter().filter(|(_, objects)| objects.contains_key(&object)).map(|(&osd, _)| osd).collect()
    }

    /// Objects left to copy, and members left to list.
    pub(crate) fn recovery_left(&self) -> (usize, usize) {
        (self.missing.values().map(BTreeMap::len).sum(), self.unlisted.len())
    }
}

/// The next write of `object` must go above `version`, in `floors` (an active PG's, or one
/// peering is building).
pub(crate) fn raise(floors: &mut BTreeMap<ObjectId, u64>, object: ObjectId, version: u64) {
    let floor = floors.entry(object).or_default();
    *floor = (*floor).max(version);
}

/// Whether two member lists name the same OSDs, in any order (lists hold distinct OSDs).
pub(crate) fn same_members(a: &[u32], b: &[u32]) -> bool {
    a.len() == b.len() && a.iter().all(|osd| b.contains(osd))
}

impl Pg {
    pub(crate) fn with_phase<T>(&self, f: impl FnOnce(&Phase) -> T) -> T {
        f(&self.phase.borrow())
    }

    /// Runs `f` on the active state; `None` when the PG is not active.
    pub(crate) fn with_active<T>(&self, f: impl FnOnce(&mut Active) -> T) -> Option<T> {
        match &mut *self.phase.borrow_mut() {
            Phase::Active(active) => Some(f(active)),
            _ => None,
        }
    }

    pub(crate) fn is_active(&self) -> bool {
        self.with_phase(|phase| matches!(phase, Phase::Active(_)))
    }

    /// The state as the primary reports it.
    pub(crate) fn state_code(&self) -> PgStateCode {
        self.with_phase(|phase| match phase {
            Phase::Peering => PgStateCode::Peering,
            Phase::Inactive { .. } => PgStateCode::Inactive,
            Phase::Active(active) if active.clean() => PgStateCode::Clean,
            Phase::Active(active) if active.recovery_left() != (0, 0) => PgStateCode::Recovering,
            Phase::Active(_) => PgStateCode::Degraded,
        })
    }

    pub(crate) fn report(&self) -> PgReport {
        let (objects_left, members_unlisted) = self.with_active(|active| active.recovery_left()).unwrap_or_default();
        PgReport {
            pg: self.id,
            epoch: self.epoch,
            state: self.state_code() as u32,
            members_unlisted: members_unlisted as u32,
            objects_left: objects_left as u64,
            trouble: self.attempts.trouble() as u32,
            failures: self.attempts.failures(),
        }
    }
}

/// What every `Pg` of one epoch of a PG shares.
#[derive(Default)]
struct Epoch {
    epoch: u64,
    attempts: Rc<Attempts>,
    minted: Rc<Cell<Option<u64>>>,
}

/// The PGs this OSD is primary of.
#[derive(Default)]
pub(crate) struct PgStates {
    pgs: RefCell<HashMap<PgId, Rc<Pg>>>,
    /// Each PG's attempts and last version minted, at its current epoch.
    epochs: RefCell<HashMap<PgId, Epoch>>,
    /// Writes in flight per PG, of any epoch: peering waits until the PG's older ones are done.
    writes: RefCell<HashMap<PgId, usize>>,
    /// Signalled on every phase change and every new `Pg`.
    changed: Notify,
    /// Signalled when a PG's writes in flight reach zero.
    drained: Notify,
    /// Store writes of PG histories since the OSD started.
    history_writes: Cell<u64>,
    /// Object data sent to members catching up or backfilling since the OSD started.
    copied_bytes: Cell<u64>,
}

impl PgStates {
    pub(crate) fn get(&self, pg: PgId) -> Option<Rc<Pg>> {
        self.pgs.borrow().get(&pg).cloned()
    }

    /// Starts a new `Pg` in `Peering` at `epoch`, replacing any other; returns it.
    pub(crate) fn begin(&self, pg: PgId, epoch: u64, since: Instant) -> Rc<Pg> {
        let (attempts, minted) = {
            let mut all = self.epochs.borrow_mut();
            let shared = all.entry(pg).or_insert_with(|| Epoch { epoch, ..Epoch::default() });
            if shared.epoch != epoch {
                *shared = Epoch { epoch, ..Epoch::default() };
            }
            (shared.attempts.clone(), shared.minted.clone())
        };
        let state = Rc::new(Pg {
            id: pg,
            epoch,
            phase: RefCell::new(Phase::Peering),
            since,
            recording: tokio::sync::Mutex::new(()),
            attempts,
            minted,
        });
        self.pgs.borrow_mut().insert(pg, state.clone());
        self.changed.notify_waiters();
        state
    }

    /// Forgets every PG `keep` refuses.
    pub(crate) fn retain(&self, mut keep: impl FnMut(PgId) -> bool) {
        self.pgs.borrow_mut().retain(|pg, _| keep(*pg));
        let pgs = self.pgs.borrow();
        self.epochs.borrow_mut().retain(|pg, _| pgs.contains_key(pg));
        self.changed.notify_waiters();
    }

    /// Every PG with its state, in PG order.
    pub(crate) fn all(&self) -> Vec<Rc<Pg>> {
        let mut all: Vec<Rc<Pg>> = self.pgs.borrow().values().cloned().collect();
        all.sort_by_key(|pg| (pg.id.pool, pg.id.pg));
        all
    }

    /// Whether `state` is still the PG's current `Pg`.
    pub(crate) fn is_current(&self, state: &Rc<Pg>) -> bool {
        self.pgs.borrow().get(&state.id).is_some_and(|current| Rc::ptr_eq(current, state))
    }

    /// Moves `state` to `phase` if it is still current.
    pub(crate) fn set_phase(&self, state: &Rc<Pg>, phase: Phase) -> bool {
        if !self.is_current(state) {
            return false;
        }
        *state.phase.borrow_mut() = phase;
        self.changed.notify_waiters();
        true
    }

    /// Waits until `pg` is active at `epoch`, for at most `wait`. A PG inactive at that epoch
    /// answers at once with why.
    pub(crate) async fn active(&self, pg: PgId, epoch: u64, wait: std::time::Duration) -> Result<Rc<Pg>, OpError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let changed = self.changed.notified();
            if let Some(state) = self.get(pg).filter(|state| state.epoch == epoch) {
                let inactive = state.with_phase(|phase| match phase {
                    Phase::Active(_) => Ok(true),
                    Phase::Peering => Ok(false),
                    Phase::Inactive { reason, .. } => Err(reason.clone()),
                });
                match inactive {
                    Ok(true) => return Ok(state),
                    Ok(false) => {}
                    Err(reason) => return Err(OpError::PgInactive { pg, reason }),
                }
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return Err(OpError::PgPeering { pg, epoch });
            }
        }
    }

    /// Counts a write of `pg` in flight until the guard drops.
    pub(crate) fn write_started(&self, pg: PgId) -> WriteInFlight<'_> {
        *self.writes.borrow_mut().entry(pg).or_default() += 1;
        WriteInFlight { states: self, pg }
    }

    /// Waits until `pg` has no write in flight.
    pub(crate) async fn drained(&self, pg: PgId) {
        loop {
            let drained = self.drained.notified();
            if !self.writes.borrow().contains_key(&pg) {
                return;
            }
            drained.await;
        }
    }

    pub(crate) fn count_history_write(&self) {
        self.history_writes.set(self.history_writes.get() + 1);
    }

    pub(crate) fn history_writes(&self) -> u64 {
        self.history_writes.get()
    }

    pub(crate) fn count_copied(&self, bytes: u64) {
        self.copied_bytes.set(self.copied_bytes.get() + bytes);
    }

    pub(crate) fn copied_bytes(&self) -> u64 {
        self.copied_bytes.get()
    }
}

/// A write in flight, counted per PG.
pub(crate) struct WriteInFlight<'a> {
    states: &'a PgStates,
    pg: PgId,
}

impl Drop for WriteInFlight<'_> {
    fn drop(&mut self) {
        let mut writes = self.states.writes.borrow_mut();
        let count = writes.get_mut(&self.pg).expect("a write in flight is counted");
        *count -= 1;
        if *count == 0 {
            writes.remove(&self.pg);
            self.states.drained.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn active(acting: &[u32], target: &[u32], history: History) -> Active {
        Active {
            acting: acting.to_vec(),
            target: target.to_vec(),
            history,
            history_revision: 0,
            missing: BTreeMap::new(),
            unlisted: BTreeSet::new(),
            floors: BTreeMap::new(),
        }
    }

    fn interval(epoch: u64, members: &[u32]) -> Interval {
        Interval { epoch, members: members.to_vec() }
    }

    #[test]
    fn a_write_needs_a_record_only_when_no_required_set_is_acting() {
        // Clean in memory but recorded nowhere yet: the first write records the set.
        assert!(!active(&[1, 2, 3], &[3, 2, 1], History::default()).recorded());
        // Clean in memory, the record naming an older set (osd 1 left): recorded again.
        let moved = active(&[4, 3], &[4, 3], History { clean: Some(interval(3, &[2, 4])), intervals: vec![] });
        assert!(moved.clean() && !moved.recorded());
        assert!(active(&[4, 3], &[4, 3], History { clean: Some(interval(5, &[4, 3])), intervals: vec![] }).recorded());
        // Degraded, nothing recorded: the first write records the set.
        let degraded = active(&[1, 2], &[1, 2, 3], History::default());
        assert!(!degraded.recorded());
        let recorded = active(&[1, 2], &[1, 2, 3], degraded.with_interval(2));
        assert!(recorded.recorded());
        // osd 3 back and catching up at epoch 3: {1, 2} must be reached anyway and takes every
        // write of epoch 3, so nothing more is written.
        let mut back = active(&[1, 2, 3], &[1, 2, 3], History { clean: None, intervals: vec![interval(2, &[1, 2])] });
        back.missing.insert(3, BTreeMap::from([(ObjectId { inode: 1, stripe: 0 }, Some(7))]));
        assert!(!back.clean());
        assert!(back.recorded());
        // Down to osd 2 alone after {1, 2}: a later peering may reach only osd 1 for {1, 2},
        // which lacks this epoch's writes, so the first write records {2}.
        let alone = active(&[2], &[1, 2, 3], History { clean: None, intervals: vec![interval(2, &[1, 2])] });
        assert!(!alone.recorded());
        // Backfill: osd 4 joined the target, osd 3 left it but still serves; complete once osd 4
        // holds everything, and then its record names all four.
        let mut backfill =
            active(&[1, 2, 3, 4], &[1, 2, 4], History { clean: Some(interval(1, &[1, 2, 3])), intervals: vec![] });
        assert!(backfill.recorded(), "the clean set is acting");
        backfill.missing.insert(4, BTreeMap::from([(ObjectId { inode: 1, stripe: 0 }, Some(7))]));
        assert!(!backfill.clean());
        backfill.missing.clear();
        assert!(backfill.clean());
        // A clean set that is not all acting does not cover the epoch.
        let partial = active(&[1, 2], &[1, 2, 3], History { clean: Some(interval(1, &[1, 2, 3])), intervals: vec![] });
        assert!(!partial.recorded());
        assert!(same_members(&[1, 2, 3], &[3, 1, 2]) && !same_members(&[1, 2], &[1, 3]));
    }

    #[test]
    fn a_delete_removes_only_once_the_history_names_only_the_acting_members() {
        // osd 1 was marked out at epoch 2 and holds old copies; the PG is clean on {3, 2}, but
        // its record still names osd 1's set until the clean record is written.
        let unrecorded = active(
            &[3, 2],
            &[3, 2],
            History { clean: Some(interval(1, &[1, 3, 2])), intervals: vec![interval(2, &[3, 2])] },
        );
        assert!(unrecorded.clean() && !unrecorded.deletes_remove());
        let recorded = active(&[3, 2], &[3, 2], History { clean: Some(interval(2, &[2, 3])), intervals: vec![] });
        assert!(recorded.deletes_remove());
        assert!(!active(&[3, 2], &[3, 2], History::default()).deletes_remove(), "a PG never recorded");
        assert!(!active(&[3], &[3, 2], History { clean: Some(interval(2, &[3])), intervals: vec![] }).deletes_remove());
        // A delete of an object the primary lacks is nothing only if no recorded member is away.
        assert!(!unrecorded.recorded_members_complete());
        assert!(recorded.recorded_members_complete());
    }

    #[test]
    fn a_member_catching_up_is_left_out_of_the_record() {
        // osd 3 returned after a write at epoch 2 and lacks an object: a write of that object
        // skips it, so the record of epoch 3 names only the members that get every write.
        let object = ObjectId { inode: 1, stripe: 0 };
        let mut back =
            active(&[1, 2, 3], &[1, 2, 3], History { clean: Some(interval(1, &[1, 2, 3])), intervals: vec![] });
        back.missing.insert(3, BTreeMap::from([(object, None)]));
        assert!(back.is_complete(1) && back.is_complete(2) && !back.is_complete(3) && !back.is_complete(4));
        assert!(!back.recorded(), "the clean set includes a member that misses writes");
        assert_eq!(back.with_interval(3).intervals, vec![interval(3, &[1, 2])]);
        assert_eq!(back.priority(2), Priority::AtMinSize);
        // Once it holds everything it counts again.
        back.missing.get_mut(&3).unwrap().clear();
        assert!(back.is_complete(3) && back.recorded());
        assert_eq!(back.with_interval(3).intervals, vec![interval(3, &[1, 2, 3])]);
        assert_eq!(back.priority(2), Priority::Misplaced);
        // An unlisted member is not complete either.
        back.unlisted.insert(3);
        assert!(!back.is_complete(3));
    }

    #[test]
    fn a_member_lacking_only_the_object_written_whole_is_complete_for_that_write() {
        let (refused, other) = (ObjectId { inode: 1, stripe: 0 }, ObjectId { inode: 1, stripe: 1 });
        let mut back = active(&[1, 2], &[1, 2], History { clean: Some(interval(1, &[1, 2])), intervals: vec![] });
        back.missing.insert(2, BTreeMap::from([(refused, Some(7))]));
        assert!(!back.is_complete(2));
        assert!(back.complete_with(2, refused) && !back.complete_with(2, other));
        assert!(back.complete_with(1, other), "a complete member is complete for any write");
        back.missing.get_mut(&2).unwrap().insert(other, None);
        assert!(!back.complete_with(2, refused), "it lacks another object too");
        back.unlisted.insert(1);
        assert!(!back.complete_with(1, refused) && !back.complete_with(3, refused));
    }

    #[test]
    fn an_interval_of_this_epoch_whose_member_fell_behind_is_recorded_again() {
        // Epoch 3 recorded {1, 3}; osd 3 restarted, the PG peered again at epoch 3 and osd 3
        // now lacks an object: writes of it skip osd 3, so {1, 3} no longer finds them.
        let object = ObjectId { inode: 1, stripe: 0 };
        let history = History { clean: Some(interval(1, &[1, 2, 3])), intervals: vec![interval(3, &[1, 3])] };
        let mut again = active(&[1, 3], &[1, 2, 3], history);
        assert!(again.recorded());
        again.missing.insert(3, BTreeMap::from([(object, Some(7))]));
        assert!(!again.recorded());
        assert_eq!(again.with_interval(3).intervals, vec![interval(3, &[1, 3]), interval(3, &[1])]);
    }
}
