//! The eligible part of the OSD map, indexed densely, and each OSD's weight-proportional targets.
//!
//! Everything downstream works on dense indices: OSD `i` is the `i`-th eligible OSD in id order,
//! and failure domains are numbered in order of first appearance in that list. Sorting by id
//! first is what makes the output independent of the order of the input slice.
//!
//! Targets are real numbers (slots, not rounded). A failure domain can hold at most one slot per
//! PG, so a domain whose weight share exceeds `1 / members_per_pg` cannot get its proportional
//! share. Such domains are capped at `pg_count` slots and the rest is shared by the other domains
//! in proportion to weight (water filling). Within a domain, slots are shared in proportion to
//! weight. Primary targets need no cap: a domain never needs more primaries than PGs.

use std::collections::BTreeMap;

use crate::{FailureDomain, OsdId, OsdInfo, PlacementError, PoolSpec};

pub(crate) struct Cluster {
    /// Eligible OSDs in ascending id order; the position is the dense OSD index.
    pub ids: Vec<OsdId>,
    /// Dense OSD index by id, for reading the previous table.
    pub index_by_id: BTreeMap<OsdId, usize>,
    pub weights_bytes: Vec<u64>,
    /// Dense failure-domain index of each OSD.
    pub domain_of: Vec<usize>,
    /// The OSDs of each failure domain, in ascending index order.
    pub domain_osds: Vec<Vec<usize>>,
    pub domain_count: usize,
}

impl Cluster {
    /// Validates the spec and the map and keeps the OSDs the pool may use.
    pub fn new(spec: &PoolSpec, osds: &[OsdInfo]) -> Result<Cluster, PlacementError> {
        if spec.pg_count == 0 {
            return Err(PlacementError::ZeroPgCount);
        }
        if spec.replica_count == 0 {
            return Err(PlacementError::ZeroReplicaCount);
        }
        let mut sorted: Vec<&OsdInfo> = osds.iter().collect();
        sorted.sort_by_key(|osd| osd.id);
        if let Some(pair) = sorted.windows(2).find(|pair| pair[0].id == pair[1].id) {
            return Err(PlacementError::DuplicateOsd { osd: pair[0].id });
        }
        let up_count = sorted.iter().filter(|osd| osd.up).count();
        let usable_count = sorted.iter().filter(|osd| osd.up && osd.weight_bytes > 0).count();
        let eligible: Vec<&OsdInfo> =
            sorted.into_iter().filter(|osd| osd.up && osd.weight_bytes > 0 && spec.tags.is_subset(&osd.tags)).collect();
        if eligible.is_empty() {
            return Err(PlacementError::NoEligibleOsd {
                osd_count: osds.len(),
                up_count,
                usable_count,
                tags: spec.tags.iter().cloned().collect(),
            });
        }

        let mut domain_index_by_key: BTreeMap<DomainKey<'_>, usize> = BTreeMap::new();
        let mut domain_of = Vec::with_capacity(eligible.len());
        for osd in &eligible {
            let key = match spec.failure_domain {
                FailureDomain::Osd => DomainKey::Osd(osd.id),
                FailureDomain::Host => DomainKey::Name(&osd.host),
                FailureDomain::Rack => DomainKey::Name(&osd.rack),
            };
            let next_index = domain_index_by_key.len();
            domain_of.push(*domain_index_by_key.entry(key).or_insert(next_index));
        }
        let ids: Vec<OsdId> = eligible.iter().map(|osd| osd.id).collect();
        let mut domain_osds = vec![Vec::new(); domain_index_by_key.len()];
        for (osd, &domain) in domain_of.iter().enumerate() {
            domain_osds[domain].push(osd);
        }
        Ok(Cluster {
            index_by_id: ids.iter().enumerate().map(|(index, id)| (*id, index)).collect(),
            ids,
            weights_bytes: eligible.iter().map(|osd| osd.weight_bytes).collect(),
            domain_of,
            domain_osds,
            domain_count: domain_index_by_key.len(),
        })
    }

    pub fn osd_count(&self) -> usize {
        self.ids.len()
    }

    /// Each OSD's target number of replica slots: `pg_count * members_per_pg` slots shared by
    /// weight, with failure domains capped at `pg_count` (see the file comment).
    pub fn replica_targets(&self, pg_count: u32, members_per_pg: usize) -> Vec<f64> {
        assert!(members_per_pg >= 1);
        assert!(members_per_pg <= self.domain_count);
        let pg_count = f64::from(pg_count);
        let slot_count = pg_count * members_per_pg as f64;
        let mut domain_weights = vec![0.0_f64; self.domain_count];
        for (osd, &weight) in self.weights_bytes.iter().enumerate() {
            domain_weights[self.domain_of[osd]] += weight as f64;
        }
        let mut capped = vec![false; self.domain_count];
        let mut capped_count = 0_usize;
        // Water filling: cap the domains whose share exceeds one slot per PG, then share the
        // remaining slots among the others, until no further domain exceeds its cap.
        let slots_per_weight = loop {
            let free_slot_count = slot_count - pg_count * capped_count as f64;
            let free_weight: f64 = (0..self.domain_count).filter(|&d| !capped[d]).map(|d| domain_weights[d]).sum();
            if capped_count == self.domain_count || free_weight <= 0.0 {
                break 0.0;
            }
            let slots_per_weight = free_slot_count / free_weight;
            let mut newly_capped = false;
            for domain in 0..self.domain_count {
                if !capped[domain] && slots_per_weight * domain_weights[domain] > pg_count {
                    capped[domain] = true;
                    capped_count += 1;
                    newly_capped = true;
                }
            }
            if !newly_capped {
                break slots_per_weight;
            }
        };
        self.weights_bytes
            .iter()
            .enumerate()
            .map(|(osd, &weight)| {
                let domain = self.domain_of[osd];
                if capped[domain] {
                    pg_count * weight as f64 / domain_weights[domain]
                } else {
                    slots_per_weight * weight as f64
                }
            })
            .collect()
    }

    /// Each OSD's target number of primary roles: `pg_count` shared by weight.
    pub fn primary_targets(&self, pg_count: u32) -> Vec<f64> {
        let total_weight: f64 = self.weights_bytes.iter().map(|&weight| weight as f64).sum();
        self.weights_bytes.iter().map(|&weight| f64::from(pg_count) * weight as f64 / total_weight).collect()
    }
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum DomainKey<'a> {
    Osd(OsdId),
    Name(&'a str),
}
