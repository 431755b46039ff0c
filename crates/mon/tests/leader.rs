//! The leader's work against the embedded store: PG tables follow OSD records and liveness
//! keys written straight into the store, epochs move only for changed PGs, and leadership
//! passes to the other mon when the leader's lease goes.

mod common;

use std::time::Duration;

use cluster::keys;
use common::*;
use mon::Role;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_follow_the_osd_map_and_epochs_move_only_for_changed_pgs() {
    let (store, _dir) = embedded_store().await;
    live_osds(store.as_ref(), 1..=4).await;
    let mon = start_mon(&store, config("mon-a"), None).await;
    let (status, settings) = http(mon.api_address(), "PATCH", "/config", Some(json!({"down_out_interval_s": 0}))).await;
    assert_eq!((status, &settings["down_out_interval_s"]), (200, &json!(0)), "{settings}");
    let (status, pool) =
        http(mon.api_address(), "POST", "/pools", Some(json!({"name": "rbd", "replicas": 3, "pg_count": 32}))).await;
    assert_eq!(status, 201, "{pool}");
    let pool_id = pool["id"].as_u64().unwrap() as u32;

    let first = wait_for_table(store.as_ref(), pool_id, "the first table", |_| true).await;
    assert_eq!(first.table_epoch, 1);
    assert_eq!(first.pgs.len(), 32);
    assert!(first.pgs.iter().all(|(epoch, members)| *epoch == 1 && members.len() == 3));

    // OSD 4 stops and, with no down_out_interval, is marked out at once: its PGs get another
    // member, the others keep theirs, and live primaries stay.
    set_live(store.as_ref(), 4, false).await;
    let second = wait_for_table(store.as_ref(), pool_id, "the table without osd 4", |t| {
        t.pgs.iter().all(|(_, members)| members.len() == 3 && !members.contains(&4))
    })
    .await;
    for ((old_epoch, old), (new_epoch, new)) in first.pgs.iter().zip(&second.pgs) {
        if !old.contains(&4) {
            assert_eq!((new_epoch, new), (old_epoch, old));
        }
        if old[0] != 4 {
            assert_eq!(old[0], new[0], "a live primary moved");
        }
    }
    let (_, osds) = http(mon.api_address(), "GET", "/osds", None).await;
    assert_eq!(osds["osds"][3]["out"], true, "{osds}");

    // Another OSD down: a second of four would be more than a quarter out, so it stays in and
    // its PGs run with two members.
    set_live(store.as_ref(), 3, false).await;
    let third = wait_for_table(store.as_ref(), pool_id, "the degraded table", |t| {
        t.pgs.iter().all(|(_, members)| !members.contains(&3))
    })
    .await;
    assert!(third.pgs.iter().all(|(_, members)| members.len() == 2));
    let (_, status) = http(mon.api_address(), "GET", "/status", None).await;
    let down_3 = status["osds_down"].as_array().unwrap().iter().find(|down| down["id"] == 3).cloned().unwrap();
    assert!(down_3["kept_in"].as_str().unwrap().contains("a quarter"), "{status}");
    // The OSDs here are liveness keys only: no primary reports its PGs' states.
    assert_eq!((status["pgs"]["total"].as_u64(), status["pgs"]["unknown"].as_u64()), (Some(32), Some(32)), "{status}");

    // One OSD: one member per PG, below min_size. None: the last table stays.
    set_live(store.as_ref(), 1, false).await;
    let fourth = wait_for_table(store.as_ref(), pool_id, "the table of osd 2", |t| {
        t.pgs.iter().all(|(_, members)| members == &[2])
    })
    .await;
    set_live(store.as_ref(), 2, false).await;
    let (_, status) = http(mon.api_address(), "GET", "/status", None).await;
    assert_eq!(status["pgs"]["inactive"], 32, "{status}");
    let empty =
        wait_for_table(store.as_ref(), pool_id, "no acting member", |t| t.pgs.iter().all(|(_, m)| m.is_empty())).await;
    assert_eq!(empty.table_epoch, fourth.table_epoch + 1);

    // Everything back: osd 4, marked out by the mon, comes back in and takes PGs again; the
    // table settles (nothing is written twice for one change).
    live_osds(store.as_ref(), 1..=4).await;
    let back = wait_for_table(store.as_ref(), pool_id, "the full table", |t| {
        t.pgs.iter().all(|(_, members)| members.len() >= 3) && t.pgs.iter().any(|(_, m)| m.contains(&4))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(pg_table(store.as_ref(), pool_id).await.unwrap().table_epoch, back.table_epoch);
    mon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_other_mon_takes_over_when_the_leader_lease_goes() {
    let (store, _dir) = embedded_store().await;
    live_osds(store.as_ref(), 1..=3).await;
    let mon_a = start_mon(&store, config("mon-a"), None).await;
    eventually("mon-a to lead", || async { (mon_a.role() == Role::Leader).then_some(()) }).await;
    let mon_b = start_mon(&store, config("mon-b"), None).await;

    let (status, body) = http(mon_b.api_address(), "GET", "/cluster", None).await;
    assert_eq!(status, 200);
    assert_eq!(body["leader"]["mon"], "mon-a", "{body}");
    assert_eq!(body["mon"], "mon-b");
    assert_eq!(body["cluster_id"].as_str().unwrap().len(), 32);
    assert_eq!(body["object_size_bytes"], 131072);

    // A pool created through the follower is published by the leader.
    let (status, pool) = http(mon_b.api_address(), "POST", "/pools", Some(json!({"name": "rbd", "pg_count": 8}))).await;
    assert_eq!(status, 201, "{pool}");
    let first = wait_for_table(store.as_ref(), 1, "the first table", |_| true).await;

    // The leader's lease is revoked (as when it expires): mon-a steps down, mon-b leads.
    let leader = store.get(keys::MON_LEADER).await.unwrap().expect("a leader key");
    store.lease_revoke(leader.lease.expect("the leader key is leased")).await.unwrap();
    eventually("mon-b to lead", || async { (mon_b.role() == Role::Leader).then_some(()) }).await;
    eventually("mon-a to step down", || async { (mon_a.role() == Role::Candidate).then_some(()) }).await;
    let (_, body) = http(mon_a.api_address(), "GET", "/cluster", None).await;
    assert_eq!(body["leader"]["mon"], "mon-b", "{body}");

    // The new leader publishes: a fourth OSD joins the table.
    live_osds(store.as_ref(), [4]).await;
    let second =
        wait_for_table(store.as_ref(), 1, "a table with osd 4", |t| t.pgs.iter().any(|(_, m)| m.contains(&4))).await;
    // The record and the liveness key arrive one after the other: one table each at most.
    assert!((first.table_epoch + 1..=first.table_epoch + 2).contains(&second.table_epoch), "{second:?}");

    // A clean shutdown hands over at once.
    mon_b.shutdown().await;
    eventually("mon-a to lead again", || async { (mon_a.role() == Role::Leader).then_some(()) }).await;
    mon_a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_mon_keeps_members_without_liveness_keys_for_the_grace() {
    let (store, _dir) = embedded_store().await;
    live_osds(store.as_ref(), 1..=3).await;
    let mon = start_mon(&store, config("mon-a"), None).await;
    let (status, _) = http(mon.api_address(), "POST", "/pools", Some(json!({"name": "rbd", "pg_count": 8}))).await;
    assert_eq!(status, 201);
    let first = wait_for_table(store.as_ref(), 1, "the first table", |_| true).await;
    mon.shutdown().await;

    // As after a restart of the embedded store: no liveness key at all.
    for id in 1..=3 {
        set_live(store.as_ref(), id, false).await;
    }
    let mut config = config("mon-a");
    config.liveness_grace = Duration::from_millis(800);
    let mon = start_mon(&store, config, None).await;
    eventually("the restarted mon to lead", || async { (mon.role() == Role::Leader).then_some(()) }).await;
    set_live(store.as_ref(), 1, true).await;
    set_live(store.as_ref(), 2, true).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(pg_table(store.as_ref(), 1).await.unwrap(), first, "the table changed during the grace");
    // OSD 3 never came back: after the grace it leaves the table.
    wait_for_table(store.as_ref(), 1, "the table without osd 3", |t| t.pgs.iter().all(|(_, m)| !m.contains(&3))).await;
    mon.shutdown().await;
}

/// A down OSD stays in its PGs' target sets until it is marked out; a joining OSD takes its
/// share of PGs at once, the old members serving beside it until backfill completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn down_osds_keep_their_targets_and_joining_osds_take_a_share() {
    let (store, _dir) = embedded_store().await;
    live_osds(store.as_ref(), 1..=3).await;
    let mon = start_mon(&store, config("mon-a"), None).await;
    let (status, pool) =
        http(mon.api_address(), "POST", "/pools", Some(json!({"name": "rbd", "replicas": 3, "pg_count": 16}))).await;
    assert_eq!(status, 201, "{pool}");
    let pool_id = pool["id"].as_u64().unwrap() as u32;
    let first = wait_for_table(store.as_ref(), pool_id, "the first table", |_| true).await;

    set_live(store.as_ref(), 3, false).await;
    let second = wait_for_table(store.as_ref(), pool_id, "acting sets without osd 3", |table| {
        table.pgs.iter().all(|(_, acting)| !acting.contains(&3))
    })
    .await;
    assert_eq!(second.to_placement(), first.to_placement(), "a down osd's targets moved");
    let (_, status) = http(mon.api_address(), "GET", "/status", None).await;
    assert_eq!(status["pgs"]["unknown"], 16, "{status}");
    assert_eq!(status["osds_down"][0]["id"], 3, "{status}");
    assert!(status["osds_down"][0]["out_in_s"].as_u64().unwrap() > 500, "{status}");

    live_osds(store.as_ref(), [4]).await;
    // Osd 4's record and its liveness key are two writes: a table may place it before it is
    // up, and act on it in the next one.
    let third = wait_for_table(store.as_ref(), pool_id, "osd 4 in target and acting sets", |table| {
        (0..16).any(|pg| table.target(pg).contains(&4))
            && (0..16).all(|pg| table.target(pg).contains(&4) == table.pgs[pg].1.contains(&4))
    })
    .await;
    for pg in 0..16 {
        let (_, acting) = &third.pgs[pg];
        assert!(!acting.contains(&3), "pg {pg}: {acting:?}");
        assert_eq!(third.target(pg).contains(&4), acting.contains(&4), "pg {pg}");
        // Old members that are up keep serving until the PG is complete.
        for osd in first.target(pg).iter().filter(|&&osd| osd != 3) {
            assert!(acting.contains(osd), "pg {pg}: old member {osd} left early: {acting:?}");
        }
    }
    // A new pool is placed on the OSDs that are in, up or not; only up ones act.
    let (status, second_pool) =
        http(mon.api_address(), "POST", "/pools", Some(json!({"name": "new", "replicas": 3, "pg_count": 16}))).await;
    assert_eq!(status, 201, "{second_pool}");
    let second_id = second_pool["id"].as_u64().unwrap() as u32;
    let table = wait_for_table(store.as_ref(), second_id, "the new pool's table", |_| true).await;
    assert!(table.pgs.iter().all(|(_, members)| !members.contains(&3)), "{table:?}");
    mon.shutdown().await;
}
