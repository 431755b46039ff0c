//! The PG table under construction: keep, fill, balance replicas, choose and balance primaries.
//!
//! Why this shape: a table that is already balanced should change only where the OSD map forces
//! it, so the work starts from the previous table rather than from a hash of the current map
//! (CRUSH-style hashing alone moves more than the minimum and balances only statistically, to
//! about `1 / sqrt(slots per OSD)`). Hashing is kept where there is nothing to preserve: a PG with
//! no surviving member is drawn by weighted rendezvous, which spreads each OSD's peers widely.
//!
//! The steps, each a method called once by `compute_with`:
//!
//! 1. `new` keeps each previous member that is still eligible and whose failure domain is not
//!    already used in its PG (the earlier member wins, so the primary is kept first).
//! 2. `fill` draws empty PGs by rendezvous, then gives each remaining empty slot to the allowed
//!    OSD furthest below its replica target.
//! 3. `balance_replicas` moves one slot at a time from an OSD above target to one below. A move
//!    is made only if the deviations differ by more than one slot, so every move strictly lowers
//!    the sum of squared deviations and the loop ends; at the end no improving move exists, which
//!    for any two OSDs that can exchange slots means their deviations differ by at most one. The
//!    OSD furthest below target pulls first, from the nearest OSD more than one slot above it: a
//!    breadth-first search backwards over "can hand a slot to" edges, which finds a chain through
//!    intermediate OSDs when failure domains forbid a direct move (the taker's domain is already
//!    in every PG of the giver).
//! 4. `choose_primaries` keeps each previous primary that is still a member, and otherwise picks
//!    the surviving member furthest below its primary target.
//! 5. `balance_primaries` does the same as step 3 for primary roles, but a move only swaps the
//!    order of a PG's members, so it moves no data.
//!
//! Moves prefer slots that are new in this computation anyway (so rebalancing costs no extra data
//! movement), then slots the target OSD held before, then non-primary slots, and finally the
//! highest stable hash of (PG, target OSD), which spreads the choices without any ordering bias.

use crate::cluster::Cluster;
use crate::hash::{hash, rendezvous_key, Purpose};
use crate::{PgTable, PoolSpec};

/// Deviations closer than this are equal: targets are sums of products of doubles.
const EPSILON: f64 = 1e-9;
const NO_OSD: usize = usize::MAX;

pub(crate) struct Layout<'a> {
    cluster: &'a Cluster,
    pool_id: u32,
    members_per_pg: usize,
    /// The members of each PG as dense OSD indices. Index 0 is the primary once
    /// `choose_primaries` has run (before that it is the previous or most likely primary).
    pgs: Vec<Vec<usize>>,
    /// The eligible members each PG had in the previous table.
    previous_members: Vec<Vec<usize>>,
    /// Each PG's previous primary, if it is still eligible.
    previous_primary: Vec<Option<usize>>,
    /// The PGs each OSD is a member of, in no particular order.
    osd_pgs: Vec<Vec<usize>>,
    /// The PGs each OSD is the primary of, in no particular order; filled by `choose_primaries`.
    osd_primary_pgs: Vec<Vec<usize>>,
    replica_targets: Vec<f64>,
    primary_targets: Vec<f64>,
}

impl<'a> Layout<'a> {
    /// Builds the layout from the previous table: step 1 (keep).
    pub fn new(cluster: &'a Cluster, spec: &PoolSpec, members_per_pg: usize, previous: Option<&PgTable>) -> Self {
        assert!(members_per_pg >= 1);
        assert!(members_per_pg <= cluster.domain_count);
        let pg_count = spec.pg_count as usize;
        let mut previous_members = vec![Vec::new(); pg_count];
        let mut previous_primary = vec![None; pg_count];
        for (pg, row) in previous.map_or(&[][..], |table| &table.pgs[..]).iter().take(pg_count).enumerate() {
            previous_primary[pg] = row.first().and_then(|id| cluster.index_by_id.get(id).copied());
            for id in row {
                if let Some(&osd) = cluster.index_by_id.get(id) {
                    if !previous_members[pg].contains(&osd) {
                        previous_members[pg].push(osd);
                    }
                }
            }
        }
        let mut layout = Layout {
            cluster,
            pool_id: spec.pool_id,
            members_per_pg,
            pgs: vec![Vec::with_capacity(members_per_pg); pg_count],
            previous_members,
            previous_primary,
            osd_pgs: vec![Vec::new(); cluster.osd_count()],
            osd_primary_pgs: vec![Vec::new(); cluster.osd_count()],
            replica_targets: cluster.replica_targets(spec.pg_count, members_per_pg),
            primary_targets: cluster.primary_targets(spec.pg_count),
        };
        for pg in 0..pg_count {
            for index in 0..layout.previous_members[pg].len() {
                let osd = layout.previous_members[pg][index];
                if layout.pgs[pg].len() < members_per_pg && !layout.domain_used(pg, osd) {
                    layout.add_member(pg, osd);
                }
            }
        }
        layout
    }

