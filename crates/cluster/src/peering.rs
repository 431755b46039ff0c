//! The peering decision (`docs/design/peering.md`, ADR 0016): given what the members of a PG
//! answered and the sets recorded since it was last clean, which version of each object wins,
//! what each member of the acting set needs, and whether the PG may activate.
//!
//! A pure function: the primary collects the lists and applies the plan; this decides. Every
//! acknowledged write is on every member recorded for its interval (the acting members that held
//! every object, which every write reaches), and each recorded set's members held every winning
//! version when it was recorded, so the latest recorded set's members hold every write a client
//! saw acknowledged: their copies decide, and reaching one of them is enough to find the newest
//! version of every object, so peering waits for one member of that set only. A list that is not strictly ordered, or that names a version no
//! primary of the PG could have minted yet, is the member's fault: the member counts as not
//! reached, and the plan goes on without it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use types::ObjectId;

use crate::layout::VERSION_COUNTER_BITS;

/// An acting set and the epoch it served.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interval {
    pub epoch: u64,
    /// Primary first.
    pub members: Vec<u32>,
}

/// What the metadata store recorded about a PG since it was last clean
/// (`/basalt/pg-history/<pool>/<pg>`, [`crate::PgHistoryRecord`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    /// The last clean epoch and its set; `None` for a PG that has acknowledged nothing yet.
    pub clean: Option<Interval>,
    /// Every later interval whose primary acknowledged a write.
    pub intervals: Vec<Interval>,
}

impl History {
    /// The sets peering must reach one member of.
    pub fn required(&self) -> impl Iterator<Item = &Interval> {
        self.clean.iter().chain(&self.intervals)
    }
}

/// One member's objects and their versions, as it listed them.
pub type Listing = Vec<(ObjectId, u64)>;

/// What peering works from.
#[derive(Debug, Clone)]
pub struct Inputs<'a> {
    /// The PG's epoch now; every listed version must come from it or an earlier one.
    pub epoch: u64,
    /// The acting set at `epoch`, primary first.
    pub acting: &'a [u32],
    pub min_size: u8,
    pub history: &'a History,
    /// The lists of the OSDs that answered, the primary's own included.
    pub listings: &'a BTreeMap<u32, Listing>,
}

/// An object a member must receive: the version to hold and a member that holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Need {
    pub object: ObjectId,
    pub version: u64,
    pub source: u32,
}

/// Why a member's list was set aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadListing {
    /// Objects out of order or listed twice.
    Unordered { osd: u32, object: ObjectId },
    /// Version 0, or a version above what a primary of the current epoch can mint.
    ImpossibleVersion { osd: u32, object: ObjectId, version: u64 },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// A recorded set has no member that answered: the PG stays inactive until one does.
    Incomplete {
        unreachable: Vec<Interval>,
        bad: Vec<BadListing>,
    },
    /// Fewer than `min_size` acting members answered: the PG stays inactive.
    TooFewMembers {
        reached: usize,
        min_size: u8,
        bad: Vec<BadListing>,
    },
    Plan(Plan),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The newest version of every object any member listed.
    pub authoritative: BTreeMap<ObjectId, u64>,
    /// What each acting member that answered needs, in object order; empty for a complete one.
    pub needs: BTreeMap<u32, Vec<Need>>,
    /// The copies, with their versions, that acting members outside the latest recorded set
    /// hold and the PG never had at that version: for a member of an older recorded set, those
    /// newer than the newest or of objects the PG no longer has; for any other, every one at
    /// another version than the newest. Deleted before anything is copied to them.
    pub discard: BTreeMap<u32, Vec<(ObjectId, u64)>>,
    /// The members to bring up to date before the PG activates: the primary, then the
    /// `min_size - 1` others that need least.
    pub before_active: Vec<u32>,
    /// The acting members that take new writes at once but receive what they need in the
    /// background, not counting toward `min_size` until they have it. Those that did not
    /// answer are here too, with no needs computed.
    pub catching_up: Vec<u32>,
    pub bad: Vec<BadListing>,
}

