//! A whole cluster in a network namespace for the multi-process tests: `basalt mon`, one
//! `basalt osd` per drive on hosts of their own, a pool and a volume served by `basalt nbd`,
//! fio writing and verifying through NBD, and checks that every PG is clean and its members
//! hold the same versions and bytes.

use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use testkit::{wait_until, Proc, Scratch};

use super::{start_mon, Mon, Store, BASALT};

pub const API: &str = "127.0.0.1:8080";
pub const NBD: &str = "nbd://127.0.0.1:10809/v";

pub fn cli(args: &[&str]) -> String {
    testkit::run_ok(BASALT, args)
}

pub struct Cluster {
    pub scratch: Scratch,
    pub mon: Mon,
    pub osds: Vec<Option<Proc>>,
    _nbd: Option<Proc>,
}

impl Cluster {
    /// A mon, `osd_count` OSDs on hosts of their own, one pool and a volume `v` served over NBD.
    pub fn start(
        store: Store,
        name: &str,
        osd_count: usize,
        replicas: u32,
        min_size: u32,
        volume_size: &str,
    ) -> Cluster {
        Cluster::start_as(store, name, osd_count, replicas, min_size, volume_size, None)
    }

    /// [`Cluster::start`], with OSD `index` run as user `uid(index)` when given.
    pub fn start_as(
        store: Store,
        name: &str,
        osd_count: usize,
        replicas: u32,
        min_size: u32,
        volume_size: &str,
        uid: Option<fn(usize) -> u32>,
    ) -> Cluster {
        testkit::netns::enter_new();
        let scratch = Scratch::new(name);
        let dir = scratch.path();
        let mon = start_mon(dir, API, store);
        let mut cluster = Cluster { scratch, mon, osds: Vec::new(), _nbd: None };
        for index in 0..osd_count {
            let data = cluster.data(index);
            cli(&["osd", "init", "--data", &data, "--size", "512M", "--sparse"]);
            cluster.osds.push(None);
            cluster.start_osd_as(index, uid.map(|uid| uid(index)));
        }
        wait_until(Duration::from_secs(60), "every OSD up", || (up_osds().len() == osd_count).then_some(()));
        let (replicas, min_size) = (replicas.to_string(), min_size.to_string());
        cli(&["pool", "create", "p", "--replicas", &replicas, "--min-size", &min_size, "--pgs", "16", "--api", API]);
        cli(&["volume", "create", "v", "--size", volume_size, "--pool", "p", "--api", API]);
        wait_clean();
        let nbd = Proc::spawn("nbd", cluster.scratch.path(), Command::new(BASALT).args(["nbd", "--api", API]));
        wait_until(Duration::from_secs(30), "the NBD gateway", || TcpStream::connect("127.0.0.1:10809").ok());
        cluster._nbd = Some(nbd);
        cluster
    }

    /// Formats one more drive and starts an OSD on it; returns its index.
    pub fn add_osd(&mut self) -> usize {
        let index = self.osds.len();
        let data = self.data(index);
        cli(&["osd", "init", "--data", &data, "--size", "512M", "--sparse"]);
        self.osds.push(None);
        self.start_osd(index);
        index
    }

    pub fn data(&self, index: usize) -> String {
        self.scratch.join(&format!("osd{index}.img")).to_str().expect("utf-8").to_string()
    }

    /// Starts OSD `index` (again) on its drive, at its own address.
    pub fn start_osd(&mut self, index: usize) {
        self.start_osd_as(index, None);
    }

    /// Starts OSD `index` as user `uid` (owning its drive), so that every packet it sends can be
    /// told apart from the others' (`iptables -m owner`).
    pub fn start_osd_as(&mut self, index: usize, uid: Option<u32>) {
        let listen = format!("127.0.0.{}:6800", index + 2);
        let mut command = Command::new(BASALT);
        command.args(["osd", "--etcd", &self.mon.meta_url, "--data", &self.data(index), "--listen", &listen]);
        command.args(["--host", &format!("host{index}")]);
        if let Some(uid) = uid {
            use std::os::unix::process::CommandExt;
            std::os::unix::fs::chown(self.data(index), Some(uid), None).expect("give the drive to the osd's user");
            command.uid(uid);
        }
        self.osds[index] = Some(Proc::spawn(&format!("osd{index}"), self.scratch.path(), &mut command));
    }

    /// The id OSD `index` registered with (ids follow the order of first registration).
    pub fn osd_id(&self, index: usize) -> u64 {
        let listen = format!("127.0.0.{}:6800", index + 2);
        wait_until(Duration::from_secs(30), "the osd's id", || {
            let listing: Value = serde_json::from_str(&cli(&["osd", "ls", "--json", "--api", API])).expect("json");
            let osds = listing["osds"].as_array().expect("osds").clone();
            osds.iter().find(|osd| osd["address"] == listen.as_str()).and_then(|osd| osd["id"].as_u64())
        })
    }

