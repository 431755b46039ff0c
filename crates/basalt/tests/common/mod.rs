//! What the multi-process tests share: a `basalt mon` on its embedded store, and the OSDs it
//! lists as up.

use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use testkit::{wait_until, Proc};

pub const BASALT: &str = env!("CARGO_BIN_EXE_basalt");

/// Starts `basalt mon` on an embedded store in `dir`, serving its store on 127.0.0.1:2390 and
/// its API on `api`, and waits for the API.
pub fn start_mon(dir: &Path, api: &str) -> Proc {
    let mut mon = Proc::spawn(
        "mon",
        dir,
        Command::new(BASALT)
            .args(["mon", "--api", api, "--id", "mon-a", "--meta-listen", "127.0.0.1:2390"])
            .args(["--embedded", dir.join("meta").to_str().expect("utf-8")]),
    );
    wait_until(Duration::from_secs(30), "the mon API", || {
        mon.assert_running();
        TcpStream::connect(api).ok()
    });
    mon
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
