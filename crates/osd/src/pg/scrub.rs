//! Scrub and repair (`docs/design/scrub.md`): the primary of a clean PG compares every
//! object's version and crc32c on every member (reading a copy checks its page checksums), and
//! rewrites an object whose copies disagree from a good copy: the newest version whose
//! checksums verify, with the crc32c most of those copies share. The rewrite is an ordinary
//! replicated write of the whole object at a new version, so every member ends with the same
//! bytes at the same version and the engine's rules (versions only grow) hold.
//!
//! PGs are scrubbed when `basalt scrub` asks (a request in the map newer than the PG's last
//! scrub) and every `scrub_interval_s`, one PG at a time per OSD, paced like recovery at the
//! lowest priority. The last result of each PG is stored at `/basalt/pg-scrub/<pool>/<pg>`.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;

use cluster::records::{decode, encode, FORMAT_VERSION};
use cluster::{keys, PgScrubRecord};
use engine::{EngineError, ObjectId};
use stdx::HashMap;
use wire::{PgId, Request, Response, Status};

use super::retry::{log_failure, PerPg, STUCK_AFTER};
use super::state::Pg;
use crate::ops::Mutation;
use crate::ops::{ObjectRead, OpError, Osd};
use crate::pacer::Priority;

/// How often the OSD looks for PGs to scrub.
const SCRUB_CHECK_INTERVAL: Duration = Duration::from_secs(2);
/// Unrepairable objects whose errors a result keeps.
const ERRORS_KEPT_MAX: usize = 8;

/// One member's copy of an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Copy {
    /// A readable copy: its version, the crc32c of its bytes (zeros where no page is held) and
    /// the pages that hold data, which the checksum cannot tell from zeros.
    Held {
        version: u64,
        crc32c: u32,
        present: u64,
    },
    Missing,
    /// Its checksums fail, or the drive failed the read (`drive`); the version its holder
    /// knows it at, when it knows one (the primary's engine knows its own copy's; a member's
    /// reply says none).
    Unreadable {
        version: Option<u64>,
        drive: bool,
    },
}

/// What the copies of one object call for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Consistent,
    /// Rewrite every member from `source`'s copy; `bad` are the members whose copy is wrong.
    Repair {
        source: u32,
        bad: Vec<u32>,
    },
    /// No member holds a readable copy although some hold one.
    Unrepairable,
}

/// Judges the copies of one object, `copies[0]` being the primary's. The good copies are the
/// readable ones at the newest version known (an unreadable copy's too: an older copy must
/// never replace a newer one that cannot be read) with the crc32c and pages present most of
/// them share (the primary's, or the first, among equals).
pub(crate) fn judge(copies: &[(u32, Copy)]) -> Verdict {
    let newest = copies
        .iter()
        .filter_map(|(_, copy)| match copy {
            Copy::Held { version, .. } | Copy::Unreadable { version: Some(version), .. } => Some(*version),
            _ => None,
        })
        .max();
    let Some(newest) = newest else {
        return if copies.iter().all(|(_, copy)| *copy == Copy::Missing) {
            Verdict::Consistent
        } else {
            Verdict::Unrepairable
        };
    };
    if !copies.iter().any(|(_, copy)| matches!(copy, Copy::Held { version, .. } if *version == newest)) {
        return Verdict::Unrepairable;
    }
    let mut votes: BTreeMap<(u32, u64), (usize, usize)> = BTreeMap::new();
    for (position, (_, copy)) in copies.iter().enumerate() {
        if let Copy::Held { version, crc32c, present } = copy {
            if *version == newest {
                let vote = votes.entry((*crc32c, *present)).or_insert((0, position));
                vote.0 += 1;
            }
        }
    }
    // Most votes, then the earliest member.
    let (&(good_crc, good_present), _) =
        votes.iter().max_by_key(|(_, (count, first))| (*count, std::cmp::Reverse(*first))).expect("a newest copy");
    let good = |copy: &Copy| *copy == Copy::Held { version: newest, crc32c: good_crc, present: good_present };
    let bad: Vec<u32> = copies.iter().filter(|(_, copy)| !good(copy)).map(|(osd, _)| *osd).collect();
    if bad.is_empty() {
        return Verdict::Consistent;
    }
    let source = copies.iter().find(|(_, copy)| good(copy)).map(|(osd, _)| *osd).expect("a good copy");
    Verdict::Repair { source, bad }
}

/// What one PG's scrub counted.
#[derive(Debug, Default)]
struct Tally {
    objects: u64,
    found: u64,
    repaired: u64,
    unrepairable: u64,
    errors: Vec<String>,
}

/// The last scrub of each PG this OSD leads, as far as it knows: (request answered, when).
#[derive(Default)]
pub(crate) struct ScrubLog {
    last: RefCell<HashMap<PgId, (u64, u64)>>,
    /// PGs whose scrub stopped, tried again after the pause (`retry.rs`).
    failures: PerPg,
}

