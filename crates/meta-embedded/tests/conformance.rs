//! The conformance suite against the embedded store in process, the same store in memory, and
//! the store served over 127.0.0.1 to a `RemoteMetaStore`.

use std::sync::Arc;

use meta::MetaStore;
use meta_embedded::{serve, EmbeddedMetaStore, EmbeddedOptions, RemoteMetaStore};
use tempfile::TempDir;

/// A threshold small enough that the suite compacts the log into snapshots many times.
fn options() -> EmbeddedOptions {
    EmbeddedOptions { log_compaction_threshold_bytes: 16 << 10, ..EmbeddedOptions::default() }
}

async fn embedded_harness() -> (Arc<dyn MetaStore>, TempDir) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = EmbeddedMetaStore::open_with(dir.path(), options()).await.expect("open the embedded store");
    (Arc::new(store), dir)
}

async fn memory_harness() -> (Arc<dyn MetaStore>, ()) {
    (Arc::new(EmbeddedMetaStore::in_memory(options())), ())
}

/// Keeps the served store's directory and stops the server when dropped.
struct Served {
    _dir: TempDir,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn remote_harness() -> (Arc<dyn MetaStore>, Served) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = EmbeddedMetaStore::open_with(dir.path(), options()).await.expect("open the embedded store");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("local address").to_string();
    let server = tokio::spawn(serve(Arc::new(store), listener));
    let client = RemoteMetaStore::connect(&address).await.expect("connect");
    (Arc::new(client), Served { _dir: dir, server })
}

mod embedded {
    meta::conformance_tests!(super::embedded_harness);
}

mod memory {
    meta::conformance_tests!(super::memory_harness);
}

mod remote {
    meta::conformance_tests!(super::remote_harness);
}
