//! The invariants of the metadata store's commit stream, checked as each commit lands from the
//! records alone, not from what the OSDs or the mon say about them (`docs/design/peering.md`):
//!
//! - a PG's epoch never goes back, and its acting set changes only with a new epoch;
//! - a PG's history names only epochs the tables gave it, each interval's members are acting
//!   members of that epoch with its primary first, and the clean set is the acting set of its
//!   epoch;
//! - a history record only grows (the same clean set, the earlier intervals kept in order) or
//!   is replaced by a clean record at an epoch no earlier than anything it replaces: nothing a
//!   peering must reach is forgotten before a later set holds every write.

use std::collections::BTreeMap;

use cluster::peering::{History, Interval};
use cluster::records::decode;
use cluster::{keys, PgHistoryRecord, PgTableRecord};

/// What the commits so far established, per PG (`(pool, pg)`).
#[derive(Default)]
pub(crate) struct Commits {
    /// Every epoch the tables gave the PG, with its acting set.
    acting: BTreeMap<(u32, u32), BTreeMap<u64, Vec<u32>>>,
    /// The PG's last history record.
    histories: BTreeMap<(u32, u32), History>,
}

impl Commits {
    /// Checks a put of `value` at `key`; what is wrong with it.
    pub(crate) fn put(&mut self, key: &str, value: &[u8]) -> Result<(), String> {
        if let Some(pool) = key.strip_prefix(keys::PGS_PREFIX) {
            let table: PgTableRecord = decode(key, value).map_err(|error| error.to_string())?;
            let pool: u32 = pool.parse().map_err(|_| format!("{key}: not a pool's table"))?;
            return self.table(pool, &table);
        }
        if let Some(pg) = key.strip_prefix(keys::PG_HISTORY_PREFIX) {
            let record: PgHistoryRecord = decode(key, value).map_err(|error| error.to_string())?;
            let (pool, pg) = pg.split_once('/').ok_or_else(|| format!("{key}: not a PG's history"))?;
            let id = (
                pool.parse().map_err(|_| format!("{key}: no pool"))?,
                pg.parse().map_err(|_| format!("{key}: no pg"))?,
            );
            return self.history(id, record.history);
        }
        Ok(())
    }

    fn table(&mut self, pool: u32, table: &PgTableRecord) -> Result<(), String> {
        for (pg, (epoch, acting)) in table.pgs.iter().enumerate() {
            let epochs = self.acting.entry((pool, pg as u32)).or_default();
            if let Some((&last, before)) = epochs.last_key_value() {
                if *epoch < last {
                    return Err(format!("PG {pool}.{pg} went back from epoch {last} to {epoch}"));
                }
                if *epoch == last && before != acting {
                    return Err(format!(
                        "PG {pool}.{pg} changed its acting set {before:?} to {acting:?} at epoch {epoch}"
                    ));
                }
            }
            epochs.insert(*epoch, acting.clone());
        }
        Ok(())
    }

    fn history(&mut self, (pool, pg): (u32, u32), history: History) -> Result<(), String> {
        let name = format!("PG {pool}.{pg}'s history {history:?}");
        let epochs = self.acting.get(&(pool, pg)).ok_or_else(|| format!("{name} before any table named the PG"))?;
        let acting_at = |interval: &Interval| {
            epochs
                .get(&interval.epoch)
                .ok_or_else(|| format!("{name} names epoch {}, which no table gave it", interval.epoch))
        };
        if let Some(clean) = &history.clean {
            let acting = acting_at(clean)?;
            if !same_members(&clean.members, acting) {
                return Err(format!("{name}: the clean set is not the acting set {acting:?} of epoch {}", clean.epoch));
            }
        }
        let mut after = history.clean.as_ref().map(|clean| clean.epoch);
        for interval in &history.intervals {
            // The same epoch again: a primary that peered again at its epoch, one of whose
            // recorded members fell behind, records the members left.
            if after.is_some_and(|after| interval.epoch < after) {
                return Err(format!("{name}: interval of epoch {} out of order", interval.epoch));
            }
            after = Some(interval.epoch);
            let acting = acting_at(interval)?;
            if interval.members.first() != acting.first() || interval.members.iter().any(|osd| !acting.contains(osd)) {
                return Err(format!(
                    "{name}: the interval of epoch {} is not the primary and acting members of {acting:?}",
                    interval.epoch
                ));
            }
        }
        if let Some(before) = self.histories.get(&(pool, pg)) {
            let grows = history.clean == before.clean && history.intervals.starts_with(&before.intervals);
            let newest_before = before.required().map(|interval| interval.epoch).max();
            let cleaned = history.intervals.is_empty()
                && history.clean.as_ref().is_some_and(|clean| newest_before.is_none_or(|newest| clean.epoch >= newest));
            if !grows && !cleaned {
                return Err(format!("{name} forgets what {before:?} required"));
            }
        }
        self.histories.insert((pool, pg), history);
        Ok(())
    }
}