    /// Step 2: gives every PG `members_per_pg` members.
    pub fn fill(&mut self) {
        let osd_count = self.cluster.osd_count();
        // PGs with no member at all: weighted rendezvous, in order of increasing key.
        let inverse_weights: Vec<f64> = self.cluster.weights_bytes.iter().map(|&weight| 1.0 / weight as f64).collect();
        let mut keys = vec![0.0_f64; osd_count];
        for pg in 0..self.pgs.len() {
            if !self.pgs[pg].is_empty() {
                continue;
            }
            for osd in 0..osd_count {
                let osd_hash = hash(Purpose::Rendezvous, self.pool_id, pg, self.cluster.ids[osd].0);
                keys[osd] = rendezvous_key(osd_hash, inverse_weights[osd]);
            }
            while self.pgs[pg].len() < self.members_per_pg {
                let best = (0..osd_count)
                    .filter(|&osd| !self.domain_used(pg, osd))
                    .min_by(|&a, &b| keys[a].total_cmp(&keys[b]).then(a.cmp(&b)))
                    .expect("members_per_pg <= domain_count leaves a free failure domain");
                self.add_member(pg, best);
            }
        }
        // PGs that lost members: the allowed OSD furthest below its target.
        for pg in 0..self.pgs.len() {
            while self.pgs[pg].len() < self.members_per_pg {
                let best = (0..osd_count)
                    .filter(|&osd| !self.domain_used(pg, osd))
                    .map(|osd| {
                        let osd_hash = hash(Purpose::Fill, self.pool_id, pg, self.cluster.ids[osd].0);
                        (osd, self.replica_deviation(osd), osd_hash)
                    })
                    .min_by(|a, b| a.1.total_cmp(&b.1).then(b.2.cmp(&a.2)).then(a.0.cmp(&b.0)))
                    .expect("members_per_pg <= domain_count leaves a free failure domain")
                    .0;
                self.add_member(pg, best);
            }
        }
        debug_assert!(self.pgs.iter().all(|members| members.len() == self.members_per_pg));
    }

    /// Step 3: moves replica slots until no move improves the balance.
    pub fn balance_replicas(&mut self) {
        let osd_count = self.cluster.osd_count();
        let mut search = Search::new(osd_count, self.cluster.domain_count);
        // A safety net only: every accepted path lowers the sum of squared deviations, so the
        // loop ends long before this in practice.
        let path_count_max = 4 * self.pgs.len() * self.members_per_pg + osd_count;
        for _ in 0..path_count_max {
            let deviations: Vec<f64> = (0..osd_count).map(|osd| self.replica_deviation(osd)).collect();
            if !self.improve(&deviations, &mut search, Self::find_replica_path, Self::apply_replica_path) {
                break;
            }
        }
    }

    /// Step 4: puts each PG's primary at index 0.
    pub fn choose_primaries(&mut self) {
        let mut undecided = Vec::new();
        for pg in 0..self.pgs.len() {
            let kept = self.previous_primary[pg].and_then(|osd| self.pgs[pg].iter().position(|&member| member == osd));
            match kept {
                Some(position) => self.set_primary(pg, position),
                None => undecided.push(pg),
            }
        }
        for pg in undecided {
            let survivors: Vec<usize> = (0..self.pgs[pg].len())
                .filter(|&position| self.previous_members[pg].contains(&self.pgs[pg][position]))
                .collect();
            // A PG with no survivor keeps its fill order, which puts the rendezvous winner first.
            let position = survivors
                .into_iter()
                .map(|position| {
                    let osd = self.pgs[pg][position];
                    let osd_hash = hash(Purpose::Primary, self.pool_id, pg, self.cluster.ids[osd].0);
                    (position, self.primary_deviation(osd), osd_hash)
                })
                .min_by(|a, b| a.1.total_cmp(&b.1).then(b.2.cmp(&a.2)).then(a.0.cmp(&b.0)))
                .map_or(0, |best| best.0);
            self.set_primary(pg, position);
        }
    }

