//! Liveness after the faults: every PG must become clean on its target set within a bound of
//! simulated time once every OSD is back. The PG states come the way `basalt pg ls` gets them:
//! the map from the store, and each live OSD asked over the wire for the PGs it leads.

use std::sync::Arc;
use std::time::Duration;

use meta::MetaStore;
use mon::views::{all_pg_views, OsdAnswers, PgView};
use net::sim::SimNet;
use tokio::time::Instant;

use crate::cluster::Run;

/// How long the PGs may take to settle once the faults stop.
const SETTLE_DEADLINE: Duration = Duration::from_secs(120);
const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// Waits until every OSD is up and every PG clean on its target set, and still so a lease later
/// (a lease that ran out just as the faults healed takes its OSD down only then); a violation if
/// that takes too long. Returns whether they settled.
pub(crate) async fn wait_until_clean(store: &Arc<dyn MetaStore>, osds: usize, lease: Duration, run: &Run) -> bool {
    let started = Instant::now();
    let mut unsettled = Vec::new();
    let mut clean_since: Option<Instant> = None;
    while started.elapsed() < SETTLE_DEADLINE {
        unsettled = match SimNet::on_node("checker", pg_views(store)).await {
            Ok((views, up)) => {
                let mut unsettled: Vec<String> =
                    views.into_iter().filter(|view| !is_settled(view)).map(describe).collect();
                if up < osds {
                    unsettled.push(format!("{up} of {osds} OSDs up and in to stay"));
                }
                unsettled
            }
            Err(error) => vec![error],
        };
        if !unsettled.is_empty() {
            clean_since = None;
        } else if let Some(since) = clean_since {
            if since.elapsed() > lease {
                run.record(format_args!("every PG clean after {:?}", since - started));
                return true;
            }
        } else {
            clean_since = Some(Instant::now());
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
    run.violation(format!(
        "PGs not clean {SETTLE_DEADLINE:?} after the faults stopped (liveness): {}",
        unsettled.join("; ")
    ));
    false
}

pub(crate) fn is_settled(view: &PgView) -> bool {
    let mut acting = view.acting.clone();
    let mut target = view.target.clone();
    acting.sort_unstable();
    target.sort_unstable();
    // A clean PG whose primary still counts failures in a row did not finish what it tried.
    view.state == "clean" && acting == target && !view.stuck
}

fn describe(view: PgView) -> String {
    let stuck = if view.stuck { format!(" stuck: {:?}", view.reason) } else { String::new() };
    format!("{}.{} {} acting {:?} target {:?}{stuck}", view.pool, view.pg, view.state, view.acting, view.target)
}

/// Every PG's view, from the map and the live OSDs' answers (one at a time, from this node),
/// and how many OSDs are up and will stay as they are: not marked down on their peers' reports
/// (the mon clears the mark once the reports stop) nor marked out by the mon while they were
/// down (it marks them in once they are up), either of which moves PGs again.
pub(crate) async fn pg_views(store: &Arc<dyn MetaStore>) -> Result<(Vec<PgView>, usize), String> {
    let map = cluster_watch::load(store.as_ref()).await.map_err(|error| format!("loading the map: {error}"))?;
    let mut answers = OsdAnswers::default();
    for &osd in map.live.keys() {
        let Some(address) = map.address(osd) else { continue };
        let Ok(connection) = net::connect(address).await else { continue };
        let reply = tokio::time::timeout(Duration::from_secs(2), connection.call(0, wire::Request::PgStates)).await;
        if let Ok(Ok(reply)) = reply {
            if let wire::Response::PgStates { history_writes, pgs, .. } = reply.response {
                answers.history_writes.insert(osd, history_writes);
                for report in pgs {
                    answers.pgs.insert((report.pg.pool, report.pg.pg), (osd, report));
                }
            }
        }
        connection.close("asked");
    }
    let to_stay = |osd: u32| map.is_up(osd) && !map.osds.get(&osd).is_some_and(|record| record.out && record.auto_out);
    Ok((all_pg_views(&map, &answers), map.live.keys().filter(|&&osd| to_stay(osd)).count()))
}
