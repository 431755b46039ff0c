//! `basalt osd` as a real process against an embedded metadata store served by the test:
//! registration (an id allocated once and kept across restarts), a clean stop on SIGTERM that
//! removes the liveness key, and a SIGKILL that leaves the key until its lease expires.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::records::{decode, encode, FORMAT_VERSION};
use cluster::{keys, ClusterRecord, Counter, OsdLiveRecord, OsdRecord};
use meta::MetaStore;
use tokio::runtime::Runtime;

const BASALT: &str = env!("CARGO_BIN_EXE_basalt");
const LEASE_TTL_S: u64 = 2;

struct Store {
    store: Arc<dyn MetaStore>,
    url: String,
    runtime: Runtime,
    _dir: tempfile::TempDir,
}

impl Store {
    fn serve() -> Store {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let (store, address) = runtime.block_on(async {
            let store: Arc<dyn MetaStore> =
                Arc::new(meta_embedded::EmbeddedMetaStore::open(dir.path().join("meta")).await.unwrap());
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let address = listener.local_addr().unwrap();
            tokio::spawn(meta_embedded::serve(store.clone(), listener));
            (store, address)
        });
        let record = ClusterRecord { version: FORMAT_VERSION, cluster_id: "test".into(), object_size_bytes: 128 << 10 };
        runtime.block_on(store.put(keys::CLUSTER, encode(&record), None)).unwrap();
        Store { store, url: format!("basalt://{address}"), runtime, _dir: dir }
    }

    fn get<T: serde::de::DeserializeOwned>(&self, key: &str) -> Option<T> {
        let kv = self.runtime.block_on(self.store.get(key)).unwrap()?;
        Some(decode(key, &kv.value).unwrap())
    }