/// Decides what peering does with the lists the members answered.
pub fn plan(inputs: &Inputs<'_>) -> Decision {
    let primary = *inputs.acting.first().expect("an acting set has a primary");
    let mut bad = Vec::new();
    let listings: BTreeMap<u32, &Listing> = inputs
        .listings
        .iter()
        .filter(|(&osd, listing)| match check_listing(osd, listing, inputs.epoch) {
            Ok(()) => true,
            Err(reason) => {
                bad.push(reason);
                false
            }
        })
        .map(|(&osd, listing)| (osd, listing))
        .collect();
    assert!(inputs.listings.contains_key(&primary), "the primary lists its own objects");

    // Only the latest recorded set decides (below), so only it must be reached: an older set's
    // members hold nothing it lacks, and waiting for them would hold the PG for an OSD that
    // may never return (the simulator's seed 23998).
    let unreachable: Vec<Interval> = inputs
        .history
        .required()
        .last()
        .filter(|interval| !interval.members.iter().any(|osd| listings.contains_key(osd)))
        .into_iter()
        .cloned()
        .collect();
    if !unreachable.is_empty() {
        return Decision::Incomplete { unreachable, bad };
    }
    let reached: Vec<u32> = inputs.acting.iter().copied().filter(|osd| listings.contains_key(osd)).collect();
    let min_size = usize::from(inputs.min_size.max(1));
    if !listings.contains_key(&primary) || reached.len() < min_size {
        return Decision::TooFewMembers { reached: reached.len(), min_size: inputs.min_size, bad };
    }

    // Every acknowledged write is on each member of the latest recorded set: a primary records
    // a set only of members holding every object's winning version, before it acknowledges a
    // write, and every write it acknowledges reaches each of them. So only those members'
    // copies decide. A member of an older recorded set holds the PG's older versions, which it
    // receives what changed since, but may also hold a write no one acknowledged, which the PG
    // served without since it was away: its copies newer than the winner, or of objects the
    // winners lack, are discarded (left to win, such a write would appear after the PG served
    // the object without it, and change a snapshot's layer after its seal). A member of no
    // recorded set (one joining for backfill, or back after the PG was clean without it) may
    // hold copies the PG has since deleted or never had: every copy of it that differs from
    // the winner is discarded. A PG without history has only ever had its first acting set
    // (its primary records the PG clean when it first activates, before any member changes):
    // every member decides.
    let latest = inputs.history.required().last();
    let decides = |osd: &u32| latest.is_none_or(|set| set.members.contains(osd));
    let recorded = |osd: &u32| {
        let mut required = inputs.history.required().peekable();
        required.peek().is_none() || required.any(|interval| interval.members.contains(osd))
    };

    // The newest version of each object, and who holds it: the primary if it does, else the
    // first acting member, else the first other member that answered.
    let holders_in_order =
        inputs.acting.iter().copied().chain(listings.keys().copied().filter(|osd| !inputs.acting.contains(osd)));
    let mut authoritative: BTreeMap<ObjectId, (u64, u32)> = BTreeMap::new();
    for osd in holders_in_order.filter(|osd| listings.contains_key(osd) && decides(osd)) {
        for &(object, version) in listings[&osd] {
            let entry = authoritative.entry(object).or_insert((version, osd));
            if version > entry.0 {
                *entry = (version, osd);
            }
        }
    }

    let mut needs = BTreeMap::new();
    let mut discard = BTreeMap::new();
    for &osd in &reached {
        let held: BTreeMap<ObjectId, u64> = listings[&osd].iter().copied().collect();
        let member_needs: Vec<Need> = authoritative
            .iter()
            .filter(|(object, (version, _))| held.get(object).is_none_or(|held| held != version))
            .map(|(&object, &(version, source))| Need { object, version, source })
            .collect();
        needs.insert(osd, member_needs);
        if !decides(&osd) {
            let recorded = recorded(&osd);
            let stale: Vec<(ObjectId, u64)> = held
                .iter()
                .filter(|(object, version)| match authoritative.get(object) {
                    None => true,
                    Some((newest, _)) if recorded => *version > newest,
                    Some((newest, _)) => newest != *version,
                })
                .map(|(&object, &version)| (object, version))
                .collect();
            if !stale.is_empty() {
                discard.insert(osd, stale);
            }
        }
    }

    let mut others: Vec<u32> = reached.iter().copied().filter(|&osd| osd != primary).collect();
    // Members of a required set first, then fewest needs; placement order among equals.
    others.sort_by_key(|osd| (!recorded(osd), needs[osd].len()));
    let mut before_active = vec![primary];
    before_active.extend(others.iter().copied().take(min_size - 1));
    let catching_up = inputs.acting.iter().copied().filter(|osd| !before_active.contains(osd)).collect();
    Decision::Plan(Plan {
        authoritative: authoritative.into_iter().map(|(object, (version, _))| (object, version)).collect(),
        needs,
        discard,
        before_active,
        catching_up,
        bad,
    })
}

