//! What the mon tests share: a store in a temporary directory, mons with short timings, OSD
//! records written straight into the store, and a small HTTP client for the API.

#![allow(dead_code)] // Each test binary uses a different part.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use cluster::records::{decode, encode};
use cluster::{keys, OsdLiveRecord, OsdRecord, PgTableRecord};
use meta::MetaStore;
use meta_embedded::EmbeddedMetaStore;
use mon::{Mon, MonConfig, VolumeReaper};
use serde_json::Value;
use tempfile::TempDir;
use tokio::net::TcpListener;

/// Long enough for a loaded two-core machine, short enough to fail fast.
pub const WAIT: Duration = Duration::from_secs(10);

pub async fn embedded_store() -> (Arc<dyn MetaStore>, TempDir) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = EmbeddedMetaStore::open(dir.path().join("meta")).await.expect("open the embedded store");
    (Arc::new(store), dir)
}

pub fn config(mon_id: &str) -> MonConfig {
    let mut config = MonConfig::new(mon_id, "basalt://127.0.0.1:1");
    config.lease_ttl = Duration::from_secs(2);
    config.keep_alive_interval = Duration::from_millis(300);
    config.liveness_grace = Duration::ZERO;
    config
}

pub async fn start_mon(store: &Arc<dyn MetaStore>, config: MonConfig, reaper: Option<Arc<dyn VolumeReaper>>) -> Mon {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the API listener");
    Mon::start(store.clone(), config, listener, reaper).await.expect("start the mon")
}

/// Polls `check` until it returns `Some`, failing after [`WAIT`] with `what`.
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub async fn put_osd(store: &dyn MetaStore, id: u32, host: &str, rack: &str, tags: &[&str]) {
    let record = OsdRecord {
        version: 1,
        id,
        host: host.into(),
        rack: rack.into(),
        tags: tags.iter().map(|tag| tag.to_string()).collect::<BTreeSet<_>>(),
        weight: 1.0,
        capacity_bytes: 1 << 40,
        out: false,
        auto_out: false,
        down_mark: None,
    };
    store.put(&keys::osd(id), encode(&record), None).await.expect("put an osd record");
}

pub async fn set_live(store: &dyn MetaStore, id: u32, live: bool) {
    if live {
        let record = OsdLiveRecord {
            version: 1,
            address: format!("127.0.0.1:{}", 6800 + id),
            incarnation: 1,
            local: None,
            lease_ttl_s: 3,
        };
        store.put(&keys::osd_live(id), encode(&record), None).await.expect("put a liveness key");
    } else {
        store.delete(&keys::osd_live(id)).await.expect("delete a liveness key");
    }
}

/// Registers and starts OSDs `ids`, each on its own host.
pub async fn live_osds(store: &dyn MetaStore, ids: impl IntoIterator<Item = u32>) {
    for id in ids {
        put_osd(store, id, &format!("host{id}"), "rack1", &[]).await;
        set_live(store, id, true).await;
    }
}

pub async fn pg_table(store: &dyn MetaStore, pool: u32) -> Option<PgTableRecord> {
    let key = keys::pg_table(pool);
    let kv = store.get(&key).await.expect("get a PG table")?;
    Some(decode(&key, &kv.value).expect("the PG table decodes"))
}

/// Waits for pool `pool`'s table to satisfy `accept`.
pub async fn wait_for_table(
    store: &dyn MetaStore,
    pool: u32,
    what: &str,
    accept: impl Fn(&PgTableRecord) -> bool,
) -> PgTableRecord {
    eventually(what, || async { pg_table(store, pool).await.filter(|table| accept(table)) }).await
}

/// A blocking HTTP exchange with the API, run off the async threads.
pub async fn http(address: std::net::SocketAddr, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let url = format!("http://{address}/api/v1{path}");
    let method = method.to_string();
    tokio::task::spawn_blocking(move || {
        let http: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .build()
            .into();
        let body_text = body.map(|body| body.to_string());
        let result = match (method.as_str(), body_text) {
            ("GET", _) => http.get(&url).call(),
            ("DELETE", _) => http.delete(&url).call(),
            ("POST", Some(text)) => http.post(&url).content_type("application/json").send(text.as_bytes()),
            ("PATCH", Some(text)) => http.patch(&url).content_type("application/json").send(text.as_bytes()),
            ("POST", None) => http.post(&url).send_empty(),
            (other, _) => panic!("unsupported method {other}"),
        };
        let mut response = result.unwrap_or_else(|error| panic!("{method} {url}: {error}"));
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().expect("read the response body");
        let value = serde_json::from_str(&text).unwrap_or_else(|error| panic!("{method} {url}: {error}: {text:?}"));
        (status, value)
    })
    .await
    .expect("the HTTP task")
}

/// Expects `status` and an error message containing `fragment`.
pub async fn check(
    address: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: Option<Value>,
    status: u16,
    fragment: &str,
) {
    let (got, answer) = http(address, method, path, body.clone()).await;
    let message = answer["error"].as_str().unwrap_or_else(|| panic!("{method} {path} {body:?}: no error in {answer}"));
    assert_eq!(got, status, "{method} {path} {body:?}: {message}");
    assert!(message.contains(fragment), "{method} {path} {body:?}: {message:?} lacks {fragment:?}");
}