impl Osd {
    /// Scrubs the PGs that are due, one at a time, for as long as the OSD runs.
    pub(crate) async fn scrub_due_pgs(self: Rc<Self>) {
        loop {
            tokio::time::sleep(SCRUB_CHECK_INTERVAL).await;
            for state in self.pgs.all() {
                if state.with_active(|active| active.clean()) != Some(true) {
                    continue;
                }
                if !self.scrubs.failures.due(state.id) {
                    continue;
                }
                let Some((request, inode)) = self.scrub_due(&state).await else { continue };
                match self.scrub_pg(&state, inode).await {
                    Ok(tally) => {
                        self.scrubs.failures.succeeded(state.id);
                        self.record_scrub(&state, request, tally).await
                    }
                    Err(reason) => {
                        let (failures, pause, loudness) = self.scrubs.failures.failed(state.id);
                        log_failure!(
                            loudness, osd = self.id, pg = %state.id, %reason, failures,
                            stuck = failures >= STUCK_AFTER, retry_in_ms = pause.as_millis() as u64, "scrub stopped"
                        );
                    }
                }
            }
        }
    }

    /// Whether `state`'s PG is due: the request to answer (0: scheduled) and the volume it is
    /// limited to.
    async fn scrub_due(&self, state: &Rc<Pg>) -> Option<(u64, Option<u64>)> {
        let pg = state.id;
        let map = self.map.borrow().clone();
        let known = self.scrubs.last.borrow().get(&pg).copied();
        let (answered, finished) = match known {
            Some(known) => known,
            None => {
                // The stored result, or, for a PG never scrubbed, now: a new PG is not due at once.
                let stored = match self.store.get(&keys::pg_scrub(pg.pool, pg.pg)).await {
                    Ok(stored) => stored,
                    Err(error) => {
                        tracing::debug!(osd = self.id, pg = %pg, %error, "cannot read the last scrub");
                        return None;
                    }
                };
                let last = stored
                    .and_then(|kv| decode::<PgScrubRecord>(&kv.key, &kv.value).ok())
                    .map_or((0, stdx::wall_clock::unix_seconds()), |record| (record.request, record.finished_unix_s));
                self.scrubs.last.borrow_mut().insert(pg, last);
                last
            }
        };
        if let Some(request) = map.scrub_requests.newest_for(pg.pool, pg.pg).filter(|request| request.id > answered) {
            return Some((request.id, request.inode));
        }
        (stdx::wall_clock::unix_seconds().saturating_sub(finished) >= map.settings.scrub_interval_s)
            .then_some((0, None))
    }

    /// Scrubs one PG: every object any member lists (of `inode` only, if given).
    async fn scrub_pg(self: &Rc<Self>, state: &Rc<Pg>, inode: Option<u64>) -> Result<Tally, String> {
        let pg = state.id;
        let map = self.map.borrow().clone();
        let acting = state.with_active(|active| active.acting.clone()).ok_or("the pg is not active")?;
        let pg_count = map.pools.get(&pg.pool).ok_or("the pool is gone")?.pg_count;
        let mut objects: BTreeSet<ObjectId> = self.list_local(pg, pg_count).into_iter().map(|(o, _)| o).collect();
        for &member in &acting[1..] {
            let address = map.address(member).ok_or_else(|| format!("osd.{member} is down"))?;
            let listing = self.list_member(member, address, pg, pg_count, state.epoch).await?;
            objects.extend(listing.into_iter().map(|(object, _)| object));
        }
        objects.retain(|object| inode.is_none_or(|inode| object.inode == inode));
        let started = tokio::time::Instant::now();
        let mut tally = Tally::default();
        for object in objects {
            self.still_current(state)?;
            let _permit =
                self.pacer.admit(Priority::Scrub, u64::from(self.object_size_bytes) * acting.len() as u64).await;
            tally.objects += 1;
            // A first look without the object's queue; a disagreement is confirmed under it, so a
            // write in flight is never taken for damage.
            if judge(&self.inspect(state, &acting, object).await?) == Verdict::Consistent {
                continue;
            }
            match self.repair(state, object).await {
                Ok(None) => {}
                Ok(Some(_)) => {
                    tally.found += 1;
                    tally.repaired += 1;
                }
                // Stopped here; the request stays due and the PG is scrubbed again.
                Err(RepairError::Unfinished(reason)) => {
                    stdx::coverage::mark("scrub: a repair unfinished, the pg scrubbed again");
                    return Err(format!("repairing {object}: {reason}"));
                }
                Err(reason @ RepairError::Unrepairable(_)) => {
                    stdx::coverage::mark("scrub: an object no member holds readable");
                    tally.found += 1;
                    tally.unrepairable += 1;
                    tracing::error!(osd = self.id, pg = %pg, %object, %reason, "cannot repair an object");
                    if tally.errors.len() < ERRORS_KEPT_MAX {
                        tally.errors.push(format!("{object}: {reason}"));
                    }
                }
            }
        }
        tracing::info!(
            osd = self.id, pg = %pg, epoch = state.epoch, objects = tally.objects, found = tally.found,
            repaired = tally.repaired, unrepairable = tally.unrepairable,
            scrub_ms = started.elapsed().as_millis() as u64, "pg scrubbed"
        );
        Ok(tally)
    }