    /// Step 5: reorders members until no change of primary improves the primary balance.
    pub fn balance_primaries(&mut self) {
        let osd_count = self.cluster.osd_count();
        let mut search = Search::new(osd_count, self.cluster.domain_count);
        let path_count_max = 4 * self.pgs.len() + osd_count;
        for _ in 0..path_count_max {
            let deviations: Vec<f64> = (0..osd_count).map(|osd| self.primary_deviation(osd)).collect();
            if !self.improve(&deviations, &mut search, Self::find_primary_path, Self::apply_primary_path) {
                break;
            }
        }
    }

    /// Converts dense indices back to OSD ids. The separation check stays on in release builds:
    /// it is cheap next to the computation, and a violation would put two copies of the data in
    /// one failure domain.
    pub fn into_table(self) -> PgTable {
        for members in &self.pgs {
            assert_eq!(members.len(), self.members_per_pg);
            for (index, &osd) in members.iter().enumerate() {
                for &other in &members[..index] {
                    assert_ne!(self.cluster.domain_of[osd], self.cluster.domain_of[other]);
                }
            }
        }
        debug_assert_eq!(self.osd_primary_pgs.iter().map(Vec::len).sum::<usize>(), self.pgs.len());
        PgTable {
            pgs: self.pgs.iter().map(|members| members.iter().map(|&osd| self.cluster.ids[osd]).collect()).collect(),
        }
    }

    /// Applies one improving path, trying sinks from the most under target up. Returns whether
    /// one was applied.
    fn improve(
        &mut self,
        deviations: &[f64],
        search: &mut Search,
        find_path: fn(&Self, usize, &[f64], &mut Search) -> bool,
        apply_path: fn(&mut Self, &[usize]) -> bool,
    ) -> bool {
        let deviation_max = deviations.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mut sinks: Vec<usize> = (0..deviations.len()).collect();
        sinks.sort_by(|&a, &b| deviations[a].total_cmp(&deviations[b]).then(a.cmp(&b)));
        for sink in sinks {
            if deviation_max - deviations[sink] <= 1.0 + EPSILON {
                return false;
            }
            if find_path(self, sink, deviations, search) {
                let path = std::mem::take(&mut search.path);
                let applied = apply_path(self, &path);
                search.path = path;
                if applied {
                    return true;
                }
            }
        }
        false
    }

    /// Breadth-first search backwards from `sink` over "can hand a replica slot to" edges, for
    /// the nearest OSD whose deviation is more than one slot above the sink's. Among the nearest,
    /// the one furthest above target wins. The path, source first, is left in `search.path`.
    ///
    /// Searching from the sink makes the most under-target OSD pull from its direct neighbours
    /// first, so a new OSD fills with one move per slot. Whether `giver` can hand a slot to
    /// `taker` depends only on the taker's failure domain: some PG of `giver` must have no other
    /// member there (the giver's own domain always qualifies). So each domain is expanded once.
    fn find_replica_path(&self, sink: usize, deviations: &[f64], search: &mut Search) -> bool {
        let domain_of = &self.cluster.domain_of;
        search.start(sink);
        search.domain_expanded.fill(false);
        while !search.frontier.is_empty() {
            for frontier_index in 0..search.frontier.len() {
                let taker = search.frontier[frontier_index];
                let domain = domain_of[taker];
                if search.domain_expanded[domain] {
                    continue;
                }
                search.domain_expanded[domain] = true;
                // For every OSD: in how many of its PGs another member is in `domain`.
                search.together.fill(0);
                for &osd in &self.cluster.domain_osds[domain] {
                    for &pg in &self.osd_pgs[osd] {
                        for &member in &self.pgs[pg] {
                            if member != osd {
                                search.together[member] += 1;
                            }
                        }
                    }
                }
                for giver in 0..deviations.len() {
                    let pg_count = self.osd_pgs[giver].len();
                    if !search.visited[giver] && search.together[giver] < pg_count {
                        search.visit(giver, taker);
                    }
                }
            }
            if search.finish_level(sink, deviations) {
                return true;
            }
        }
        false
    }

