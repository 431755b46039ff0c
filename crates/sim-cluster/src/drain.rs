//! An OSD retired and replaced under load, as an operator swaps a drive (the real-process
//! `an_osd_marked_out_drains_under_load_and_can_then_be_killed_and_removed` and
//! `a_fourth_osd_joins_under_load_and_takes_a_quarter_of_the_memberships`): four OSDs serve and
//! a fifth waits unstarted. The busiest primary's removal is refused while it is up and a
//! member; it is marked out, and once every PG is clean without it, killed and removed without
//! force; then the fifth joins and takes PGs, which backfill while the clients run.

use std::time::Duration;

use mon::admin::AdminError;
use net::sim::SimNet;
use tokio::time::Instant;

use crate::scenarios::{busiest_primary, load, osd_of, wait_for, Stage};

/// How long the drained OSD's PGs may take to be clean without it.
const DRAIN_DEADLINE: Duration = Duration::from_secs(120);
const POLL_INTERVAL: Duration = Duration::from_millis(250);

pub(crate) async fn play(stage: &Stage<'_>) -> Result<(), String> {
    tokio::time::sleep(Duration::from_secs(2)).await;
    let spare = stage.nodes.count() - 1;
    let (victim, _) = busiest_primary(stage).await?;
    assert_ne!(victim, spare, "the spare has not started, so it leads nothing");
    let osd = osd_of(stage, victim).await?;
    let store = stage.store.as_ref();
    match mon::osd_admin::remove(store, &load(stage).await?, osd, false).await {
        Err(AdminError::Conflict(reason)) => stage.run.record(format_args!("removal of osd.{osd} refused: {reason}")),
        other => return Err(format!("removing osd.{osd} while it is up and a member: {other:?}")),
    }
    mon::osd_admin::mark_out(store, osd).await.map_err(|error| format!("marking osd.{osd} out: {error}"))?;
    stage.run.record(format_args!("osd.{osd} marked out"));
    drained(stage, osd).await?;
    stage.nodes.kill(victim).await;
    wait_for(stage, "the drained OSD down", |map| !map.live.contains_key(&osd)).await?;
    mon::osd_admin::remove(store, &load(stage).await?, osd, false)
        .await
        .map_err(|error| format!("the drained osd.{osd} could not be removed: {error}"))?;
    stage.nodes.retire(victim);
    wait_for(stage, "the removed OSD gone from the map", |map| !map.osds.contains_key(&osd)).await?;
    stage.nodes.join(spare);
    wait_for(stage, "the new OSD registered", |map| map.live.len() == stage.nodes.count() - 1).await?;
    let joined = osd_of(stage, spare).await?;
    wait_for(stage, "the new OSD a member of some PG", |map| {
        map.pools.values().any(|pool| {
            (0..pool.pg_count).any(|pg| map.pg(pool.id, pg).is_some_and(|state| state.members.contains(&joined)))
        })
    })
    .await
}

/// Waits until every PG is clean on a target set without `osd` and it serves none.
async fn drained(stage: &Stage<'_>, osd: u32) -> Result<(), String> {
    let deadline = Instant::now() + DRAIN_DEADLINE;
    loop {
        let (views, _) = SimNet::on_node("checker", crate::settle::pg_views(stage.store)).await?;
        let left: Vec<String> = views
            .iter()
            .filter(|view| !crate::settle::is_settled(view) || view.acting.contains(&osd) || view.target.contains(&osd))
            .map(|view| format!("{}.{}", view.pool, view.pg))
            .collect();
        if left.is_empty() {
            stage.run.record(format_args!("every PG clean without osd.{osd}"));
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "PGs {} not clean without osd.{osd} {DRAIN_DEADLINE:?} after it was marked out",
                left.join(", ")
            ));
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}