fn same_members(a: &[u32], b: &[u32]) -> bool {
    a.len() == b.len() && a.iter().all(|osd| b.contains(osd))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(pgs: &[(u64, &[u32])]) -> PgTableRecord {
        PgTableRecord {
            version: 1,
            pool: 1,
            table_epoch: 1,
            pgs: pgs.iter().map(|&(epoch, acting)| (epoch, acting.to_vec())).collect(),
            targets: vec![],
        }
    }

    fn interval(epoch: u64, members: &[u32]) -> Interval {
        Interval { epoch, members: members.to_vec() }
    }

    fn history(clean: Option<Interval>, intervals: &[Interval]) -> History {
        History { clean, intervals: intervals.to_vec() }
    }

    #[test]
    fn a_history_grows_or_is_replaced_by_a_later_clean_record() {
        let mut commits = Commits::default();
        commits.table(1, &table(&[(1, &[1, 2, 3])])).expect("a first table");
        commits.history((1, 0), history(Some(interval(1, &[1, 2, 3])), &[])).expect("clean at 1");
        commits.table(1, &table(&[(2, &[2, 3])])).expect("osd 1 left");
        commits.history((1, 0), history(Some(interval(1, &[1, 2, 3])), &[interval(2, &[2])])).expect("grows");
        commits.table(1, &table(&[(3, &[2, 3, 1])])).expect("osd 1 back");
        // Forgetting the interval of epoch 2 without a clean record is what loses writes.
        let forgot = commits.history((1, 0), history(Some(interval(1, &[1, 2, 3])), &[interval(3, &[2, 3])]));
        assert!(forgot.unwrap_err().contains("forgets"));
        commits.history((1, 0), history(Some(interval(3, &[1, 2, 3])), &[])).expect("clean at 3");
        commits.table(1, &table(&[(4, &[2, 3])])).expect("osd 1 left again");
        commits.history((1, 0), history(Some(interval(3, &[1, 2, 3])), &[interval(4, &[2, 3])])).expect("grows");
        // A clean record older than what it replaces does not cover it.
        let older = commits.history((1, 0), history(Some(interval(3, &[1, 2, 3])), &[]));
        assert!(older.unwrap_err().contains("forgets"));
        commits.history((1, 0), history(Some(interval(4, &[3, 2])), &[])).expect("clean at 4");
    }

    #[test]
    fn epochs_go_forward_and_histories_name_their_acting_sets() {
        let mut commits = Commits::default();
        commits.table(1, &table(&[(2, &[1, 2])])).expect("a first table");
        assert!(commits.table(1, &table(&[(1, &[1, 2])])).unwrap_err().contains("went back"));
        assert!(commits.table(1, &table(&[(2, &[2, 1])])).unwrap_err().contains("changed its acting set"));
        assert!(commits.history((1, 0), history(None, &[interval(3, &[1])])).unwrap_err().contains("no table"));
        assert!(commits.history((1, 0), history(None, &[interval(2, &[2])])).unwrap_err().contains("primary"));
        assert!(commits.history((1, 0), history(Some(interval(2, &[1])), &[])).unwrap_err().contains("clean set"));
        commits.history((1, 0), history(None, &[interval(2, &[1])])).expect("the primary alone");
    }
}