    /// Like `find_replica_path`, over "is primary of a PG that also contains" edges.
    fn find_primary_path(&self, sink: usize, deviations: &[f64], search: &mut Search) -> bool {
        search.start(sink);
        while !search.frontier.is_empty() {
            for frontier_index in 0..search.frontier.len() {
                let taker = search.frontier[frontier_index];
                for &pg in &self.osd_pgs[taker] {
                    let giver = self.pgs[pg][0];
                    if !search.visited[giver] {
                        search.visit(giver, taker);
                    }
                }
            }
            if search.finish_level(sink, deviations) {
                return true;
            }
        }
        false
    }

    /// Whether handing the primary role of `pg` to member `taker` costs no extra primary change:
    /// the PG's primary already differs from its previous one, and the taker holds the PG's data
    /// (it was a member before) or no member does.
    fn primary_change_is_free(&self, pg: usize, taker: usize) -> bool {
        self.previous_primary[pg] != Some(self.pgs[pg][0])
            && (self.previous_members[pg].is_empty() || self.previous_members[pg].contains(&taker))
    }

    /// Moves one replica slot along each edge of `path`. All or nothing: if an edge has become
    /// impossible because of an earlier move on the path, the earlier moves are undone.
    fn apply_replica_path(&mut self, path: &[usize]) -> bool {
        let mut done: Vec<(usize, usize, usize, usize)> = Vec::with_capacity(path.len());
        for edge in path.windows(2) {
            let (giver, taker) = (edge[0], edge[1]);
            match self.choose_replica_move(giver, taker) {
                Some((pg, position)) => {
                    self.replace_member(pg, position, taker);
                    done.push((pg, position, giver, taker));
                }
                None => {
                    for &(pg, position, giver, taker) in done.iter().rev() {
                        assert_eq!(self.pgs[pg][position], taker);
                        self.replace_member(pg, position, giver);
                    }
                    return false;
                }
            }
        }
        true
    }

    /// Hands a primary role along each edge of `path`. Edges cannot become impossible (each
    /// earlier step only adds PGs to later OSDs), but the check costs nothing.
    fn apply_primary_path(&mut self, path: &[usize]) -> bool {
        let mut done: Vec<(usize, usize)> = Vec::with_capacity(path.len());
        for edge in path.windows(2) {
            let (giver, taker) = (edge[0], edge[1]);
            match self.choose_primary_move(giver, taker) {
                Some((pg, position)) => {
                    self.swap_primary(pg, position);
                    done.push((pg, position));
                }
                None => {
                    for &(pg, position) in done.iter().rev() {
                        self.swap_primary(pg, position);
                    }
                    return false;
                }
            }
        }
        true
    }

    /// The PG and member position where `giver` can best hand a replica slot to `taker`.
    fn choose_replica_move(&self, giver: usize, taker: usize) -> Option<(usize, usize)> {
        let domain_of = &self.cluster.domain_of;
        self.osd_pgs[giver]
            .iter()
            .filter_map(|&pg| {
                let members = &self.pgs[pg];
                if members.iter().any(|&member| member != giver && domain_of[member] == domain_of[taker]) {
                    return None;
                }
                let position = members.iter().position(|&member| member == giver).expect("osd_pgs matches pgs");
                let key = (
                    !self.previous_members[pg].contains(&giver),
                    self.previous_members[pg].contains(&taker),
                    position != 0,
                    hash(Purpose::Move, self.pool_id, pg, self.cluster.ids[taker].0),
                );
                Some((key, pg, position))
            })
            .max_by_key(|&(key, _, _)| key)
            .map(|(_, pg, position)| (pg, position))
    }

    /// The PG where `giver` is primary and can best hand the role to member `taker`: first a PG
    /// whose primary changes anyway, then one where the taker holds the data.
    fn choose_primary_move(&self, giver: usize, taker: usize) -> Option<(usize, usize)> {
        self.osd_primary_pgs[giver]
            .iter()
            .filter_map(|&pg| {
                debug_assert_eq!(self.pgs[pg][0], giver);
                let position = self.pgs[pg].iter().position(|&member| member == taker)?;
                let key = (
                    self.primary_change_is_free(pg, taker),
                    self.previous_members[pg].contains(&taker),
                    hash(Purpose::Primary, self.pool_id, pg, self.cluster.ids[taker].0),
                );
                Some((key, pg, position))
            })
            .max_by_key(|&(key, _, _)| key)
            .map(|(_, pg, position)| (pg, position))
    }