    pub fn kill_osd(&mut self, index: usize) {
        self.osds[index].take().expect("a running osd").kill();
    }

    pub fn osd(&self, index: usize) -> &Proc {
        self.osds[index].as_ref().expect("a running osd")
    }
}

pub fn up_osds() -> Vec<u64> {
    super::up_osds(API)
}

pub fn pgs() -> Vec<Value> {
    pgs_at(API)
}

/// The PGs as the mons at `api` (one, or several comma-separated) list them.
pub fn pgs_at(api: &str) -> Vec<Value> {
    let listing: Value = serde_json::from_str(&cli(&["pg", "ls", "--json", "--api", api])).expect("json");
    listing["pgs"].as_array().expect("a pg list").clone()
}

/// Waits until every PG is clean with exactly its target set acting (no old member left).
pub fn wait_clean() {
    wait_clean_at(API);
}

/// [`wait_clean`], asking the mons at `api`.
pub fn wait_clean_at(api: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let not_clean: Vec<Value> = pgs_at(api)
            .into_iter()
            .filter(|pg| pg["state"] != "clean" || !same_set(&pg["acting"], &pg["target"]))
            .collect();
        if not_clean.is_empty() {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "PGs not clean after 120 s: {not_clean:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn same_set(a: &Value, b: &Value) -> bool {
    let sorted = |list: &Value| {
        let mut ids: Vec<u64> = list.as_array().expect("a list").iter().filter_map(Value::as_u64).collect();
        ids.sort_unstable();
        ids
    };
    sorted(a) == sorted(b)
}

/// fio on the volume through NBD: 4 KiB random writes at depth 8 over `size`, every block
/// checked after writing (or only checked, with `verify_only`). Returns whether it passed and
/// its output.
pub fn fio(dir: &std::path::Path, size: &str, seed: u32, extra: &[&str]) -> Command {
    let mut command = Command::new("fio");
    command.current_dir(dir).args([
        "--name=failover",
        "--ioengine=nbd",
        &format!("--uri={NBD}"),
        "--rw=randwrite",
        "--bs=4k",
        "--iodepth=8",
        &format!("--size={size}"),
        "--verify=crc32c",
        "--verify_fatal=1",
        &format!("--randseed={seed}"),
        "--output-format=normal",
    ]);
    command.args(extra);
    command
}

/// Starts fio in the background; [`finish_fio`] waits for it and checks it.
pub fn start_fio(dir: &std::path::Path, size: &str, seed: u32, extra: &[&str]) -> std::process::Child {
    use std::process::Stdio;
    fio(dir, size, seed, extra).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start fio")
}

/// Waits for fio and fails the test, with fio's output, on any I/O or verify error.
pub fn finish_fio(fio: std::process::Child, across: &str) {
    let output = fio.wait_with_output().expect("wait for fio");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success() && text.contains("err= 0"), "fio failed {across}: {text}");
}

