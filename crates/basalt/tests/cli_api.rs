//! The admin CLI against a real `basalt mon --embedded` process: every pool, volume, osd and
//! status command, their table and JSON output, and the errors people will hit (bad sizes,
//! unknown pools, duplicate names, unsatisfiable failure domains, shrinking, an unreachable API).
//!
//! OSD records and liveness keys are written straight into the mon's embedded store over its
//! TCP front, as `basalt osd` would.

use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use cluster::records::encode;
use cluster::{keys, OsdLiveRecord, OsdRecord};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(10);

/// A running `basalt mon`; killed when dropped.
struct MonProcess {
    child: Child,
    api: SocketAddr,
    meta: SocketAddr,
    log_path: std::path::PathBuf,
}

impl Drop for MonProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl MonProcess {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

fn free_address() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("local address")
}

fn start_mon(dir: &Path) -> MonProcess {
    let (meta, api) = (free_address(), free_address());
    let log_path = dir.join("mon.log");
    let log = std::fs::File::create(&log_path).expect("mon log file");
    let child = Command::new(env!("CARGO_BIN_EXE_basalt"))
        .arg("mon")
        .arg("--embedded")
        .arg(dir.join("meta"))
        .args(["--meta-listen", &meta.to_string(), "--api", &api.to_string(), "--id", "mon-test"])
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log handle"))
        .stderr(log)
        .spawn()
        .expect("start basalt mon");
    let mut mon = MonProcess { child, api, meta, log_path };
    let started = Instant::now();
    while TcpStream::connect(api).is_err() {
        if let Ok(Some(status)) = mon.child.try_wait() {
            panic!("basalt mon exited with {status}:\n{}", mon.log());
        }
        assert!(started.elapsed() < WAIT, "basalt mon did not listen within {WAIT:?}:\n{}", mon.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    mon
}

/// Runs `basalt ARGS` against `api` (through `BASALT_API`).
fn basalt(api: SocketAddr, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_basalt"))
        .args(args)
        .env("BASALT_API", api.to_string())
        .stdin(Stdio::null())
        .output()
        .expect("run basalt")
}

/// Runs a command that must succeed; returns its stdout.
fn ok(api: SocketAddr, args: &[&str]) -> String {
    let output = basalt(api, args);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "basalt {args:?} failed: {stderr}{stdout}");
    stdout
}

/// Runs a command that must fail with one error line containing `fragment`.
fn fails(api: SocketAddr, args: &[&str], fragment: &str) {
    let output = basalt(api, args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "basalt {args:?} succeeded: {}", String::from_utf8_lossy(&output.stdout));
    assert!(stderr.contains(fragment), "basalt {args:?}: {stderr:?} lacks {fragment:?}");
    if !fragment.contains("unknown unit") {
        // Clap's usage errors have their own format; ours are one line.
        assert_eq!(stderr.trim_end().lines().count(), 1, "basalt {args:?}: {stderr:?}");
        assert!(stderr.starts_with("basalt: error: "), "{stderr:?}");
    }
}

fn json(api: SocketAddr, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    let stdout = ok(api, &args);
    serde_json::from_str(&stdout).unwrap_or_else(|error| panic!("basalt {args:?} printed no JSON ({error}): {stdout}"))
}

fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < WAIT, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Registers OSDs 1 to 3 on hosts host1 to host3 of one rack, and starts them.
fn register_osds(meta: SocketAddr) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let store = cluster_watch::connect(&format!("basalt://{meta}")).await.expect("connect to the mon's store");
        for id in 1..=3u32 {
            let osd = OsdRecord {
                version: 1,
                id,
                host: format!("host{id}"),
                rack: "rack1".into(),
                tags: BTreeSet::from(["ssd".to_string()]),
                weight: 1.0,
                capacity_bytes: 1 << 40,
                out: false,
                auto_out: false,
                down_mark: None,
            };
            store.put(&keys::osd(id), encode(&osd), None).await.expect("put an osd");
            let live = OsdLiveRecord {
                version: 1,
                address: format!("127.0.0.1:{}", 6800 + id),
                incarnation: 1,
                local: None,
                lease_ttl_s: 3,
            };
            store.put(&keys::osd_live(id), encode(&live), None).await.expect("put a liveness key");
        }
    });
}

