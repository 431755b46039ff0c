//! The conformance suite against a real etcd, plus what only etcd can show: a watch that ends
//! with an explicit error when the server dies, and a client that carries on after a restart.
//!
//! Each test starts its own `etcd` (Debian's `etcd-server` package; `scripts/test.sh` installs
//! it) on 127.0.0.1 with free ports and a temporary data directory, and kills it at the end.
//! A missing binary fails the test: skipping would let a broken backend pass unnoticed.
//! `BASALT_ETCD_BIN` overrides the binary.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use meta::{MetaError, MetaStore};
use meta_etcd::EtcdMetaStore;
use tempfile::TempDir;

/// A running etcd; killed when dropped.
struct Etcd {
    child: Child,
    dir: TempDir,
    client_port: u16,
    peer_port: u16,
}

impl Etcd {
    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    fn log(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
    }
}

fn etcd_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("BASALT_ETCD_BIN") {
        return PathBuf::from(path);
    }
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join("etcd"))
        .find(|candidate| candidate.is_file());
    found.unwrap_or_else(|| {
        panic!(
            "the etcd binary was not found in PATH: install Debian's etcd-server package \
             (scripts/test.sh does) or set BASALT_ETCD_BIN"
        )
    })
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("local address").port()
}

fn spawn_etcd(dir: &TempDir, client_port: u16, peer_port: u16) -> Child {
    let client_url = format!("http://127.0.0.1:{client_port}");
    let peer_url = format!("http://127.0.0.1:{peer_port}");
    let log =
        std::fs::OpenOptions::new().create(true).append(true).open(dir.path().join("etcd.log")).expect("etcd log file");
    Command::new(etcd_binary())
        .args(["--name", "t", "--data-dir"])
        .arg(dir.path().join("data"))
        .args(["--listen-client-urls", &client_url, "--advertise-client-urls", &client_url])
        .args(["--listen-peer-urls", &peer_url, "--initial-advertise-peer-urls", &peer_url])
        .args(["--initial-cluster", &format!("t={peer_url}")])
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log handle"))
        .stderr(log)
        .spawn()
        .unwrap_or_else(|error| panic!("starting {}: {error}", etcd_binary().display()))
}

/// Waits until etcd answers, failing with its log if it exits or takes too long.
async fn wait_healthy(etcd: &mut Etcd) -> EtcdMetaStore {
    let start = Instant::now();
    loop {
        if let Ok(store) = EtcdMetaStore::connect(&[etcd.endpoint()]).await {
            return store;
        }
        if let Ok(Some(status)) = etcd.child.try_wait() {
            panic!("etcd exited with {status} while starting; log:\n{}", etcd.log());
        }
        assert!(start.elapsed() < Duration::from_secs(30), "etcd not healthy within 30 s; log:\n{}", etcd.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn start_etcd() -> (EtcdMetaStore, Etcd) {
    let binary = etcd_binary();
    let dir = tempfile::tempdir().expect("temporary directory");
    let (client_port, peer_port) = (free_port(), free_port());
    let child = spawn_etcd(&dir, client_port, peer_port);
    let mut etcd = Etcd { child, dir, client_port, peer_port };
    let store = wait_healthy(&mut etcd).await;
    assert!(binary.is_file());
    (store, etcd)
}

async fn etcd_harness() -> (Arc<dyn MetaStore>, Etcd) {
    let (store, etcd) = start_etcd().await;
    (Arc::new(store), etcd)
}

mod etcd {
    meta::conformance_tests!(super::etcd_harness);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_reports_a_dead_server_and_the_client_recovers_after_a_restart() {
    let (store, mut etcd) = start_etcd().await;
    store.put("/d/a", b"1".to_vec(), None).await.expect("put");
    let mut watch = store.watch("/d/", None).await.expect("watch");
    etcd.kill();
    let started = Instant::now();
    match tokio::time::timeout(Duration::from_secs(20), watch.next()).await {
        Ok(Some(Err(MetaError::Unavailable { endpoint, .. }))) => assert_eq!(endpoint, etcd.endpoint()),
        other => panic!("a watch on a dead etcd gave {other:?}"),
    }
    eprintln!("watch noticed the dead etcd after {:?}", started.elapsed());
    assert!(watch.next().await.is_none());
    match store.get("/d/a").await {
        Err(MetaError::Unavailable { endpoint, reason }) => {
            assert_eq!(endpoint, etcd.endpoint());
            eprintln!("get on a dead etcd: {reason}");
        }
        other => panic!("get on a dead etcd gave {other:?}"),
    }

    // The same client works again once etcd is back (same data, same ports).
    etcd.child = spawn_etcd(&etcd.dir, etcd.client_port, etcd.peer_port);
    let _ = wait_healthy(&mut etcd).await;
    let start = Instant::now();
    let listing = loop {
        match store.list_with_revision("/d/").await {
            Ok(listing) => break listing,
            Err(error) => {
                assert!(start.elapsed() < Duration::from_secs(20), "the old client never recovered: {error}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert_eq!(listing.kvs.len(), 1);
    let mut watch = store.watch("/d/", Some(listing.revision + 1)).await.expect("watch after the restart");
    let revision = store.put("/d/b", b"2".to_vec(), None).await.expect("put after the restart");
    let event = tokio::time::timeout(Duration::from_secs(10), watch.next()).await.expect("event").expect("item");
    assert_eq!(event.expect("event").revision, revision);
}

#[tokio::test]
async fn connecting_to_nothing_names_the_endpoint() {
    let endpoint = format!("http://127.0.0.1:{}", free_port());
    match EtcdMetaStore::connect(std::slice::from_ref(&endpoint)).await {
        Err(error @ MetaError::Unavailable { .. }) => {
            let message = error.to_string();
            assert!(message.contains(&endpoint), "{message}");
        }
        Err(other) => panic!("unexpected error {other}"),
        Ok(_) => panic!("connected to a closed port"),
    }
}