/// [`finish_fio`], failing the test if fio has not finished within `limit` (ops stuck for good).
pub fn finish_fio_within(mut fio: std::process::Child, across: &str, limit: Duration) {
    let deadline = std::time::Instant::now() + limit;
    while fio.try_wait().expect("poll fio").is_none() {
        if std::time::Instant::now() >= deadline {
            let _ = fio.kill();
            let output = fio.wait_with_output().expect("wait for fio");
            panic!("fio did not finish within {limit:?} {across}: {}", String::from_utf8_lossy(&output.stdout));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    finish_fio(fio, across);
}

/// fio writing 4 KiB blocks at depth 8 for `runtime_s`, every block read back and checked once
/// 256 more are written; returns its JSON report.
pub fn start_timed_fio(dir: &std::path::Path, seed: u32, runtime_s: u32) -> std::process::Child {
    let mut command: Command = fio(dir, "64M", seed, &[]);
    command.args(["--time_based", &format!("--runtime={runtime_s}"), "--verify_backlog=256", "--output-format=json"]);
    command.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().expect("start fio")
}

/// The longest completion times of a timed fio run's writes and of its verifying reads.
pub struct FioTimes {
    pub longest_write: Duration,
    pub longest_read: Duration,
}

impl FioTimes {
    /// The longest of either: a stall that catches fio verifying (`--verify_backlog`) holds a
    /// read, not a write.
    pub fn longest(&self) -> Duration {
        self.longest_write.max(self.longest_read)
    }
}

/// Waits for fio, fails on any error, and returns its writes' and reads' longest completion times.
pub fn finish_timed_fio(fio: std::process::Child, across: &str) -> FioTimes {
    let output = fio.wait_with_output().expect("wait for fio");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "fio failed {across}: {text}{}", String::from_utf8_lossy(&output.stderr));
    let start = text.find('{').unwrap_or_else(|| panic!("no JSON from fio {across}: {text}"));
    let report: Value = serde_json::from_str(&text[start..]).expect("fio's JSON report");
    let job = &report["jobs"][0];
    assert_eq!(job["error"], 0, "fio failed {across}: {text}");
    let writes = job["write"]["total_ios"].as_u64().expect("a write count");
    let verified = job["read"]["total_ios"].as_u64().expect("a read count");
    let longest = |kind: &str| Duration::from_nanos(job[kind]["lat_ns"]["max"].as_u64().expect("a latency"));
    let times = FioTimes { longest_write: longest("write"), longest_read: longest("read") };
    eprintln!(
        "fio: {writes} writes {across}, {verified} verified, the longest write took {:?}, the longest read {:?}",
        times.longest_write, times.longest_read
    );
    assert!(writes > 0 && verified > 0, "fio wrote or verified nothing {across}: {text}");
    times
}

pub fn run_fio(dir: &std::path::Path, size: &str, seed: u32, extra: &[&str]) {
    finish_fio(start_fio(dir, size, seed, extra), "with every OSD up");
}

/// Sends one request on a new connection and returns the reply.
pub fn call(address: &str, epoch: u64, request: wire::Request) -> wire::Response {
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect(address).expect("connect to the osd");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let mut bytes = Vec::new();
    wire::Frame::request(1, epoch, request).encode(&mut bytes);
    stream.write_all(&bytes).expect("send");
    let mut decoder = wire::Decoder::new(wire::limits::PAYLOAD_SIZE_MAX_BYTES);
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        if let Some(frame) = decoder.next_frame().expect("a valid reply") {
            match frame.body {
                wire::Body::Response(response) => return response,
                wire::Body::Request(request) => panic!("the osd sent a request {request:?}"),
            }
        }
        let read = stream.read(&mut buffer).expect("read the reply");
        assert!(read > 0, "the osd closed the connection");
        decoder.feed(&buffer[..read]);
    }
}

/// Every PG's acting members hold the same objects at the same versions with the same bytes.
pub fn replicas_equal() {
    replicas_equal_at(API);
}

/// [`replicas_equal`], asking the mons at `api`.
pub fn replicas_equal_at(api: &str) {
    let listing: Value = serde_json::from_str(&cli(&["osd", "ls", "--json", "--api", api])).expect("json");
    let address = |osd: u64| -> String {
        let osds = listing["osds"].as_array().expect("osds");
        let record = osds.iter().find(|record| record["id"] == osd).expect("a listed osd");
        record["address"].as_str().expect("an up osd").to_string()
    };
    let mut objects_checked = 0;
    for pg in pgs_at(api) {
        let id = wire::PgId { pool: pg["pool"].as_u64().unwrap() as u32, pg: pg["pg"].as_u64().unwrap() as u32 };
        let epoch = pg["epoch"].as_u64().unwrap();
        let members: Vec<u64> = pg["acting"].as_array().unwrap().iter().map(|osd| osd.as_u64().unwrap()).collect();
        assert_eq!(members.len(), pg["target"].as_array().unwrap().len(), "pg {pg}");
        let mut contents = Vec::new();
        for &osd in &members {
            let start = wire::ObjectId { inode: 0, stripe: 0 };
            let request = wire::Request::SecList { pg: id, start, count_max: 100_000 };
            let wire::Response::SecList { entries } = call(&address(osd), epoch, request) else {
                panic!("osd.{osd} did not list pg {pg}");
            };
            let mut objects = Vec::new();
            for entry in entries {
                let request = wire::Request::ObjectInfo { pg: id, object: entry.object };
                match call(&address(osd), epoch, request) {
                    wire::Response::ObjectInfo { version, data_crc32c, present } => {
                        assert_eq!(version, entry.version);
                        objects.push((entry.object, version, data_crc32c, present));
                    }
                    other => panic!("osd.{osd}: object info of {:?}: {other:?}", entry.object),
                }
            }
            contents.push((osd, objects));
        }
        for (osd, objects) in &contents[1..] {
            assert!(
                objects == &contents[0].1,
                "pg {}.{}: osd.{osd} differs from osd.{}: {} objects against {}",
                id.pool,
                id.pg,
                contents[0].0,
                objects.len(),
                contents[0].1.len()
            );
        }
        objects_checked += contents[0].1.len();
    }
    assert!(objects_checked > 0, "no object was compared");
    eprintln!("cluster: {objects_checked} objects compared equal on every member of their PGs");
}

/// In a thread of its own, so the network namespace is this test's alone.
pub fn isolated(test: impl FnOnce() + Send + 'static) {
    std::thread::spawn(test).join().expect("the test thread");
}
