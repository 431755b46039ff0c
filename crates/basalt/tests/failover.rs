//! Failover, peering and catch-up under load (`docs/design/peering.md`): real processes in a
//! network namespace (`basalt mon` on its embedded store, `basalt osd` per drive, `basalt nbd`)
//! and fio writing through NBD with `--verify=crc32c`. Each test kills or stops OSDs and checks
//! that no I/O failed, every block verifies, every PG becomes clean, and the members of every
//! PG hold the same versions and bytes.

mod common;

use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use common::{start_mon, Mon, Store, BASALT};
use serde_json::Value;
use testkit::{wait_until, Proc, Scratch};

const API: &str = "127.0.0.1:8080";
const NBD: &str = "nbd://127.0.0.1:10809/v";

fn cli(args: &[&str]) -> String {
    testkit::run_ok(BASALT, args)
}

struct Cluster {
    scratch: Scratch,
    mon: Mon,
    osds: Vec<Option<Proc>>,
    _nbd: Option<Proc>,
}

impl Cluster {
    /// A mon, `osd_count` OSDs on hosts of their own, one pool and a volume `v` served over NBD.
    fn start(store: Store, name: &str, osd_count: usize, replicas: u32, min_size: u32, volume_size: &str) -> Cluster {
        testkit::netns::enter_new();
        let scratch = Scratch::new(name);
        let dir = scratch.path();
        let mon = start_mon(dir, API, store);
        let mut cluster = Cluster { scratch, mon, osds: Vec::new(), _nbd: None };
        for index in 0..osd_count {
            let data = cluster.data(index);
            cli(&["osd", "init", "--data", &data, "--size", "512M"]);
            cluster.osds.push(None);
            cluster.start_osd(index);
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

    fn data(&self, index: usize) -> String {
        self.scratch.join(&format!("osd{index}.img")).to_str().expect("utf-8").to_string()
    }

    /// Starts OSD `index` (again) on its drive, at its own address.
    fn start_osd(&mut self, index: usize) {
        self.start_osd_as(index, None);
    }

    /// Starts OSD `index` as user `uid` (owning its drive), so that every packet it sends can be
    /// told apart from the others' (`iptables -m owner`).
    fn start_osd_as(&mut self, index: usize, uid: Option<u32>) {
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

    fn kill_osd(&mut self, index: usize) {
        self.osds[index].take().expect("a running osd").kill();
    }

    fn osd(&self, index: usize) -> &Proc {
        self.osds[index].as_ref().expect("a running osd")
    }
}

fn up_osds() -> Vec<u64> {
    common::up_osds(API)
}

fn pgs() -> Vec<Value> {
    let listing: Value = serde_json::from_str(&cli(&["pg", "ls", "--json", "--api", API])).expect("json");
    listing["pgs"].as_array().expect("a pg list").clone()
}

fn wait_clean() {
    wait_until(Duration::from_secs(90), "every PG clean", || {
        pgs().iter().all(|pg| pg["state"] == "clean").then_some(())
    });
}

/// fio on the volume through NBD: 4 KiB random writes at depth 8 over `size`, every block
/// checked after writing (or only checked, with `verify_only`). Returns whether it passed and
/// its output.
fn fio(dir: &std::path::Path, size: &str, seed: u32, extra: &[&str]) -> Command {
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
fn start_fio(dir: &std::path::Path, size: &str, seed: u32, extra: &[&str]) -> std::process::Child {
    use std::process::Stdio;
    fio(dir, size, seed, extra).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start fio")
}

/// Waits for fio and fails the test, with fio's output, on any I/O or verify error.
fn finish_fio(fio: std::process::Child, across: &str) {
    let output = fio.wait_with_output().expect("wait for fio");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success() && text.contains("err= 0"), "fio failed {across}: {text}");
}

fn run_fio(dir: &std::path::Path, size: &str, seed: u32, extra: &[&str]) {
    finish_fio(start_fio(dir, size, seed, extra), "with every OSD up");
}

/// Sends one request on a new connection and returns the reply.
fn call(address: &str, epoch: u64, request: wire::Request) -> wire::Response {
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
fn replicas_equal() {
    let listing: Value = serde_json::from_str(&cli(&["osd", "ls", "--json", "--api", API])).expect("json");
    let address = |osd: u64| -> String {
        let osds = listing["osds"].as_array().expect("osds");
        let record = osds.iter().find(|record| record["id"] == osd).expect("a listed osd");
        record["address"].as_str().expect("an up osd").to_string()
    };
    let mut objects_checked = 0;
    for pg in pgs() {
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
                    wire::Response::ObjectInfo { version, data_crc32c } => {
                        assert_eq!(version, entry.version);
                        objects.push((entry.object, version, data_crc32c));
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
    eprintln!("failover: {objects_checked} objects compared equal on every member of their PGs");
}

/// In a thread of its own, so the network namespace is this test's alone.
fn isolated(test: impl FnOnce() + Send + 'static) {
    std::thread::spawn(test).join().expect("the test thread");
}

#[test]
fn a_primary_killed_under_load_costs_no_io_error_and_catches_up_when_back() {
    isolated(|| kill_under_load(Store::Embedded));
}

#[test]
fn a_primary_killed_under_load_costs_no_io_error_and_catches_up_when_back_on_etcd() {
    isolated(|| kill_under_load(Store::Etcd));
}

fn kill_under_load(store: Store) {
    let mut cluster = Cluster::start(store, &format!("failover-kill-{store:?}"), 3, 3, 2, "64M");
    let dir = cluster.scratch.path().to_path_buf();
    let writer = start_fio(&dir, "64M", 11, &["--loops=2"]);
    std::thread::sleep(Duration::from_secs(2));
    // osd 0 leads about a third of the PGs.
    cluster.kill_osd(0);
    std::thread::sleep(Duration::from_secs(3));
    cluster.start_osd(0);
    finish_fio(writer, "across the failover");
    wait_clean();
    // Metadata-store writes for the two changes (osd 0 out, osd 0 back): one interval record
    // when the PG first writes without osd 0, one clean record once osd 0 caught up; none per I/O.
    let status: Value = serde_json::from_str(&cli(&["status", "--json", "--api", API])).expect("json");
    let writes = status["pg_history_writes"].as_u64().expect("a count");
    eprintln!("failover: {writes} metadata-store writes of PG histories for one OSD's loss and return (16 PGs)");
    assert!(writes <= 2 * 16, "{writes} history writes for one OSD's loss and return, 16 PGs");
    replicas_equal();
    run_fio(&dir, "64M", 11, &["--verify_only"]);
    let log = cluster.osd(1).log_tail(400) + &cluster.osd(2).log_tail(400);
    assert!(log.contains("pg active"), "no failover was logged: {log}");
}

#[test]
fn a_stopped_primary_is_replaced_after_its_lease_and_rejoins_when_resumed() {
    isolated(|| stop_under_load(Store::Embedded));
}

#[test]
fn a_stopped_primary_is_replaced_after_its_lease_and_rejoins_when_resumed_on_etcd() {
    isolated(|| stop_under_load(Store::Etcd));
}

fn stop_under_load(store: Store) {
    let cluster = Cluster::start(store, &format!("failover-stop-{store:?}"), 3, 3, 2, "64M");
    let dir = cluster.scratch.path().to_path_buf();
    let writer = start_fio(&dir, "64M", 12, &["--loops=2"]);
    std::thread::sleep(Duration::from_secs(2));
    cluster.osd(0).signal(libc::SIGSTOP);
    // Longer than its lease (3 s): its PGs move on without it.
    std::thread::sleep(Duration::from_secs(6));
    cluster.osd(0).signal(libc::SIGCONT);
    finish_fio(writer, "across the stop");
    wait_until(Duration::from_secs(30), "osd 0 registered again", || (up_osds().len() == 3).then_some(()));
    wait_clean();
    replicas_equal();
    run_fio(&dir, "64M", 12, &["--verify_only"]);
}

/// Every OSD stopped (SIGTERM) and started again in turn while fio writes: no I/O error, every
/// block verifies, and the PGs end clean with equal replicas.
#[test]
fn every_osd_restarted_in_turn_under_load_costs_no_io_error() {
    isolated(|| rolling_restarts(Store::Embedded));
}

#[test]
fn every_osd_restarted_in_turn_under_load_costs_no_io_error_on_etcd() {
    isolated(|| rolling_restarts(Store::Etcd));
}

fn rolling_restarts(store: Store) {
    let mut cluster = Cluster::start(store, &format!("failover-rolling-{store:?}"), 3, 3, 2, "64M");
    let dir = cluster.scratch.path().to_path_buf();
    let writer = start_fio(&dir, "64M", 14, &["--loops=4"]);
    for index in 0..3 {
        std::thread::sleep(Duration::from_secs(1));
        let (status, _) =
            cluster.osds[index].take().expect("a running osd").stop(libc::SIGTERM, Duration::from_secs(20));
        assert!(status.success(), "osd {index} did not stop cleanly: {status}");
        cluster.start_osd(index);
        wait_until(Duration::from_secs(30), "the OSD back", || (up_osds().len() == 3).then_some(()));
        wait_until(Duration::from_secs(60), "every PG active", || {
            pgs().iter().all(|pg| pg["state"] == "clean" || pg["state"] == "recovering").then_some(())
        });
    }
    finish_fio(writer, "across the restarts");
    wait_clean();
    replicas_equal();
    run_fio(&dir, "64M", 14, &["--verify_only"]);
}

/// An OSD cut off from everything (its packets dropped both ways, as a dead link would: no
/// reset) while fio writes: it fences itself before its lease runs out, its PGs move on without
/// it, and once the link heals it registers again and catches up.
#[test]
fn an_osd_cut_off_under_load_is_replaced_and_catches_up_after_the_heal() {
    isolated(|| cut_under_load(Store::Embedded));
}

#[test]
fn an_osd_cut_off_under_load_is_replaced_and_catches_up_after_the_heal_on_etcd() {
    isolated(|| cut_under_load(Store::Etcd));
}

fn cut_under_load(store: Store) {
    const UID: u32 = 64_000;
    let mut cluster = Cluster::start(store, &format!("failover-cut-{store:?}"), 3, 3, 2, "64M");
    // osd 0 again, as its own user, so the cut can name every packet it sends.
    cluster.kill_osd(0);
    wait_until(Duration::from_secs(30), "osd 0 down", || (up_osds().len() == 2).then_some(()));
    cluster.start_osd_as(0, Some(UID));
    wait_until(Duration::from_secs(30), "osd 0 back", || (up_osds().len() == 3).then_some(()));
    wait_clean();
    let dir = cluster.scratch.path().to_path_buf();
    let writer = start_fio(&dir, "64M", 13, &["--loops=2"]);
    std::thread::sleep(Duration::from_secs(2));
    let cut = [
        vec!["-I", "INPUT", "-d", "127.0.0.2", "-j", "DROP"],
        vec!["-I", "OUTPUT", "-m", "owner", "--uid-owner", "64000", "-j", "DROP"],
    ];
    for rule in &cut {
        testkit::run_ok("iptables", rule);
    }
    wait_until(Duration::from_secs(30), "osd 0 down", || (up_osds().len() == 2).then_some(()));
    std::thread::sleep(Duration::from_secs(3));
    for rule in &cut {
        let mut delete = rule.clone();
        delete[0] = "-D";
        testkit::run_ok("iptables", &delete);
    }
    finish_fio(writer, "across the cut");
    wait_until(Duration::from_secs(30), "osd 0 registered again", || (up_osds().len() == 3).then_some(()));
    wait_clean();
    replicas_equal();
    run_fio(&dir, "64M", 13, &["--verify_only"]);
    let log = cluster.osd(0).log_tail(200);
    assert!(log.contains("cannot renew the lease"), "the cut-off OSD did not fence itself: {log}");
}

/// The split-brain case: with 2 copies and `min_size 1`, A is stopped, B takes writes alone, B
/// is stopped, A comes back: A's PGs must not serve (it lacks B's writes); B comes back and
/// everything written is there.
#[test]
fn an_osd_that_missed_writes_never_serves_alone() {
    isolated(|| past_sets(Store::Embedded));
}

#[test]
fn an_osd_that_missed_writes_never_serves_alone_on_etcd() {
    isolated(|| past_sets(Store::Etcd));
}

fn past_sets(store: Store) {
    let mut cluster = Cluster::start(store, &format!("failover-past-sets-{store:?}"), 2, 2, 1, "32M");
    let dir = cluster.scratch.path().to_path_buf();
    run_fio(&dir, "32M", 21, &[]);
    cluster.kill_osd(0);
    wait_until(Duration::from_secs(30), "osd 0 down", || (up_osds().len() == 1).then_some(()));
    // Written with B alone.
    run_fio(&dir, "32M", 22, &[]);
    cluster.kill_osd(1);
    cluster.start_osd(0);
    wait_until(Duration::from_secs(30), "only osd 0 up", || (up_osds() == [1]).then_some(()));
    std::thread::sleep(Duration::from_secs(3));
    // Every object was written again while A was away, so every PG holding one must stay
    // inactive; a PG of no object of the volume acknowledged nothing A lacks, and may serve.
    let listed = pgs();
    let inactive = listed.iter().filter(|pg| pg["state"] == "inactive").count();
    for pg in listed.iter().filter(|pg| pg["state"] == "inactive") {
        let reason = pg["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("its primary osd.1 cannot activate it"), "{pg}");
    }
    for pg in listed.iter().filter(|pg| pg["state"] != "inactive") {
        let id = wire::PgId { pool: pg["pool"].as_u64().unwrap() as u32, pg: pg["pg"].as_u64().unwrap() as u32 };
        let request = wire::Request::SecList { pg: id, start: wire::ObjectId { inode: 0, stripe: 0 }, count_max: 1000 };
        let wire::Response::SecList { entries } = call("127.0.0.2:6800", pg["epoch"].as_u64().unwrap(), request) else {
            panic!("osd 0 did not list {pg}");
        };
        assert!(entries.is_empty(), "a PG holding objects is served by the OSD that missed their writes: {pg}");
    }
    assert!(inactive > listed.len() / 2, "only {inactive} of {} PGs stayed inactive", listed.len());
    cluster.start_osd(1);
    wait_clean();
    run_fio(&dir, "32M", 22, &["--verify_only"]);
    replicas_equal();
}

/// Two of three down with `min_size 2`: nothing is acknowledged; one back: active, nothing lost.
#[test]
fn a_pg_below_min_size_acknowledges_nothing_until_a_member_returns() {
    isolated(|| below_min_size(Store::Embedded));
}

#[test]
fn a_pg_below_min_size_acknowledges_nothing_until_a_member_returns_on_etcd() {
    isolated(|| below_min_size(Store::Etcd));
}

fn below_min_size(store: Store) {
    let mut cluster = Cluster::start(store, &format!("failover-min-size-{store:?}"), 3, 3, 2, "32M");
    let dir = cluster.scratch.path().to_path_buf();
    run_fio(&dir, "32M", 31, &[]);
    cluster.kill_osd(1);
    cluster.kill_osd(2);
    wait_until(Duration::from_secs(30), "two OSDs down", || (up_osds().len() == 1).then_some(()));
    wait_until(Duration::from_secs(30), "every PG inactive", || {
        pgs().iter().all(|pg| pg["state"] == "inactive").then_some(())
    });
    let listed = pgs();
    let reason = listed[0]["reason"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains("1 of its 3 OSDs up, fewer than min_size 2"), "{}", listed[0]);
    let output = Command::new(BASALT)
        .args(["bench", "--api", API, "--volume", "v", "--rw", "randwrite", "--runtime", "1", "--io-timeout", "2"])
        .output()
        .expect("run basalt bench");
    assert!(!output.status.success(), "a write was acknowledged below min_size");
    cluster.start_osd(1);
    wait_until(Duration::from_secs(60), "every PG active", || {
        pgs().iter().all(|pg| pg["state"] != "inactive" && pg["state"] != "peering").then_some(())
    });
    run_fio(&dir, "32M", 31, &["--verify_only"]);
    cluster.start_osd(2);
    wait_clean();
    replicas_equal();
}
