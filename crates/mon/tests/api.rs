//! The HTTP API against the embedded store: every validation case answers the right status and
//! names the problem, volumes go through their whole life, and deletions are refused or run in
//! the background as documented in `docs/design/api.md`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use cluster::VolumeRecord;
use common::*;
use mon::VolumeReaper;
use serde_json::{json, Value};
use tokio::sync::Notify;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_a_4xx_that_names_the_problem() {
    let (store, _dir) = embedded_store().await;
    let mon = start_mon(&store, config("mon-a"), None).await;
    let api = mon.api_address();

    // No OSDs at all yet.
    check(api, "POST", "/pools", Some(json!({"name": "p"})), 400, "span only 0 hosts").await;
    for id in 1..=3 {
        put_osd(store.as_ref(), id, &format!("host{id}"), "rack1", &["ssd"]).await;
    }
    put_osd(store.as_ref(), 4, "host4", "rack2", &[]).await;

    let pool = |body: Value| Some(body);
    check(
        api,
        "POST",
        "/pools",
        pool(json!({"name": "p", "failure_domain": "rack"})),
        400,
        "needs 3 racks for 3 replicas, but the registered osds span only 2 racks",
    )
    .await;
    check(
        api,
        "POST",
        "/pools",
        pool(json!({"name": "p", "replicas": 4, "tags": ["ssd"]})),
        400,
        "with tags ssd span only 3 hosts",
    )
    .await;
    check(api, "POST", "/pools", pool(json!({"name": "p", "replicas": 0})), 400, "replicas is 0; it must be 1 to 8")
        .await;
    check(api, "POST", "/pools", pool(json!({"name": "p", "replicas": 9})), 400, "replicas is 9").await;
    check(
        api,
        "POST",
        "/pools",
        pool(json!({"name": "p", "min_size": 4})),
        400,
        "min_size is 4; it must be 1 to replicas (3)",
    )
    .await;
    check(api, "POST", "/pools", pool(json!({"name": "p", "min_size": 0})), 400, "min_size is 0").await;
    check(
        api,
        "POST",
        "/pools",
        pool(json!({"name": "p", "pg_count": 0})),
        400,
        "pg_count is 0; it must be 1 to 32768",
    )
    .await;
    check(api, "POST", "/pools", pool(json!({"name": "p", "pg_count": 32769})), 400, "pg_count is 32769").await;
    check(
        api,
        "POST",
        "/pools",
        pool(json!({"name": "p", "pg_count": 32768, "replicas": 4, "failure_domain": "osd"})),
        400,
        "makes 131072 PG slots; at most 98304",
    )
    .await;
    check(
        api,
        "POST",
        "/pools",
        pool(json!({"name": "p", "failure_domain": "row"})),
        400,
        "failure_domain \"row\" is not one of osd, host, rack",
    )
    .await;
    check(api, "POST", "/pools", pool(json!({"name": "a/b"})), 400, "contains '/'").await;
    check(api, "POST", "/pools", pool(json!({"name": ""})), 400, "1 to 64 characters").await;
    check(api, "POST", "/pools", pool(json!({"name": "p", "tags": ["a b"]})), 400, "tag \"a b\"").await;
    check(api, "POST", "/pools", pool(json!({"name": "p", "replica": 3})), 400, "unknown field `replica`").await;
    check(api, "POST", "/pools", pool(json!({"replicas": 3})), 400, "missing field `name`").await;
    check(api, "POST", "/pools", pool(json!({"name": "p", "replicas": -1})), 400, "invalid value: integer `-1`").await;
    check(api, "POST", "/pools", None, 415, "must be JSON").await;
    check(api, "GET", "/nothing", None, 404, "there is no API endpoint GET /api/v1/nothing").await;
    check(api, "DELETE", "/pools", None, 405, "/api/v1/pools does not accept DELETE").await;

    let (status, created) = http(api, "POST", "/pools", pool(json!({"name": "fast", "tags": ["ssd"]}))).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["pg_count"], 128, "32 per eligible osd, rounded up to a power of two");
    assert_eq!(created["min_size"], 2);
    assert_eq!(created["failure_domain"], "host");
    check(api, "POST", "/pools", pool(json!({"name": "fast"})), 409, "pool \"fast\" already exists").await;
    check(api, "GET", "/pools/slow", None, 404, "pool \"slow\" does not exist").await;
    check(api, "DELETE", "/pools/slow", None, 404, "pool \"slow\" does not exist").await;

    let volume = |body: Value| Some(body);
    check(
        api,
        "POST",
        "/volumes",
        volume(json!({"name": "v", "size_bytes": 0})),
        400,
        "must be greater than 0 and a multiple of 4096 bytes",
    )
    .await;
    check(api, "POST", "/volumes", volume(json!({"name": "v", "size_bytes": 4097})), 400, "multiple of 4096").await;
    check(
        api,
        "POST",
        "/volumes",
        volume(json!({"name": "v", "size_bytes": 4096, "pool": "slow"})),
        404,
        "pool \"slow\" does not exist",
    )
    .await;
    check(api, "POST", "/volumes", volume(json!({"name": "v w", "size_bytes": 4096})), 400, "contains ' '").await;
    check(api, "POST", "/volumes", volume(json!({"name": "v"})), 400, "missing field `size_bytes`").await;
    let (status, created) = http(api, "POST", "/volumes", volume(json!({"name": "v", "size_bytes": 1 << 30}))).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["pool"], "fast", "the only pool is the default");
    check(
        api,
        "POST",
        "/volumes",
        volume(json!({"name": "v", "size_bytes": 4096})),
        409,
        "volume \"v\" already exists",
    )
    .await;
    check(
        api,
        "PATCH",
        "/volumes/v",
        volume(json!({"size_bytes": 1 << 20})),
        400,
        "shrinking to 1048576 bytes is not supported",
    )
    .await;
    check(api, "PATCH", "/volumes/v", volume(json!({"size_bytes": 12345})), 400, "multiple of 4096").await;
    check(api, "PATCH", "/volumes/w", volume(json!({"size_bytes": 1u64 << 31})), 404, "volume \"w\" does not exist")
        .await;
    check(api, "GET", "/volumes/w", None, 404, "volume \"w\" does not exist").await;
    check(api, "DELETE", "/volumes/w", None, 404, "volume \"w\" does not exist").await;

    // A second pool, neither named "default": the pool must be named.
    let (status, _) = http(api, "POST", "/pools", pool(json!({"name": "other", "failure_domain": "osd"}))).await;
    assert_eq!(status, 201);
    check(
        api,
        "POST",
        "/volumes",
        volume(json!({"name": "x", "size_bytes": 4096})),
        400,
        "several pools and none is named \"default\"",
    )
    .await;

    // PG lists: the filters are checked.
    let (status, listing) = http(api, "GET", "/pgs?pool=other", None).await;
    assert_eq!(status, 200, "{listing}");
    assert!(listing["pgs"].as_array().is_some_and(|pgs| !pgs.is_empty() && pgs.iter().all(|pg| pg["pool"] == 2)));
    check(api, "GET", "/pgs?pool=nope", None, 404, "no pool named \"nope\"").await;
    check(api, "GET", "/pgs?state=sleepy", None, 400, "unknown pg state \"sleepy\"; states are active, clean").await;
    check(api, "GET", "/pgs?sate=clean", None, 400, "unknown field `sate`").await;

    // Stopping and starting OSDs: only a mon that runs OSDs in its process (basalt dev) can.
    check(api, "POST", "/osds/1/stop", None, 404, "this mon runs no OSDs in its process").await;
    check(api, "POST", "/osds/1/start", None, 404, "this mon runs no OSDs in its process").await;
    check(api, "POST", "/osds/1/stop", Some(json!({"mode": "explode"})), 400, "unknown variant `explode`").await;
    check(api, "POST", "/osds/one/stop", None, 400, "\"one\" is not an OSD id").await;

    // Down reports: the body and the id are checked; an OSD the store does not know is down.
    check(api, "POST", "/osds/x/down-report", Some(json!({"incarnation": 1})), 400, "\"x\" is not an OSD id").await;
    check(api, "POST", "/osds/1/down-report", Some(json!({})), 400, "missing field `incarnation`").await;
    check(api, "POST", "/osds/1/down-report", Some(json!({"incarnation": 1, "by": 2})), 400, "unknown field `by`")
        .await;
    let (status, answer) = http(api, "POST", "/osds/9/down-report", Some(json!({"incarnation": 5}))).await;
    assert_eq!(
        (status, answer["down"].as_bool(), answer["revoked"].as_bool()),
        (200, Some(true), Some(false)),
        "{answer}"
    );
    mon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_live_and_die_and_pools_are_removed_only_when_empty() {
    let (store, _dir) = embedded_store().await;
    live_osds(store.as_ref(), 1..=3).await;
    let mon = start_mon(&store, config("mon-a"), None).await;
    let api = mon.api_address();
    for name in ["default", "other"] {
        let (status, _) = http(api, "POST", "/pools", Some(json!({"name": name, "pg_count": 16}))).await;
        assert_eq!(status, 201);
    }
    let (status, volume) = http(api, "POST", "/volumes", Some(json!({"name": "db", "size_bytes": 1 << 30}))).await;
    assert_eq!(status, 201, "{volume}");
    assert_eq!(volume["pool"], "default");
    assert_eq!(volume["id"].as_u64().unwrap(), cluster::inode::layered(1, 1, 0));
    assert_eq!(volume["state"], "ready");
    let (status, volume) =
        http(api, "POST", "/volumes", Some(json!({"name": "db2", "size_bytes": 4096, "pool": "default"}))).await;
    assert_eq!(status, 201);
    assert_eq!(volume["id"].as_u64().unwrap(), cluster::inode::layered(1, 2, 0));
    let (_, volume) =
        http(api, "POST", "/volumes", Some(json!({"name": "logs", "size_bytes": 4096, "pool": "other"}))).await;
    assert_eq!(volume["id"].as_u64().unwrap(), cluster::inode::layered(2, 1, 0));

    let (status, volume) = http(api, "PATCH", "/volumes/db", Some(json!({"size_bytes": 2u64 << 30}))).await;
    assert_eq!(status, 200);
    assert_eq!(volume["size_bytes"], 2u64 << 30);
    let (_, volume) = http(api, "GET", "/volumes/db", None).await;
    assert_eq!(volume["size_bytes"], 2u64 << 30);
    let (_, list) = http(api, "GET", "/volumes", None).await;
    assert_eq!(list["volumes"].as_array().unwrap().len(), 3);

    check(api, "DELETE", "/pools/default", None, 409, "pool \"default\" still holds 2 volumes (db, db2)").await;
    for name in ["db", "db2"] {
        let (status, volume) = http(api, "DELETE", &format!("/volumes/{name}?now=true"), None).await;
        assert_eq!(status, 202, "{volume}");
        assert_eq!(volume["state"], "deleting");
    }
    // Without a reaper the leader deletes the records at once.
    eventually("the volumes to go", || async {
        let (status, _) = http(api, "GET", "/volumes/db2", None).await;
        (status == 404).then_some(())
    })
    .await;
    eventually("db to go", || async { (http(api, "GET", "/volumes/db", None).await.0 == 404).then_some(()) }).await;
    wait_for_table(store.as_ref(), 1, "the default pool's table", |_| true).await;
    let (status, pool) = http(api, "DELETE", "/pools/default", None).await;
    assert_eq!(status, 200, "{pool}");
    assert!(pg_table(store.as_ref(), 1).await.is_none(), "the table goes with the pool");
    assert!(store.get(&cluster::keys::volume_id_counter(1)).await.unwrap().is_none());

    let (_, status) = http(api, "GET", "/status", None).await;
    assert_eq!(status["pools"], 1);
    assert_eq!(status["volumes"], 1);
    assert_eq!(status["osds"], json!({"up": 3, "total": 3}));
    assert_eq!(status["capacity"], json!({"total_bytes": 3u64 << 40, "used_bytes": null, "reporting_osds": 0}));
    mon.shutdown().await;
}

