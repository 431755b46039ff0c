//! The trash through the HTTP API against the embedded store (ADR 0030): a removed volume's name
//! is free at once, it comes back under its name or another, a pool holding it cannot go, it is
//! purged by hand or when its retention ends, and a restore racing a purge wins whole or not at
//! all.

mod common;

use common::*;
use serde_json::{json, Value};

async fn create_volume(api: std::net::SocketAddr, name: &str) -> Value {
    let (status, volume) = http(api, "POST", "/volumes", Some(json!({"name": name, "size_bytes": 1 << 30}))).await;
    assert_eq!(status, 201, "{volume}");
    volume
}

async fn trash(api: std::net::SocketAddr) -> Vec<Value> {
    let (status, list) = http(api, "GET", "/trash", None).await;
    assert_eq!(status, 200, "{list}");
    list["entries"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_in_the_trash_frees_its_name_comes_back_and_goes_when_purged_or_expired() {
    let (store, _dir) = embedded_store().await;
    live_osds(store.as_ref(), 1..=3).await;
    let mon = start_mon(&store, config("mon-a"), None).await;
    let api = mon.api_address();
    let (status, _) = http(api, "POST", "/pools", Some(json!({"name": "default", "pg_count": 16}))).await;
    assert_eq!(status, 201);
    let first = create_volume(api, "db").await;

    // Removed: listed in the trash with its id, its name free.
    let (status, entry) = http(api, "DELETE", "/volumes/db", None).await;
    assert_eq!(status, 200, "{entry}");
    let first_id = format!("{:016x}", first["id"].as_u64().unwrap());
    assert_eq!((entry["id"].as_str().unwrap(), entry["name"].as_str().unwrap()), (first_id.as_str(), "db"));
    let (status, _) = http(api, "GET", "/volumes/db", None).await;
    assert_eq!(status, 404);
    assert_eq!(trash(api).await.len(), 1);
    let (_, status) = http(api, "GET", "/status", None).await;
    assert_eq!(status["trash"], json!({"volumes": 1, "provisioned_bytes": 1u64 << 30}), "{status}");
    let second = create_volume(api, "db").await;
    assert_ne!(second["id"], first["id"]);

    // Back under its name is refused while the name is taken; under another it comes back whole.
    let restore = |which: &str| format!("/trash/{which}/restore");
    check(api, "POST", &restore("db"), Some(json!({})), 409, "a volume named \"db\" exists").await;
    check(api, "POST", &restore("db"), Some(json!({"as": "bad/name"})), 400, "'/'").await;
    check(api, "POST", &restore("nosuch"), Some(json!({})), 404, "nothing in the trash").await;
    let (status, restored) = http(api, "POST", &restore("db"), Some(json!({"as": "db-old"}))).await;
    assert_eq!(status, 200, "{restored}");
    assert_eq!((&restored["name"], &restored["id"]), (&json!("db-old"), &first["id"]));
    assert!(trash(api).await.is_empty());

    // Two entries of one name: named by id only.
    for name in ["db", "db-old"] {
        let (status, _) = http(api, "DELETE", &format!("/volumes/{name}"), None).await;
        assert_eq!(status, 200);
    }
    let (status, restored) = http(api, "POST", &restore(&first_id), Some(json!({"as": "db"}))).await;
    assert_eq!((status, &restored["id"]), (200, &first["id"]));
    let (status, _) = http(api, "DELETE", "/volumes/db", None).await;
    assert_eq!(status, 200);
    check(api, "POST", &restore("db"), Some(json!({"as": "x"})), 400, "2 entries in the trash were named").await;
    check(api, "DELETE", "/pools/default", None, 409, "(in the trash)").await;
    check(api, "DELETE", "/trash", None, 400, "?expired=true").await;

    // Purged by hand: gone from the trash, its volume deleted in the background.
    let (status, purged) = http(api, "DELETE", &format!("/trash/{first_id}"), None).await;
    assert_eq!((status, purged["id"].as_str().unwrap()), (202, first_id.as_str()));
    eventually("the purged volume's records to go", || async {
        let (_, list) = http(api, "GET", "/volumes", None).await;
        list["volumes"].as_array().unwrap().is_empty().then_some(())
    })
    .await;
    assert_eq!(trash(api).await.len(), 1);

    // A restore racing a purge: one of them wins, whole.
    let second_id = format!("{:016x}", second["id"].as_u64().unwrap());
    let (restore_path, purge_path) = (restore(&second_id), format!("/trash/{second_id}"));
    let (restored, purged) =
        tokio::join!(http(api, "POST", &restore_path, Some(json!({}))), http(api, "DELETE", &purge_path, None),);
    assert!(
        (restored.0 == 200) != (purged.0 == 202),
        "exactly one of the restore ({}) and the purge ({}) wins",
        restored.1,
        purged.1
    );
    assert!(trash(api).await.is_empty());
    let (_, list) = http(api, "GET", "/volumes", None).await;
    let volumes = list["volumes"].as_array().unwrap();
    if restored.0 == 200 {
        assert_eq!(volumes.len(), 1);
        assert_eq!((&volumes[0]["name"], &volumes[0]["state"]), (&json!("db"), &json!("ready")));
        let (status, _) = http(api, "DELETE", "/volumes/db?now=true", None).await;
        assert_eq!(status, 202);
    } else {
        assert!(volumes.iter().all(|volume| volume["state"] == "deleting"), "{list}");
    }

    // Expiry: the leader purges what outlived the retention.
    let (status, _) = http(api, "PATCH", "/config", Some(json!({"trash_retention_s": 1}))).await;
    assert_eq!(status, 200);
    create_volume(api, "short").await;
    let (status, entry) = http(api, "DELETE", "/volumes/short", None).await;
    assert_eq!(status, 200);
    let retention = entry["expires_unix_ms"].as_u64().unwrap() - entry["trashed_unix_ms"].as_u64().unwrap();
    assert_eq!(retention, 1000);
    eventually("the expired entries to be purged", || async { trash(api).await.is_empty().then_some(()) }).await;
    eventually("every volume to go", || async {
        let (_, list) = http(api, "GET", "/volumes", None).await;
        list["volumes"].as_array().unwrap().is_empty().then_some(())
    })
    .await;
    let (status, _) = http(api, "DELETE", "/pools/default", None).await;
    assert_eq!(status, 200, "the pool goes once its trash is empty");
}
