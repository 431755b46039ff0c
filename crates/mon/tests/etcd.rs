//! The mon on a real etcd: election, the cluster record, a pool through the API and its table
//! following an OSD that stops, and a leader handover.
//!
//! The test starts its own `etcd` (Debian's `etcd-server` package; `scripts/test.sh` installs
//! it) on 127.0.0.1 with free ports and a temporary data directory, as `meta-etcd`'s tests do.
//! A missing binary fails the test. `BASALT_ETCD_BIN` overrides the binary.

mod common;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::keys;
use common::*;
use meta::MetaStore;
use meta_etcd::EtcdMetaStore;
use mon::Role;
use serde_json::json;
use tempfile::TempDir;

/// A running etcd; killed when dropped.
struct Etcd {
    child: Child,
    dir: TempDir,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn etcd_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("BASALT_ETCD_BIN") {
        return PathBuf::from(path);
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join("etcd"))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!("the etcd binary was not found in PATH: install Debian's etcd-server package or set BASALT_ETCD_BIN")
        })
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("local address").port()
}

async fn start_etcd() -> (Arc<dyn MetaStore>, String, Etcd) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let client_url = format!("http://127.0.0.1:{}", free_port());
    let peer_url = format!("http://127.0.0.1:{}", free_port());
    let log = std::fs::File::create(dir.path().join("etcd.log")).expect("etcd log file");
    let child = Command::new(etcd_binary())
        .args(["--name", "t", "--data-dir"])
        .arg(dir.path().join("data"))
        .args(["--listen-client-urls", &client_url, "--advertise-client-urls", &client_url])
        .args(["--listen-peer-urls", &peer_url, "--initial-advertise-peer-urls", &peer_url])
        .args(["--initial-cluster", &format!("t={peer_url}")])
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log handle"))
        .stderr(log)
        .spawn()
        .expect("start etcd");
    let mut etcd = Etcd { child, dir };
    let started = Instant::now();
    loop {
        if let Ok(store) = EtcdMetaStore::connect(std::slice::from_ref(&client_url)).await {
            if store.get("/probe").await.is_ok() {
                return (Arc::new(store), client_url, etcd);
            }
        }
        if let Ok(Some(status)) = etcd.child.try_wait() {
            let log = std::fs::read_to_string(etcd.dir.path().join("etcd.log")).unwrap_or_default();
            panic!("etcd exited with {status}; log:\n{log}");
        }
        assert!(started.elapsed() < Duration::from_secs(30), "etcd did not answer within 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mon_works_on_etcd() {
    let (store, url, _etcd) = start_etcd().await;
    live_osds(store.as_ref(), 1..=4).await;
    let mon_a = start_mon(&store, config("mon-a"), None).await;
    eventually("mon-a to lead", || async { (mon_a.role() == Role::Leader).then_some(()) }).await;
    let mon_b = start_mon(&store, config("mon-b"), None).await;

    let (status, body) = http(mon_b.api_address(), "GET", "/cluster", None).await;
    assert_eq!(status, 200);
    assert_eq!(body["leader"]["mon"], "mon-a", "{body}");
    let (status, pool) =
        http(mon_b.api_address(), "POST", "/pools", Some(json!({"name": "rbd", "pg_count": 16}))).await;
    assert_eq!(status, 201, "{pool}");
    let first = wait_for_table(store.as_ref(), 1, "the first table", |_| true).await;
    assert!(first.pgs.iter().all(|(epoch, members)| *epoch == 1 && members.len() == 3));

    set_live(store.as_ref(), 4, false).await;
    let second = wait_for_table(store.as_ref(), 1, "the table without osd 4", |t| t.table_epoch == 2).await;
    for ((old_epoch, old), (new_epoch, new)) in first.pgs.iter().zip(&second.pgs) {
        assert_eq!(*new_epoch, if old.contains(&4) { old_epoch + 1 } else { *old_epoch });
        assert!(!new.contains(&4));
    }

    let leader = store.get(keys::MON_LEADER).await.unwrap().expect("a leader key");
    store.lease_revoke(leader.lease.expect("leased")).await.unwrap();
    eventually("mon-b to lead", || async { (mon_b.role() == Role::Leader).then_some(()) }).await;
    set_live(store.as_ref(), 4, true).await;
    wait_for_table(store.as_ref(), 1, "the table with osd 4", |t| t.table_epoch == 3).await;
    assert!(url.starts_with("http://"));
    mon_b.shutdown().await;
    mon_a.shutdown().await;
}