/// Removes objects only when told to, reporting half-way progress first.
struct GatedReaper {
    release: Notify,
}

#[async_trait]
impl VolumeReaper for GatedReaper {
    async fn remove_objects(
        &self,
        volume: &VolumeRecord,
        progress: &(dyn Fn(u64, u64) + Send + Sync),
    ) -> Result<(), String> {
        let total = volume.size_bytes / u64::from(volume.object_size_bytes);
        progress(total / 2, total);
        self.release.notified().await;
        progress(total, total);
        Ok(())
    }

    async fn remove_snapshot_objects(&self, _snapshot: &cluster::SnapshotRecord) -> Result<(), String> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_progress_shows_until_the_reaper_is_done() {
    let (store, _dir) = embedded_store().await;
    live_osds(store.as_ref(), 1..=3).await;
    let reaper = Arc::new(GatedReaper { release: Notify::new() });
    let mon = start_mon(&store, config("mon-a"), Some(reaper.clone())).await;
    let api = mon.api_address();
    let (status, _) = http(api, "POST", "/pools", Some(json!({"name": "rbd", "pg_count": 8}))).await;
    assert_eq!(status, 201);
    let (status, _) = http(api, "POST", "/volumes", Some(json!({"name": "v", "size_bytes": 1 << 30}))).await;
    assert_eq!(status, 201);
    // The reaper waits for every live OSD to confirm the map that flags the volume; these
    // OSDs are records only, so they go before the deletion.
    for id in 1..=3 {
        set_live(store.as_ref(), id, false).await;
    }
    let (status, _) = http(api, "DELETE", "/volumes/v?now=true", None).await;
    assert_eq!(status, 202);
    let volume = eventually("progress to show", || async {
        let (_, volume) = http(api, "GET", "/volumes/v", None).await;
        (!volume["deletion"].is_null()).then_some(volume)
    })
    .await;
    assert_eq!(volume["state"], "deleting");
    assert_eq!(volume["deletion"], json!({"objects_done": 4096, "objects_total": 8192}));
    check(api, "PATCH", "/volumes/v", Some(json!({"size_bytes": 2u64 << 30})), 409, "is being deleted").await;
    check(api, "DELETE", "/pools/rbd", None, 409, "still holds 1 volume (v)").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    reaper.release.notify_one();
    eventually("the volume to go", || async { (http(api, "GET", "/volumes/v", None).await.0 == 404).then_some(()) })
        .await;
    mon.shutdown().await;
}

/// Membership, settings and scrub requests: what each accepts, and a named 4xx for the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_settings_and_scrub_requests_are_checked() {
    let (store, _dir) = embedded_store().await;
    live_osds(store.as_ref(), 1..=4).await;
    let mon = start_mon(&store, config("mon-a"), None).await;
    let api = mon.api_address();
    let (status, _) = http(api, "POST", "/pools", Some(json!({"name": "p", "pg_count": 8}))).await;
    assert_eq!(status, 201);
    wait_for_table(store.as_ref(), 1, "the first table", |_| true).await;