#[test]
fn every_admin_command_against_a_real_mon() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut mon = start_mon(dir.path());
    let api = mon.api;

    let status = ok(api, &["status"]);
    assert!(status.contains("osds      0 up of 0"), "{status}");
    assert!(status.contains("leader    mon-test") || status.contains("leader    none"), "{status}");
    let cluster = json(api, &["status"]);
    assert_eq!(cluster["cluster_id"].as_str().map(str::len), Some(32));
    fails(api, &["pool", "create", "rbd"], "needs 3 hosts for 3 replicas, but the registered osds span only 0 hosts");

    register_osds(mon.meta);
    let created = ok(api, &["pool", "create", "rbd", "--pgs", "32", "--tags", "ssd"]);
    assert!(
        created.contains("created pool rbd (id 1): 3 replicas, min_size 2, 32 PGs, failure domain host, tags ssd"),
        "{created}"
    );
    fails(api, &["pool", "create", "rbd"], "pool \"rbd\" already exists");
    fails(api, &["pool", "create", "wide", "--failure-domain", "rack"], "span only 1 rack");
    fails(api, &["pool", "create", "big", "--replicas", "9"], "replicas is 9; it must be 1 to 8");
    fails(
        api,
        &["pool", "create", "x", "--failure-domain", "row"],
        "failure_domain \"row\" is not one of osd, host, rack",
    );
    // The OSDs here are records and liveness keys only: no primary reports, so the PGs are
    // placed (none inactive) and their states unknown.
    eventually("all 32 PGs placed", || {
        let pgs = &json(api, &["status"])["pgs"];
        pgs["total"] == 32 && pgs["inactive"] == 0 && pgs["unknown"] == 32
    });

    let pools = ok(api, &["pool", "ls"]);
    let header = pools.lines().next().unwrap();
    assert!(header.starts_with("ID  NAME  REPLICAS  MIN_SIZE  PGS  DOMAIN  TAGS  ACTIVE"), "{pools}");
    assert!(
        pools
            .lines()
            .nth(1)
            .unwrap()
            .split_whitespace()
            .eq(["1", "rbd", "3", "2", "32", "host", "ssd", "0", "0", "0", "0"]),
        "{pools}"
    );
    assert_eq!(json(api, &["pool", "ls"])["pools"][0]["table_epoch"], 1);

    let osds = ok(api, &["osd", "ls"]);
    assert_eq!(osds.lines().filter(|line| line.contains(" up ")).count(), 3, "{osds}");
    assert_eq!(
        json(api, &["osd", "ls"])["osds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|osd| osd["pgs"].as_u64().unwrap())
            .sum::<u64>(),
        96
    );
    let tree = ok(api, &["osd", "tree"]);
    assert!(tree.contains("rack rack1") && tree.contains("  host host2") && tree.contains("    osd.2"), "{tree}");
    assert_eq!(json(api, &["osd", "tree"])["racks"][0]["hosts"].as_array().unwrap().len(), 3);

    // Volumes.
    let created = ok(api, &["volume", "create", "db", "--size", "1G"]);
    assert!(created.contains("created volume db (1 GiB) in pool rbd"), "{created}");
    fails(api, &["volume", "create", "db", "--size", "1G"], "volume \"db\" already exists");
    fails(api, &["volume", "create", "x", "--size", "12Q"], "'12Q' has an unknown unit 'Q'");
    fails(api, &["volume", "create", "x", "--size", "4097"], "must be greater than 0 and a multiple of 4096 bytes");
    fails(api, &["volume", "create", "x", "--size", "1G", "--pool", "nope"], "pool \"nope\" does not exist");
    let info = ok(api, &["volume", "info", "db"]);
    assert!(info.contains("size         1 GiB (1073741824 bytes)") && info.contains("state        ready"), "{info}");
    let resized = ok(api, &["volume", "resize", "db", "--size", "2G"]);
    assert!(resized.contains("volume db is now 2 GiB"), "{resized}");
    fails(api, &["volume", "resize", "db", "--size", "1G"], "shrinking to 1073741824 bytes is not supported");
    fails(api, &["volume", "info", "nope"], "volume \"nope\" does not exist");
    let volumes = ok(api, &["volume", "ls"]);
    assert!(volumes.lines().nth(1).unwrap().starts_with("db    rbd   2 GiB  ready"), "{volumes}");
    assert_eq!(json(api, &["volume", "info", "db"])["size_bytes"], 2u64 << 30);

    fails(api, &["pool", "rm", "rbd"], "pool \"rbd\" still holds 1 volume (db); delete them first");
    let removed = ok(api, &["volume", "rm", "db", "--now", "--no-wait"]);
    assert!(removed.contains("volume db is being deleted"), "{removed}");
    // The OSD records here have no OSD process behind them, so the objects cannot be removed:
    // the volume stays `deleting` (its removal with real OSDs is in tests/cluster.rs) and keeps
    // its pool.
    let info = ok(api, &["volume", "info", "db"]);
    assert!(info.contains("state        deleting"), "{info}");
    fails(api, &["pool", "rm", "rbd"], "pool \"rbd\" still holds 1 volume (db); delete them first");

    let status = ok(api, &["status"]);
    assert!(status.contains("leader    mon-test ("), "{status}");
    assert!(
        status.contains("osds      3 up of 3") && status.contains("capacity  3 TiB (used: not reported)"),
        "{status}"
    );

    // --api wins over BASALT_API; an address nobody serves is named.
    let closed = free_address();
    fails(api, &["status", "--api", &closed.to_string()], &format!("cannot reach the basalt API at http://{closed}"));
    assert!(ok(closed, &["pool", "ls", "--api", &api.to_string()]).starts_with("ID  NAME"));
    // The data-path commands find the API the same way, and ask it for the metadata store:
    // through BASALT_API the mon is reached and the store answers that the volume is unknown.
    fails(api, &["bench", "--volume", "no-such-volume", "--runtime", "1"], "no-such-volume");
    let unreachable = format!("cannot reach the basalt API at http://{closed}");
    let closed_text = closed.to_string();
    for command in [&["bench", "--volume", "v", "--runtime", "1"][..], &["nbd", "--listen", "127.0.0.1:0"][..]] {
        fails(closed, command, &unreachable);
        let mut with_flag = command.to_vec();
        with_flag.extend(["--api", closed_text.as_str()]);
        fails(api, &with_flag, &unreachable);
    }

    // SIGTERM stops the mon cleanly.
    // SAFETY: kill(2) on our own child's pid has no memory effects.
    let signalled = unsafe { libc::kill(mon.child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(signalled, 0);
    let started = Instant::now();
    let exit = loop {
        if let Some(status) = mon.child.try_wait().expect("wait for the mon") {
            break status;
        }
        assert!(started.elapsed() < WAIT, "basalt mon did not stop on SIGTERM:\n{}", mon.log());
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(exit.success(), "basalt mon exited with {exit}:\n{}", mon.log());
    // Removal of the objects was tried through the data path, not skipped.
    assert!(!mon.log().contains("objects are left for a later scrub"), "{}", mon.log());
}