    /// Every member's copy of `object`, the primary's first.
    async fn inspect(&self, state: &Rc<Pg>, acting: &[u32], object: ObjectId) -> Result<Vec<(u32, Copy)>, String> {
        let map = self.map.borrow().clone();
        let mut copies = Vec::with_capacity(acting.len());
        for &member in acting {
            let copy = if member == self.id {
                self.own_copy(object).await
            } else {
                let address = map.address(member).ok_or_else(|| format!("osd.{member} is down"))?;
                let request = Request::ObjectInfo { pg: state.id, object };
                let reply = self.peers.call(member, address, state.epoch, request).await?;
                match reply.response {
                    Response::ObjectInfo { version, data_crc32c, present } => {
                        Copy::Held { version, crc32c: data_crc32c, present }
                    }
                    Response::Failed { status: Status::NoSuchObject, .. } => Copy::Missing,
                    Response::Failed { status: status @ (Status::Corrupt | Status::IoError), .. } => {
                        Copy::Unreadable { version: None, drive: status == Status::IoError }
                    }
                    other => return Err(format!("osd.{member} answered the info of {object} with {other:?}")),
                }
            };
            copies.push((member, copy));
        }
        Ok(copies)
    }

    async fn own_copy(&self, object: ObjectId) -> Copy {
        if !self.object_exists(object) {
            return Copy::Missing;
        }
        match self.read(object, 0, self.object_size_bytes).await {
            Ok(read) => Copy::Held { version: read.version, crc32c: crc32c::crc32c(&read.data), present: read.present },
            Err(error) => Copy::Unreadable {
                version: self.engine.with(|engine| engine.object_version(object)),
                drive: matches!(error, OpError::Engine(EngineError::Disk(_))),
            },
        }
    }

    /// Under the object's queue: looks at every member's copy again and, if they disagree,
    /// rewrites the object on every member from a good copy: `Ok(Some(data))` with the data it
    /// wrote, `Ok(None)` when the copies agree.
    pub(crate) async fn repair(
        self: &Rc<Self>,
        state: &Rc<Pg>,
        object: ObjectId,
    ) -> Result<Option<ObjectRead>, RepairError> {
        let _object = self.locks.write(object).await;
        self.still_current(state).map_err(RepairError::Unfinished)?;
        let (acting, away) = state
            .with_active(|active| {
                let away: Vec<u32> = active.target.iter().copied().filter(|osd| !active.acting.contains(osd)).collect();
                (active.acting.clone(), away)
            })
            .ok_or_else(|| RepairError::Unfinished("the pg is not active".into()))?;
        let copies = self.inspect(state, &acting, object).await.map_err(RepairError::Unfinished)?;
        let source = match judge(&copies) {
            Verdict::Consistent => return Ok(None),
            // A member of the target set that is not acting (down, or not back yet) may hold a
            // good copy: the repair waits for it rather than call the object lost.
            Verdict::Unrepairable if !away.is_empty() => {
                stdx::coverage::mark("scrub: a repair waits for a target member away");
                return Err(RepairError::Unfinished(format!(
                    "no member up holds a readable copy of the newest version ({copies:?}); osd {away:?} may"
                )));
            }
            // A drive that failed a read may read the next time: nothing is known lost yet.
            Verdict::Unrepairable
                if copies.iter().any(|(_, copy)| matches!(copy, Copy::Unreadable { drive: true, .. })) =>
            {
                stdx::coverage::mark("scrub: a repair waits for a drive that failed a read");
                return Err(RepairError::Unfinished(format!(
                    "no member holds a readable copy of the newest version, and a drive failed its read: {copies:?}"
                )));
            }
            Verdict::Unrepairable => {
                return Err(RepairError::Unrepairable(format!("no member holds a readable copy: {copies:?}")))
            }
            Verdict::Repair { source, bad } => {
                stdx::coverage::mark("scrub: an object rewritten from a good copy");
                tracing::warn!(osd = self.id, pg = %state.id, %object, source, ?bad, "rewriting an object from a good copy");
                source
            }
        };
        let unfinished = RepairError::Unfinished;
        let copy = if source == self.id {
            self.read(object, 0, self.object_size_bytes).await.map_err(|error| unfinished(error.to_string()))?
        } else {
            let map = self.map.borrow().clone();
            let address = map.address(source).ok_or_else(|| unfinished(format!("osd.{source} is down")))?;
            self.read_member_copy(state.id, state.epoch, source, address, object).await.map_err(unfinished)?
        };
        let mutation = Mutation::Replace { data: copy.data.clone(), present: copy.present };
        self.replicate_held(state, object, mutation)
            .await
            .map_err(|error| unfinished(format!("rewriting {object}: {error}")))?;
        Ok(Some(copy))
    }