impl BadListing {
    pub fn osd(&self) -> u32 {
        match *self {
            BadListing::Unordered { osd, .. } | BadListing::ImpossibleVersion { osd, .. } => osd,
        }
    }
}

fn check_listing(osd: u32, listing: &Listing, epoch: u64) -> Result<(), BadListing> {
    let mut previous: Option<ObjectId> = None;
    for &(object, version) in listing {
        if previous.is_some_and(|previous| previous >= object) {
            return Err(BadListing::Unordered { osd, object });
        }
        if version == 0 || version >> VERSION_COUNTER_BITS > epoch {
            return Err(BadListing::ImpossibleVersion { osd, object, version });
        }
        previous = Some(object);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;
    use crate::mint_version;

    fn object(stripe: u64) -> ObjectId {
        ObjectId { inode: 1, stripe }
    }

    fn interval(epoch: u64, members: &[u32]) -> Interval {
        Interval { epoch, members: members.to_vec() }
    }

    fn listings(entries: &[(u32, &[(u64, u64)])]) -> BTreeMap<u32, Listing> {
        entries
            .iter()
            .map(|&(osd, objects)| (osd, objects.iter().map(|&(stripe, version)| (object(stripe), version)).collect()))
            .collect()
    }

    fn decide(acting: &[u32], min_size: u8, history: &History, lists: &BTreeMap<u32, Listing>) -> Decision {
        plan(&Inputs { epoch: 9, acting, min_size, history, listings: lists })
    }

    const V5: u64 = 5 << 40;
    const V6: u64 = 6 << 40;

    #[test]
    fn the_newest_version_wins_and_each_member_gets_what_it_lacks() {
        let history = History { clean: Some(interval(5, &[1, 2, 3])), intervals: vec![interval(6, &[1, 2])] };
        let lists = listings(&[(1, &[(0, V5), (1, V6 + 1)]), (2, &[(0, V6), (1, V6 + 1)]), (3, &[(0, V5), (2, V5)])]);
        let Decision::Plan(plan) = decide(&[1, 2, 3], 2, &history, &lists) else { panic!("a plan") };
        // Object 2 is on no member of the latest set: the PG deleted it at epoch 6.
        assert_eq!(plan.authoritative, BTreeMap::from([(object(0), V6), (object(1), V6 + 1)]));
        assert_eq!(plan.needs[&1], [Need { object: object(0), version: V6, source: 2 }]);
        assert_eq!(plan.needs[&2], []);
        assert_eq!(plan.needs[&3].iter().map(|need| need.object).collect::<Vec<_>>(), [object(0), object(1)]);
        // 3 holds the PG's older version of object 0 (it receives what changed since) and a
        // copy of object 2, which the PG no longer has.
        assert_eq!(plan.discard, BTreeMap::from([(3, vec![(object(2), V5)])]));
        assert_eq!(plan.before_active, [1, 2]);
        assert_eq!(plan.catching_up, [3]);
    }

    #[test]
    fn a_write_an_older_set_holds_and_the_latest_lacks_was_never_acknowledged() {
        // Epoch 5 clean on 1 and 4; 1 wrote object 0 at V5 + 1 to 4 alone and stopped, before
        // acknowledging; epoch 6 served with 3 and 1 (back without it). 4 returns: its copy was
        // never acknowledged, and the PG served object 0 at V5 since: it must not win now.
        let history = History { clean: Some(interval(5, &[1, 4])), intervals: vec![interval(6, &[3, 1])] };
        let lists = listings(&[(3, &[(0, V5)]), (1, &[(0, V5)]), (4, &[(0, V5 + 1)])]);
        let Decision::Plan(plan) = decide(&[3, 1, 4], 2, &history, &lists) else { panic!("a plan") };
        assert_eq!(plan.authoritative, BTreeMap::from([(object(0), V5)]));
        assert_eq!(plan.discard, BTreeMap::from([(4, vec![(object(0), V5 + 1)])]));
        assert_eq!(plan.needs[&4], [Need { object: object(0), version: V5, source: 3 }]);
    }

    #[test]
    fn a_recorded_set_with_no_member_reached_keeps_the_pg_inactive() {
        // Pool of two copies, min_size 1: A stops, B writes alone, B stops, A returns.
        let history = History { clean: Some(interval(5, &[1, 2])), intervals: vec![interval(6, &[2])] };
        let lists = listings(&[(1, &[(0, V5)])]);
        assert_eq!(
            decide(&[1], 1, &history, &lists),
            Decision::Incomplete { unreachable: vec![interval(6, &[2])], bad: vec![] }
        );
        // B returns: everything it wrote is found.
        let lists = listings(&[(1, &[(0, V5)]), (2, &[(0, V6)])]);
        let Decision::Plan(plan) = decide(&[1, 2], 1, &history, &lists) else { panic!("a plan") };
        assert_eq!(plan.authoritative[&object(0)], V6);
    }

    #[test]
    fn fewer_than_min_size_members_reached_keeps_the_pg_inactive() {
        let history = History { clean: Some(interval(5, &[1, 2, 3])), intervals: vec![] };
        let lists = listings(&[(1, &[])]);
        assert_eq!(
            decide(&[1, 2, 3], 2, &history, &lists),
            Decision::TooFewMembers { reached: 1, min_size: 2, bad: vec![] }
        );
    }

    #[test]
    fn a_bad_list_sets_its_member_aside_not_the_pg() {
        let history = History { clean: Some(interval(5, &[1, 2, 3])), intervals: vec![] };
        let unordered = listings(&[(1, &[(0, V5)]), (2, &[(3, V5), (1, V5)]), (3, &[(0, V5)])]);
        let Decision::Plan(plan) = decide(&[1, 2, 3], 2, &history, &unordered) else { panic!("a plan") };
        assert_eq!(plan.bad, [BadListing::Unordered { osd: 2, object: object(1) }]);
        assert!(!plan.needs.contains_key(&2));
        assert!(plan.catching_up.contains(&2));
        let future = listings(&[(1, &[(0, V5)]), (2, &[(0, 10 << 40)]), (3, &[(0, 0)])]);
        match decide(&[1, 2, 3], 2, &history, &future) {
            Decision::TooFewMembers { reached: 1, bad, .. } => assert_eq!(bad.len(), 2),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_member_outside_every_required_set_counts_for_nothing() {
        // Osd 4 joined for backfill with copies from long ago: object 0 at an old version,
        // object 3 deleted since; osd 1 and 2 are the clean set.
        let history = History { clean: Some(interval(5, &[1, 2])), intervals: vec![] };
        let lists =
            listings(&[(1, &[(0, V6), (1, V5)]), (2, &[(0, V6), (1, V5)]), (4, &[(0, V5), (1, V5), (3, V6 + 9)])]);
        let Decision::Plan(plan) = decide(&[1, 2, 4], 2, &history, &lists) else { panic!("a plan") };
        assert_eq!(plan.authoritative, BTreeMap::from([(object(0), V6), (object(1), V5)]));
        assert_eq!(plan.discard, BTreeMap::from([(4, vec![(object(0), V5), (object(3), V6 + 9)])]));
        assert_eq!(plan.needs[&4], [Need { object: object(0), version: V6, source: 1 }]);
        assert_eq!(plan.before_active, [1, 2]);
        assert!(!plan.discard.contains_key(&1) && plan.needs[&1].is_empty());
        // Without any history every member counts.
        let Decision::Plan(plan) = decide(&[1, 2, 4], 2, &History::default(), &lists) else { panic!("a plan") };
        assert_eq!(plan.authoritative[&object(3)], V6 + 9);
        assert!(plan.discard.is_empty());
    }

    /// One PG's life in a model: acting sets change at random, every change peers with `plan`
    /// and brings the members it must bring up to date before activating; the others catch up
    /// object by object in the background. Writes of an object skip the members that still lack
    /// it, land on every other member (acknowledged) or on some (not acknowledged), and the first
    /// acknowledged write of an epoch records its complete members unless a required set is
    /// already made of them (the OSD's rule). At the end, any OSDs may be reached. Whenever `plan`
    /// lets the PG activate, no acknowledged write is older than what it finds.
    #[derive(Debug, Clone)]
    enum Step {
        /// A new acting set: these target members (indexes into 0..3), in this order.
        Acting(Vec<u8>),
        /// A write of this object, acknowledged (on every member that holds it).
        Write(u8),
        /// A write of this object that reached only the first `n` members it was sent to.
        Partial(u8, u8),
        /// The background copy of one object to a member catching up.
        Recover(u8),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            1 => proptest::sample::subsequence(vec![0u8, 1, 2], 1..=3).prop_shuffle().prop_map(Step::Acting),
            4 => (0u8..6).prop_map(Step::Write),
            1 => (0u8..6, 1u8..3).prop_map(|(object, n)| Step::Partial(object, n)),
            2 => (0u8..3).prop_map(Step::Recover),
        ]
    }

    struct Model {
        epoch: u64,
        acting: Vec<u32>,
        active: bool,
        history: History,
        /// What each OSD holds.
        stores: BTreeMap<u32, BTreeMap<ObjectId, u64>>,
        /// What each acting member catching up still lacks.
        missing: BTreeMap<u32, BTreeSet<ObjectId>>,
        /// The newest acknowledged version of each object.
        acknowledged: BTreeMap<ObjectId, u64>,
        /// Whether the current interval is recorded.
        recorded: bool,
    }

    impl Model {
        fn lists(&self, osds: impl Iterator<Item = u32>) -> BTreeMap<u32, Listing> {
            osds.map(|osd| (osd, self.stores[&osd].iter().map(|(&object, &version)| (object, version)).collect()))
                .collect()
        }

        fn complete(&self) -> Vec<u32> {
            self.acting.iter().copied().filter(|osd| self.missing.get(osd).is_none_or(BTreeSet::is_empty)).collect()
        }

        /// Records the PG clean when all three members are acting and complete.
        fn record_if_clean(&mut self) {
            if self.acting.len() == 3 && self.complete().len() == 3 {
                self.history = History {
                    clean: Some(Interval { epoch: self.epoch, members: self.acting.clone() }),
                    intervals: vec![],
                };
                self.recorded = true;
            }
        }

        /// A new acting set: peer among its members, bring the primary and `min_size - 1` others
        /// up to date, leave the rest catching up; or stay inactive.
        fn change(&mut self, acting: Vec<u32>, min_size: u8) {
            self.epoch += 1;
            self.acting = acting;
            self.recorded = false;
            self.missing.clear();
            let lists = self.lists(self.acting.iter().copied());
            let inputs =
                Inputs { epoch: self.epoch, acting: &self.acting, min_size, history: &self.history, listings: &lists };
            self.active = match plan(&inputs) {
                Decision::Plan(plan) => {
                    for (osd, stale) in &plan.discard {
                        for (object, _) in stale {
                            self.stores.get_mut(osd).unwrap().remove(object);
                        }
                    }
                    for (osd, needs) in &plan.needs {
                        for need in needs {
                            assert_eq!(self.stores[&need.source].get(&need.object), Some(&need.version));
                            if plan.before_active.contains(osd) {
                                self.stores.get_mut(osd).unwrap().insert(need.object, need.version);
                            } else {
                                self.missing.entry(*osd).or_default().insert(need.object);
                            }
                        }
                    }
                    self.record_if_clean();
                    true
                }
                Decision::Incomplete { .. } | Decision::TooFewMembers { .. } => false,
            };
        }

        fn write(&mut self, stripe: u8, reach: usize, acknowledged: bool) {
            if !self.active {
                return;
            }
            let object = object(u64::from(stripe));
            let complete = self.complete();
            let covered =
                self.history.required().last().is_some_and(|set| set.members.iter().all(|osd| complete.contains(osd)));
            if acknowledged && !self.recorded && !covered {
                self.history.intervals.push(Interval { epoch: self.epoch, members: complete });
                self.recorded = true;
            }
            let primary = self.acting[0];
            let version = mint_version(self.epoch, self.stores[&primary].get(&object).copied());
            let holders: Vec<u32> = self
                .acting
                .iter()
                .copied()
                .filter(|osd| !self.missing.get(osd).is_some_and(|lacks| lacks.contains(&object)))
                .collect();
            for osd in holders.iter().take(reach) {
                self.stores.get_mut(osd).unwrap().insert(object, version);
            }
            if acknowledged {
                self.acknowledged.insert(object, version);
            }
        }

        /// Copies the first object member `index` of the acting set lacks, at the primary's
        /// version.
        fn recover(&mut self, index: u8) {
            let Some(&member) = self.acting.get(usize::from(index)) else { return };
            if !self.active {
                return;
            }
            let Some(object) = self.missing.get_mut(&member).and_then(|lacks| lacks.pop_first()) else { return };
            let primary = self.acting[0];
            match self.stores[&primary].get(&object).copied() {
                Some(version) => self.stores.get_mut(&member).unwrap().insert(object, version),
                None => self.stores.get_mut(&member).unwrap().remove(&object),
            };
            self.record_if_clean();
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn no_acknowledged_write_is_lost(
            steps in proptest::collection::vec(step(), 1..40),
            min_size in 1u8..=2,
            reached in proptest::sample::subsequence(vec![0u32, 1, 2], 1..=3),
            last_acting in proptest::sample::subsequence(vec![0u32, 1, 2], 1..=3).prop_shuffle(),
        ) {
            let target = [0u32, 1, 2];
            let mut model = Model {
                epoch: 1,
                acting: target.to_vec(),
                active: true,
                history: History { clean: Some(Interval { epoch: 1, members: target.to_vec() }), intervals: vec![] },
                stores: target.iter().map(|&osd| (osd, BTreeMap::new())).collect(),
                missing: BTreeMap::new(),
                acknowledged: BTreeMap::new(),
                recorded: true,
            };
            for step in steps {
                match step {
                    Step::Acting(members) => {
                        let acting: Vec<u32> = members.iter().map(|&index| target[usize::from(index)]).collect();
                        model.change(acting, min_size);
                    }
                    Step::Write(stripe) => model.write(stripe, usize::MAX, true),
                    Step::Partial(stripe, n) => {
                        let reach = usize::from(n).min(model.acting.len().saturating_sub(1));
                        if reach > 0 {
                            model.write(stripe, reach, false);
                        }
                    }
                    Step::Recover(index) => model.recover(index),
                }
            }
            // A last peering that reaches only some OSDs: the primary must be one of them.
            let reached: BTreeSet<u32> = reached.into_iter().chain(last_acting.first().copied()).collect();
            let lists = model.lists(reached.iter().copied());
            let epoch = model.epoch + 1;
            let inputs = Inputs { epoch, acting: &last_acting, min_size, history: &model.history, listings: &lists };
            match plan(&inputs) {
                Decision::Plan(plan) => {
                    for (object, version) in &model.acknowledged {
                        let found = plan.authoritative.get(object).copied().unwrap_or(0);
                        prop_assert!(found >= *version, "object {object} acknowledged at {version:#x}, peering found {found:#x}");
                    }
                    for (osd, needs) in &plan.needs {
                        for need in needs {
                            prop_assert_eq!(lists[&need.source].iter().find(|(object, _)| *object == need.object).map(|entry| entry.1), Some(need.version));
                            // Backwards only over a copy discarded first.
                            let discarded = plan.discard.get(osd).is_some_and(|stale| stale.iter().any(|(object, _)| *object == need.object));
                            prop_assert!(discarded || lists[osd].iter().all(|(object, version)| *object != need.object || *version < need.version));
                        }
                    }
                }
                Decision::Incomplete { unreachable, .. } => {
                    for interval in unreachable {
                        prop_assert!(interval.members.iter().all(|osd| !reached.contains(osd)));
                    }
                }
                Decision::TooFewMembers { reached: count, .. } => prop_assert!(count < usize::from(min_size)),
            }
        }
    }
}