    // Out, in, reweight.
    let (status, osd) = http(api, "POST", "/osds/4/out", None).await;
    assert_eq!((status, &osd["out"]), (200, &json!(true)), "{osd}");
    wait_for_table(store.as_ref(), 1, "no target on osd 4", |table| (0..8).all(|pg| !table.target(pg).contains(&4)))
        .await;
    let (status, osd) = http(api, "POST", "/osds/4/in", None).await;
    assert_eq!((status, &osd["out"]), (200, &json!(false)), "{osd}");
    let (status, osd) = http(api, "POST", "/osds/3/reweight", Some(json!({"weight": 0.5}))).await;
    assert_eq!((status, &osd["weight"]), (200, &json!(0.5)), "{osd}");
    check(api, "POST", "/osds/3/reweight", Some(json!({"weight": -1})), 400, "weight -1 is not between 0 and 100")
        .await;
    check(api, "POST", "/osds/3/reweight", Some(json!({"weight": 1000})), 400, "is not between 0 and 100").await;
    check(api, "POST", "/osds/9/out", None, 404, "osd.9 does not exist").await;
    check(api, "POST", "/osds/x/out", None, 400, "not an OSD id").await;
    check(api, "DELETE", "/osds/1", None, 409, "is up; stop it first").await;
    check(api, "DELETE", "/osds/9", None, 404, "osd.9 does not exist").await;
    check(api, "DELETE", "/osds/1?force=maybe", None, 400, "force").await;