    /// Stores the PG's result and remembers it.
    async fn record_scrub(&self, state: &Rc<Pg>, request: u64, tally: Tally) {
        let pg = state.id;
        let finished = stdx::wall_clock::unix_seconds();
        let record = PgScrubRecord {
            version: FORMAT_VERSION,
            request,
            epoch: state.epoch,
            osd: self.id,
            finished_unix_s: finished,
            objects: tally.objects,
            found: tally.found,
            repaired: tally.repaired,
            unrepairable: tally.unrepairable,
            errors: tally.errors,
        };
        self.scrubs.last.borrow_mut().insert(pg, (request, finished));
        if let Err(error) = self.store.put(&keys::pg_scrub(pg.pool, pg.pg), encode(&record), None).await {
            tracing::warn!(osd = self.id, pg = %pg, %error, "cannot store the scrub's result");
        }
    }
}

/// Why a repair did not rewrite an object.
#[derive(Debug)]
pub(crate) enum RepairError {
    /// No member holds a readable copy.
    Unrepairable(String),
    /// A member did not answer, the PG moved on, or the rewrite failed: a later try may work.
    Unfinished(String),
}

impl std::fmt::Display for RepairError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RepairError::Unrepairable(reason) => write!(f, "unrepairable: {reason}"),
            RepairError::Unfinished(reason) => write!(f, "unfinished: {reason}"),
        }
    }
}

/// Whether a read failed on this copy alone (checksums, or the drive refusing the read), so
/// that a member's good copy can replace it.
pub(crate) fn unreadable(error: &OpError) -> bool {
    matches!(
        error,
        OpError::Engine(EngineError::Corrupt { .. } | EngineError::MetaCorrupt { .. } | EngineError::Disk(_))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(version: u64, crc32c: u32) -> Copy {
        Copy::Held { version, crc32c, present: 0b1111 }
    }

    #[test]
    fn the_newest_readable_copy_most_members_agree_on_wins() {
        assert_eq!(judge(&[(1, held(5, 7)), (2, held(5, 7)), (3, held(5, 7))]), Verdict::Consistent);
        assert_eq!(judge(&[(1, Copy::Missing), (2, Copy::Missing)]), Verdict::Consistent);
        // A primary whose copy fails its checksums is rewritten from a member's.
        assert_eq!(
            judge(&[(1, Copy::Unreadable { version: Some(5), drive: false }), (2, held(5, 7)), (3, held(5, 7))]),
            Verdict::Repair { source: 2, bad: vec![1] }
        );
        // Silent damage: two agree against one.
        assert_eq!(
            judge(&[(1, held(5, 7)), (2, held(5, 9)), (3, held(5, 7))]),
            Verdict::Repair { source: 1, bad: vec![2] }
        );
        assert_eq!(
            judge(&[(1, held(5, 9)), (2, held(5, 7)), (3, held(5, 7))]),
            Verdict::Repair { source: 2, bad: vec![1] }
        );
        // Older or missing copies are bad; the newest wins even if fewer hold it.
        assert_eq!(
            judge(&[(1, held(4, 7)), (2, held(6, 8)), (3, Copy::Missing)]),
            Verdict::Repair { source: 2, bad: vec![1, 3] }
        );
        // Two copies that disagree at one version: the primary's.
        assert_eq!(judge(&[(1, held(5, 7)), (2, held(5, 9))]), Verdict::Repair { source: 1, bad: vec![2] });
        // The same bytes with a page held on one and not on another (zeros written against none,
        // which a layer reads through): they differ.
        let sparse = Copy::Held { version: 5, crc32c: 7, present: 0b0111 };
        assert_eq!(
            judge(&[(1, held(5, 7)), (2, sparse.clone()), (3, held(5, 7))]),
            Verdict::Repair { source: 1, bad: vec![2] }
        );
        assert_eq!(
            judge(&[(1, Copy::Unreadable { version: None, drive: false }), (2, Copy::Missing)]),
            Verdict::Unrepairable
        );
        // A primary whose newest copy cannot be read is never rewritten from an older one (a
        // member still catching up): no good copy is up.
        assert_eq!(
            judge(&[(1, Copy::Unreadable { version: Some(6), drive: true }), (2, held(5, 7)), (3, Copy::Missing)]),
            Verdict::Unrepairable
        );
    }
}
