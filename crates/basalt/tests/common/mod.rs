//! What the multi-process tests share: a `basalt mon` on its embedded store or on a real etcd,
//! and the OSDs it lists as up.
// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

pub mod cluster;

use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use testkit::{wait_until, Etcd, Proc};

pub const BASALT: &str = env!("CARGO_BIN_EXE_basalt");

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    /// The mon's embedded store, served on 127.0.0.1:2390.
    Embedded,
    /// A real etcd on 127.0.0.1:2379.
    Etcd,
}

/// A running mon and its store.
pub struct Mon {
    pub proc: Proc,
    /// Kept for as long as the mon runs (dropping it stops etcd).
    pub etcd: Option<Etcd>,
    /// What OSDs and gateways pass as `--etcd`.
    pub meta_url: String,
}

/// Starts `basalt mon` on `store` (kept in `dir`), serving its API on `api`, and waits for the API.
pub fn start_mon(dir: &Path, api: &str, store: Store) -> Mon {
    let mut command = Command::new(BASALT);
    command.args(["mon", "--api", api, "--id", "mon-a"]);
    let (etcd, meta_url) = match store {
        Store::Embedded => {
            command.args(["--meta-listen", "127.0.0.1:2390", "--embedded", dir.join("meta").to_str().expect("utf-8")]);
            (None, "basalt://127.0.0.1:2390".to_string())
        }
        Store::Etcd => {
            let etcd = Etcd::start("127.0.0.1", 2379, 2380, dir);
            command.args(["--etcd", "http://127.0.0.1:2379"]);
            (Some(etcd), "http://127.0.0.1:2379".to_string())
        }
    };
    let mut proc = Proc::spawn("mon", dir, &mut command);
    wait_until(Duration::from_secs(30), "the mon API", || {
        proc.assert_running();
        TcpStream::connect(api).ok()
    });
    Mon { proc, etcd, meta_url }
}

/// The ids of the OSDs the mon at `api` lists as up.
pub fn up_osds(api: &str) -> Vec<u64> {
    let listing: serde_json::Value =
        serde_json::from_str(&testkit::run_ok(BASALT, &["osd", "ls", "--json", "--api", api])).expect("json");
    let osds = listing["osds"].as_array().expect("an osd list");
    osds.iter()
        .filter(|osd| osd["up"] == serde_json::Value::Bool(true))
        .map(|osd| osd["id"].as_u64().expect("an id"))
        .collect()
}