    // Settings.
    let (status, settings) = http(api, "GET", "/config", None).await;
    assert_eq!((status, &settings["down_out_interval_s"]), (200, &json!(600)), "{settings}");
    let change = json!({"recovery_bytes_per_s_min": 1 << 20, "scrub_interval_s": 3600});
    let (status, settings) = http(api, "PATCH", "/config", Some(change)).await;
    assert_eq!(
        (status, &settings["recovery_bytes_per_s_min"], &settings["scrub_interval_s"]),
        (200, &json!(1 << 20), &json!(3600))
    );
    check(
        api,
        "PATCH",
        "/config",
        Some(json!({"recovery_in_flight_max": 0})),
        400,
        "recovery_in_flight_max 0 is not between 1",
    )
    .await;
    check(api, "PATCH", "/config", Some(json!({"down_out_interval_s": 1_u64 << 40})), 400, "down_out_interval_s").await;
    check(api, "PATCH", "/config", Some(json!({"nonsense": 1})), 400, "nonsense").await;

    // Scrub requests.
    let (status, scrub) = http(api, "POST", "/scrub", Some(json!({"pg": "1.3"}))).await;
    assert_eq!((status, &scrub["pgs_total"], &scrub["pgs_done"]), (202, &json!(1), &json!(0)), "{scrub}");
    let id = scrub["id"].as_u64().unwrap();
    let (status, again) = http(api, "GET", &format!("/scrub/{id}"), None).await;
    assert_eq!((status, &again["id"]), (200, &json!(id)), "{again}");
    let (status, all) = http(api, "POST", "/scrub", Some(json!({}))).await;
    assert_eq!((status, &all["pgs_total"], &all["id"]), (202, &json!(8), &json!(id + 1)), "{all}");
    check(api, "POST", "/scrub", Some(json!({"pg": "1.8"})), 404, "pool p has 8 PGs").await;
    check(api, "POST", "/scrub", Some(json!({"pg": "three"})), 400, "is not a pg").await;
    check(api, "POST", "/scrub", Some(json!({"pool": "p", "volume": "v"})), 400, "at most one").await;
    check(api, "POST", "/scrub", Some(json!({"volume": "v"})), 404, "no volume named").await;
    check(api, "GET", "/scrub/99", None, 404, "no scrub request 99").await;
    mon.shutdown().await;
}