    fn wait_for<T>(&self, what: &str, timeout: Duration, mut check: impl FnMut(&Store) -> Option<T>) -> T {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(value) = check(self) {
                return value;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A running `basalt osd`; killed if the test fails.
struct Osd {
    child: Child,
    /// Kept open: the daemon must not find its stdout closed.
    _stdout: BufReader<ChildStdout>,
    /// The line `osd.N serving on ADDR (incarnation I)`.
    ready_line: String,
}

impl Osd {
    fn start(store: &Store, data: &Path) -> Osd {
        Osd::start_with_lease(store, data, LEASE_TTL_S)
    }

    fn start_with_lease(store: &Store, data: &Path, lease_ttl_s: u64) -> Osd {
        let mut child = Command::new(BASALT)
            .args(["osd", "--etcd", &store.url, "--listen", "127.0.0.1:0", "--host", "node-a", "--tags", "ssd,fast"])
            .args(["--lease-ttl", &lease_ttl_s.to_string(), "--data"])
            .arg(data)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start basalt osd");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut stdout = BufReader::new(stdout);
        let mut ready_line = String::new();
        stdout.read_line(&mut ready_line).expect("read the osd's stdout");
        assert!(ready_line.contains("serving on"), "the osd did not start: {ready_line:?}");
        Osd { child, _stdout: stdout, ready_line }
    }

    fn signal(&self, signal: libc::c_int) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("pid fits");
        // SAFETY: kill only sends a signal to our own child.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    }

    /// Sends `signal` and waits up to `timeout` for the process to exit.
    fn stop(mut self, signal: libc::c_int, timeout: Duration) -> (std::process::ExitStatus, Duration) {
        let started = Instant::now();
        self.signal(signal);
        loop {
            if let Some(status) = self.child.try_wait().expect("poll the osd") {
                return (status, started.elapsed());
            }
            assert!(started.elapsed() < timeout, "the osd did not exit within {timeout:?} of signal {signal}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Osd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn init(data: &Path) {
    let output = Command::new(BASALT)
        .args(["osd", "init", "--size", "64M", "--data"])
        .arg(data)
        .output()
        .expect("run basalt osd init");
    assert!(output.status.success(), "osd init failed: {}", String::from_utf8_lossy(&output.stderr));
}

fn data_path(store: &Store, name: &str) -> PathBuf {
    store._dir.path().join(name)
}

#[test]
fn osd_registers_keeps_its_id_and_stops_cleanly_or_expires() {
    let store = Store::serve();
    let data = data_path(&store, "osd.img");
    init(&data);

    let osd = Osd::start(&store, &data);
    assert!(osd.ready_line.starts_with("osd.1 serving on 127.0.0.1:"), "{}", osd.ready_line);
    let record: OsdRecord = store.get(&keys::osd(1)).expect("the osd record");
    assert_eq!((record.id, record.host.as_str(), record.rack.as_str()), (1, "node-a", "default"));
    assert_eq!(record.tags.iter().map(String::as_str).collect::<Vec<_>>(), ["fast", "ssd"]);
    assert!(record.capacity_bytes > 0 && record.capacity_bytes < 64 << 20, "{record:?}");
    let live: OsdLiveRecord = store.get(&keys::osd_live(1)).expect("the liveness key");
    assert!(osd.ready_line.contains(&live.address), "{} vs {live:?}", osd.ready_line);
    let counter: Counter = store.get(keys::OSD_ID_COUNTER).expect("the id counter");
    assert_eq!(counter.next, 2);

    // SIGTERM: a clean stop within 5 s that takes the liveness key with it.
    let (status, elapsed) = osd.stop(libc::SIGTERM, Duration::from_secs(5));
    assert!(status.success(), "exit status {status} after SIGTERM");
    assert!(elapsed < Duration::from_secs(5));
    assert!(store.get::<OsdLiveRecord>(&keys::osd_live(1)).is_none(), "the liveness key outlived a clean stop");

    // A restart keeps the id; the weight an admin set stays.
    let mut weighted = record.clone();
    weighted.weight = 0.5;
    store.runtime.block_on(store.store.put(&keys::osd(1), encode(&weighted), None)).unwrap();
    let osd = Osd::start(&store, &data);
    assert!(osd.ready_line.starts_with("osd.1 "), "{}", osd.ready_line);
    let again: OsdLiveRecord = store.get(&keys::osd_live(1)).expect("registered again");
    assert_ne!(again.incarnation, live.incarnation);
    assert_eq!(store.get::<OsdRecord>(&keys::osd(1)).unwrap().weight, 0.5);
    assert_eq!(store.get::<Counter>(keys::OSD_ID_COUNTER).unwrap().next, 2, "no second id was allocated");

    // SIGKILL: the key stays until the lease expires.
    let (_, _) = osd.stop(libc::SIGKILL, Duration::from_secs(5));
    let killed_at = Instant::now();
    assert!(store.get::<OsdLiveRecord>(&keys::osd_live(1)).is_some(), "the key went with the process");
    store.wait_for("the liveness key to expire", Duration::from_secs(LEASE_TTL_S * 5), |store| {
        store.get::<OsdLiveRecord>(&keys::osd_live(1)).is_none().then_some(())
    });
    assert!(killed_at.elapsed() >= Duration::from_millis(LEASE_TTL_S * 1000 / 2), "expired too early");

    // A restart right after a SIGKILL waits for the old key, then registers.
    let osd = Osd::start(&store, &data);
    let (status, _) = osd.stop(libc::SIGKILL, Duration::from_secs(5));
    assert!(!status.success());
    let osd = Osd::start(&store, &data);
    assert!(osd.ready_line.starts_with("osd.1 "), "{}", osd.ready_line);
    let (status, _) = osd.stop(libc::SIGINT, Duration::from_secs(5));
    assert!(status.success(), "exit status {status} after SIGINT");
}

#[test]
fn osd_refuses_a_drive_that_was_not_formatted() {
    let store = Store::serve();
    let data = data_path(&store, "blank.img");
    std::fs::write(&data, vec![0u8; 1 << 20]).unwrap();
    let output = Command::new(BASALT)
        .args(["osd", "--etcd", &store.url, "--listen", "127.0.0.1:0", "--data"])
        .arg(&data)
        .output()
        .expect("run basalt osd");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("is not a Basalt engine") && stderr.contains("basalt osd init"), "{stderr}");
}

/// `POST /api/v1/osds/{osd}/down-report` on the mon at `api`; the answer's JSON.
fn report_down(api: std::net::SocketAddr, osd: u32, incarnation: i64) -> serde_json::Value {
    use std::io::{Read, Write};
    let body = format!("{{\"incarnation\": {incarnation}}}");
    let mut stream = std::net::TcpStream::connect(api).expect("connect to the mon");
    write!(
        stream,
        "POST /api/v1/osds/{osd}/down-report HTTP/1.1\r\nHost: {api}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read the mon's answer");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let json = response.split("\r\n\r\n").nth(1).expect("a body");
    serde_json::from_str(json).unwrap_or_else(|error| panic!("{error}: {json}"))
}

#[test]
fn a_reported_osd_that_refuses_the_mons_connect_loses_its_lease_at_once() {
    let store = Store::serve();
    let data = data_path(&store, "osd.img");
    init(&data);
    // A lease far longer than the test: only the report can take the key away in time.
    let osd = Osd::start_with_lease(&store, &data, 60);
    let (mon, api) = store.runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let api = listener.local_addr().unwrap();
        let mon = mon::Mon::start(store.store.clone(), mon::MonConfig::new("t", store.url.clone()), listener, None)
            .await
            .expect("start the mon");
        (mon, api)
    });
    let live: OsdLiveRecord = store.get(&keys::osd_live(1)).expect("the liveness key");

    // A living OSD, or a report about another incarnation, keeps its lease.
    let answer = report_down(api, 1, live.incarnation);
    assert_eq!((answer["down"].as_bool(), answer["revoked"].as_bool()), (Some(false), Some(false)), "{answer}");
    assert!(answer["reason"].as_str().unwrap().contains("accepts connections"), "{answer}");
    let (_, _) = osd.stop(libc::SIGKILL, Duration::from_secs(5));
    let answer = report_down(api, 1, live.incarnation + 1);
    assert_eq!(answer["revoked"].as_bool(), Some(false), "{answer}");
    assert!(answer["reason"].as_str().unwrap().contains("restarted since"), "{answer}");
    assert!(store.get::<OsdLiveRecord>(&keys::osd_live(1)).is_some());

    // Killed: the mon's own connect is refused, and the key goes with the report.
    let reported = Instant::now();
    let answer = report_down(api, 1, live.incarnation);
    assert_eq!((answer["down"].as_bool(), answer["revoked"].as_bool()), (Some(true), Some(true)), "{answer}");
    assert!(store.get::<OsdLiveRecord>(&keys::osd_live(1)).is_none(), "the liveness key outlived the report");
    assert!(reported.elapsed() < Duration::from_secs(2), "the report took {:?}", reported.elapsed());
    let answer = report_down(api, 1, live.incarnation);
    assert_eq!((answer["down"].as_bool(), answer["revoked"].as_bool()), (Some(true), Some(false)), "{answer}");

    // With fast down detection off, a mon never revokes on a report.
    let osd = Osd::start_with_lease(&store, &data, 60);
    let live: OsdLiveRecord = store.get(&keys::osd_live(1)).expect("registered again");
    let (_, _) = osd.stop(libc::SIGKILL, Duration::from_secs(5));
    let (cautious, cautious_api) = store.runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let api = listener.local_addr().unwrap();
        let mut config = mon::MonConfig::new("cautious", store.url.clone());
        config.fast_down = false;
        (mon::Mon::start(store.store.clone(), config, listener, None).await.expect("start the mon"), api)
    });
    let answer = report_down(cautious_api, 1, live.incarnation);
    assert_eq!(answer["revoked"].as_bool(), Some(false), "{answer}");
    assert!(answer["reason"].as_str().unwrap().contains("fast down detection is off"), "{answer}");
    assert!(store.get::<OsdLiveRecord>(&keys::osd_live(1)).is_some());
    drop(cautious);
    drop(mon);
}