    fn domain_used(&self, pg: usize, osd: usize) -> bool {
        let domain = self.cluster.domain_of[osd];
        self.pgs[pg].iter().any(|&member| self.cluster.domain_of[member] == domain)
    }

    fn replica_deviation(&self, osd: usize) -> f64 {
        self.osd_pgs[osd].len() as f64 - self.replica_targets[osd]
    }

    fn primary_deviation(&self, osd: usize) -> f64 {
        self.osd_primary_pgs[osd].len() as f64 - self.primary_targets[osd]
    }

    fn add_member(&mut self, pg: usize, osd: usize) {
        debug_assert!(!self.domain_used(pg, osd));
        self.pgs[pg].push(osd);
        self.osd_pgs[osd].push(pg);
    }

    /// Replaces the member at `position` of `pg`. Only before `choose_primaries` (primary lists
    /// are not maintained here).
    fn replace_member(&mut self, pg: usize, position: usize, osd: usize) {
        let previous = self.pgs[pg][position];
        assert_ne!(previous, osd);
        self.pgs[pg][position] = osd;
        debug_assert!(
            self.pgs[pg]
                .iter()
                .filter(|&&member| self.cluster.domain_of[member] == self.cluster.domain_of[osd])
                .count()
                == 1
        );
        let index = self.osd_pgs[previous].iter().position(|&other| other == pg).expect("osd_pgs matches pgs");
        self.osd_pgs[previous].swap_remove(index);
        self.osd_pgs[osd].push(pg);
    }

    /// Makes the member at `position` the primary of `pg` during `choose_primaries`.
    fn set_primary(&mut self, pg: usize, position: usize) {
        self.pgs[pg].swap(0, position);
        self.osd_primary_pgs[self.pgs[pg][0]].push(pg);
    }

    /// Swaps the primary of `pg` with the member at `position`.
    fn swap_primary(&mut self, pg: usize, position: usize) {
        assert_ne!(position, 0);
        let giver = self.pgs[pg][0];
        let taker = self.pgs[pg][position];
        self.pgs[pg].swap(0, position);
        let index = self.osd_primary_pgs[giver].iter().position(|&other| other == pg).expect("primary lists match");
        self.osd_primary_pgs[giver].swap_remove(index);
        self.osd_primary_pgs[taker].push(pg);
    }
}

/// Scratch state for the breadth-first searches, reused across searches.
struct Search {
    visited: Vec<bool>,
    /// The next OSD on the way to the sink.
    next_hop: Vec<usize>,
    frontier: Vec<usize>,
    next: Vec<usize>,
    /// Per failure domain: whether its possible givers have been visited in this search.
    domain_expanded: Vec<bool>,
    /// Per OSD: in how many of its PGs another member is in the domain being expanded.
    together: Vec<usize>,
    path: Vec<usize>,
}

impl Search {
    fn new(osd_count: usize, domain_count: usize) -> Self {
        Search {
            visited: vec![false; osd_count],
            next_hop: vec![NO_OSD; osd_count],
            frontier: Vec::new(),
            next: Vec::new(),
            domain_expanded: vec![false; domain_count],
            together: vec![0; osd_count],
            path: Vec::new(),
        }
    }

    fn start(&mut self, sink: usize) {
        self.visited.fill(false);
        self.visited[sink] = true;
        self.next_hop[sink] = NO_OSD;
        self.frontier.clear();
        self.frontier.push(sink);
        self.next.clear();
    }

    fn visit(&mut self, giver: usize, taker: usize) {
        self.visited[giver] = true;
        self.next_hop[giver] = taker;
        self.next.push(giver);
    }

    /// Ends one level: if it reached an OSD more than one slot above the sink, records the path
    /// from the highest such OSD and returns true; otherwise makes the level the next frontier.
    fn finish_level(&mut self, sink: usize, deviations: &[f64]) -> bool {
        let limit = deviations[sink] + 1.0 + EPSILON;
        let source = self
            .next
            .iter()
            .copied()
            .filter(|&osd| deviations[osd] > limit)
            .max_by(|&a, &b| deviations[a].total_cmp(&deviations[b]).then(b.cmp(&a)));
        if let Some(source) = source {
            self.path.clear();
            let mut osd = source;
            while osd != NO_OSD {
                self.path.push(osd);
                osd = self.next_hop[osd];
            }
            debug_assert_eq!(self.path.last(), Some(&sink));
            return true;
        }
        std::mem::swap(&mut self.frontier, &mut self.next);
        self.next.clear();
        false
    }
}
