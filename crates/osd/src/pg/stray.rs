//! Removing stray copies (`docs/design/backfill.md`): objects this OSD holds of PGs it is no
//! longer a member of, once the PG's history shows it clean without this OSD (so no peering
//! will ever ask for them). Old members of a backfilled PG, and OSDs that were out, free
//! their space this way.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use cluster::ClusterMap;
use engine::{EngineError, ObjectId, Request as EngineRequest};
use wire::PgId;

use super::retry::{log_failure, STUCK_AFTER};
use crate::ops::Osd;

/// How often the OSD looks for stray copies.
const STRAY_CHECK_INTERVAL: Duration = Duration::from_secs(5);

impl Osd {
    /// Looks for stray copies every few seconds for as long as the OSD runs.
    pub(crate) async fn remove_strays(self: Rc<Self>) {
        loop {
            tokio::time::sleep(STRAY_CHECK_INTERVAL).await;
            let map = self.map.borrow().clone();
            for (pg, objects) in self.strays(&map) {
                if !self.stray_failures.due(pg) {
                    continue;
                }
                match self.remove_stray_pg(pg, objects).await {
                    Ok(()) => self.stray_failures.succeeded(pg),
                    Err(reason) => {
                        let (failures, pause, loudness) = self.stray_failures.failed(pg);
                        log_failure!(
                            loudness, osd = self.id, pg = %pg, %reason, failures, stuck = failures >= STUCK_AFTER,
                            retry_in_ms = pause.as_millis() as u64, "cannot remove stray copies"
                        );
                    }
                }
            }
        }
    }

    /// This OSD's objects of the PGs whose acting and target sets do not name it, by PG:
    /// only the PGs it holds objects of and is no member of are listed.
    fn strays(&self, map: &ClusterMap) -> BTreeMap<PgId, Vec<(ObjectId, u64)>> {
        let mut strays = BTreeMap::new();
        for pool in self.engine.pools_with_objects() {
            // Objects of a pool that is gone are the volume reaper's.
            let (Some(record), Some(table)) = (map.pools.get(&pool), map.pg_tables.get(&pool)) else { continue };
            if table.pgs.len() != record.pg_count as usize {
                continue;
            }
            for pg in self.engine.pgs_with_objects(pool, record.pg_count) {
                let pg = PgId { pool, pg };
                if self.is_member(map, pg) {
                    continue;
                }
                let objects = self.list_local(pg, record.pg_count);
                if !objects.is_empty() {
                    strays.insert(pg, objects);
                }
            }
        }
        strays
    }

    fn is_member(&self, map: &ClusterMap, pg: PgId) -> bool {
        let Some(table) = map.pg_tables.get(&pg.pool) else { return false };
        let acting = table.pgs.get(pg.pg as usize).is_some_and(|(_, acting)| acting.contains(&self.id));
        acting || table.target(pg.pg as usize).contains(&self.id)
    }

    /// Deletes this OSD's copies of `pg` if its history is clean without this OSD.
    ///
    /// A listing is a promise: the primary that got it skips the copies it names, counts this
    /// OSD complete and may record it so. So each delete checks membership, against the map the
    /// history was read under, only once it holds the stray gate, and keeps the gate until the
    /// delete commits: a listing (which takes the gate too) comes before the check, which then
    /// sees the map that made this OSD a member again, or after the commit, and lacks the copy.
    async fn remove_stray_pg(&self, pg: PgId, objects: Vec<(ObjectId, u64)>) -> Result<(), String> {
        let epoch = self.map.borrow().pg_epoch_and_primary(pg.pool, pg.pg).map(|(epoch, _)| epoch);
        let (history, _) = super::history::read(self.store.as_ref(), pg).await?;
        let needed = history.required().any(|set| set.members.contains(&self.id));
        if history.clean.is_none() || needed {
            return Ok(());
        }
        stdx::coverage::mark("stray: copies of a pg left behind removed");
        tracing::info!(osd = self.id, pg = %pg, objects = objects.len(), "removing stray copies");
        for (object, held) in objects {
            let _gate = self.stray_gate.lock().await;
            let _object = self.locks.write(object).await;
            // A map that made this OSD a member again, or moved the PG on (its history may name
            // this OSD now), ends the pass; the next one reads the history again.
            let map = self.map.borrow().clone();
            if self.is_member(&map, pg) || map.pg_epoch_and_primary(pg.pool, pg.pg).map(|(epoch, _)| epoch) != epoch {
                return Ok(());
            }
            // Just above the held version: below any version a later epoch mints, so a later
            // copy to this OSD is accepted.
            match self.engine.submit(EngineRequest::DeleteVersioned { object, version: held + 1 }).await {
                Ok(_) | Err(EngineError::StaleVersion { .. }) => {}
                Err(error) => return Err(format!("deleting {object}: {error}")),
            }
        }
        Ok(())
    }
}
