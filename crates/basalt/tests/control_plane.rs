//! The control plane's faults: real processes in a network namespace, a three-member etcd, two
//! mons, three OSDs given every etcd member, `basalt nbd` given both mons, and fio writing
//! through NBD with every block verified soon after it is written. Each etcd member is killed
//! in turn (one of them leads etcd), one is cut off (its packets dropped), etcd loses its
//! quorum for 20 s (every peer link cut), the leading mon is killed, then stopped, then cut off
//! from etcd, and the leading mon and etcd's leader are killed together before an OSD is.
//! Meanwhile `basalt status` is asked of both mons every 200 ms: every call must be answered,
//! fio must see no error and no write may take 5 s, and every PG must come out clean with its
//! members equal. Last, two etcd members are killed for 12 s: writes wait (the OSDs cannot
//! prove the quorum lost) and go on afterwards, with no error and nothing lost.

mod common;

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::cluster::*;
use common::BASALT;
use serde_json::Value;
use testkit::{wait_until, Etcd, Proc, Scratch};

const ETCD_IPS: [&str; 3] = ["127.0.0.11", "127.0.0.12", "127.0.0.13"];
const MON_APIS: [&str; 2] = ["127.0.0.1:8080", "127.0.0.1:8081"];
/// What every client of the mons is given.
const APIS: &str = "127.0.0.1:8080,127.0.0.1:8081";
const OSDS: usize = 3;
/// How soon the other mon must lead: the leader's lease (3 s, `mon::LEASE_TTL_DEFAULT`) runs
/// out, then it campaigns; an etcd election on the way renews the lease by its TTL.
const TAKEOVER_MAX: Duration = Duration::from_secs(6);

struct ControlPlane {
    scratch: Scratch,
    etcd: Vec<Etcd>,
    mons: Vec<Option<Proc>>,
    osds: Vec<Option<Proc>>,
    nbd: Option<Proc>,
    meta_url: String,
}

impl ControlPlane {
    fn start() -> ControlPlane {
        testkit::netns::enter_new();
        let scratch = Scratch::new("control-plane");
        let etcd = Etcd::start_cluster(&ETCD_IPS, scratch.path());
        let meta_url = etcd.iter().map(|member| member.endpoint.as_str()).collect::<Vec<_>>().join(",");
        let mut cluster = ControlPlane { etcd, mons: vec![None, None], osds: Vec::new(), nbd: None, scratch, meta_url };
        for index in 0..MON_APIS.len() {
            cluster.start_mon(index);
        }
        for index in 0..OSDS {
            let data = cluster.data(index);
            cli(&["osd", "init", "--data", &data, "--size", "512M", "--sparse"]);
            cluster.osds.push(None);
            cluster.start_osd(index);
        }
        wait_until(Duration::from_secs(60), "every OSD up", || (up_osds_at().len() == OSDS).then_some(()));
        cli(&["pool", "create", "p", "--replicas", "3", "--min-size", "2", "--pgs", "16", "--api", APIS]);
        cli(&["volume", "create", "v", "--size", "64M", "--pool", "p", "--api", APIS]);
        wait_clean_at(APIS);
        cluster.nbd =
            Some(Proc::spawn("nbd", cluster.scratch.path(), Command::new(BASALT).args(["nbd", "--api", APIS])));
        wait_until(Duration::from_secs(30), "the NBD gateway", || std::net::TcpStream::connect("127.0.0.1:10809").ok());
        cluster
    }

    fn start_mon(&mut self, index: usize) {
        let id = format!("mon-{}", ["a", "b"][index]);
        let mut command = Command::new(BASALT);
        command.args(["mon", "--api", MON_APIS[index], "--id", &id, "--etcd", &self.meta_url]);
        std::os::unix::process::CommandExt::uid(&mut command, mon_uid(index));
        self.mons[index] = Some(Proc::spawn(&id, self.scratch.path(), &mut command));
        wait_until(Duration::from_secs(30), "the mon API", || std::net::TcpStream::connect(MON_APIS[index]).ok());
    }

    fn data(&self, index: usize) -> String {
        self.scratch.join(&format!("osd{index}.img")).to_str().expect("utf-8").to_string()
    }

    fn start_osd(&mut self, index: usize) {
        let listen = format!("127.0.0.{}:6800", index + 2);
        let mut command = Command::new(BASALT);
        command.args(["osd", "--etcd", &self.meta_url, "--data", &self.data(index), "--listen", &listen]);
        command.args(["--host", &format!("host{index}")]);
        self.osds[index] = Some(Proc::spawn(&format!("osd{index}"), self.scratch.path(), &mut command));
    }

    /// The index of the mon that leads, once one does.
    fn leading_mon(&self) -> usize {
        wait_until(Duration::from_secs(30), "a leading mon", || {
            let status: Value = serde_json::from_str(&cli(&["status", "--json", "--api", APIS])).expect("json");
            let leader = status["leader"]["mon"].as_str()?.to_string();
            ["mon-a", "mon-b"].iter().position(|id| *id == leader)
        })
    }

    /// Waits until mon `index` leads, by its own word (the other may be stopped or cut off, and
    /// a read of it waits), and returns how long that took.
    fn wait_for_leader(&self, index: usize, since: Instant) -> Duration {
        wait_until(Duration::from_secs(30), "the other mon leading", || {
            let status: Value = serde_json::from_str(&cli(&["status", "--json", "--api", MON_APIS[index]])).ok()?;
            (status["leader"]["mon"].as_str()? == ["mon-a", "mon-b"][index]).then_some(())
        });
        since.elapsed()
    }

    fn kill_etcd(&mut self, index: usize) {
        self.etcd[index].proc.kill();
    }

    fn restart_etcd(&mut self, index: usize) {
        self.etcd[index] = Etcd::restart_member(&ETCD_IPS, index, self.scratch.path());
    }
}

/// The uid mon `index` runs as, so a rule can name the packets it sends.
fn mon_uid(index: usize) -> u32 {
    64_100 + index as u32
}

/// Drops every packet mon `index` sends to etcd, or stops dropping them.
fn cut_mon(index: usize, cut: bool) {
    let action = if cut { "-I" } else { "-D" };
    let uid = mon_uid(index).to_string();
    for ip in ETCD_IPS {
        testkit::run_ok("iptables", &[action, "OUTPUT", "-m", "owner", "--uid-owner", &uid, "-d", ip, "-j", "DROP"]);
    }
}

fn up_osds_at() -> Vec<u64> {
    common::up_osds(APIS)
}

/// Asks both mons for the cluster's status every 200 ms until stopped; counts the calls and
/// keeps the errors of those that failed.
struct Prober {
    stop: Arc<AtomicBool>,
    without_store: Arc<AtomicUsize>,
    thread: std::thread::JoinHandle<(usize, Vec<String>)>,
}

impl Prober {
    fn start() -> Prober {
        let stop = Arc::new(AtomicBool::new(false));
        let without_store = Arc::new(AtomicUsize::new(0));
        let thread = std::thread::spawn({
            let (stop, without_store) = (stop.clone(), without_store.clone());
            move || {
                let mut calls = 0;
                let failures = Mutex::new(Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let output = Command::new(BASALT).args(["status", "--api", APIS]).output().expect("run basalt");
                    calls += 1;
                    if !output.status.success() {
                        let error = String::from_utf8_lossy(&output.stderr).trim().to_string();
                        failures.lock().unwrap().push(format!("after {:?}: {error}", started.elapsed()));
                    } else if String::from_utf8_lossy(&output.stdout).contains("store     UNAVAILABLE") {
                        without_store.fetch_add(1, Ordering::Relaxed);
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
                (calls, failures.into_inner().unwrap())
            }
        });
        Prober { stop, without_store, thread }
    }

    /// How many calls a mon answered from its last map, the store unreadable.
    fn answers_without_store(&self) -> usize {
        self.without_store.load(Ordering::Relaxed)
    }

    fn finish(self, across: &str) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        let (calls, failures) = self.thread.join().expect("the prober");
        eprintln!(
            "control plane: {calls} status calls {across}, {} failed, {} answered without the store",
            failures.len(),
            self.without_store.load(Ordering::Relaxed)
        );
        assert!(failures.is_empty(), "status calls failed {across}: {failures:#?}");
        calls
    }
}

/// Drops every packet to etcd member `index` (clients and peers), or stops dropping them.
fn cut_etcd(index: usize, cut: bool) {
    let action = if cut { "-I" } else { "-D" };
    testkit::run_ok("iptables", &[action, "INPUT", "-p", "tcp", "-d", ETCD_IPS[index], "-j", "DROP"]);
}

#[test]
fn etcd_members_and_mons_lost_cost_no_io_error_and_no_unanswered_call() {
    isolated(|| {
        let mut cluster = ControlPlane::start();
        let dir = cluster.scratch.path().to_path_buf();
        let writer = start_timed_fio(&dir, 41, 120);
        let prober = Prober::start();
        std::thread::sleep(Duration::from_secs(2));

        // Each etcd member killed in turn, then started again: one of them leads etcd.
        for index in 0..ETCD_IPS.len() {
            cluster.kill_etcd(index);
            std::thread::sleep(Duration::from_secs(3));
            cluster.restart_etcd(index);
            std::thread::sleep(Duration::from_secs(1));
        }
        eprintln!("control plane: every etcd member killed in turn");

        // One member cut off: its connections stay open and silent.
        cut_etcd(1, true);
        std::thread::sleep(Duration::from_secs(6));
        cut_etcd(1, false);
        std::thread::sleep(Duration::from_secs(2));
        eprintln!("control plane: an etcd member cut off for 6 s");

        // etcd's quorum lost for 20 s: every member's peer links cut, so each still answers
        // clients but none can lead. The OSDs serve on (every member says it has no leader),
        // the mons answer from their last map, and everything resumes once a leader is elected.
        let cut_quorum = |action: &str| {
            for ip in ETCD_IPS {
                testkit::run_ok("iptables", &[action, "INPUT", "-p", "tcp", "-d", ip, "--dport", "2380", "-j", "DROP"]);
            }
        };
        cut_quorum("-I");
        let cut_at = Instant::now();
        wait_until(Duration::from_secs(10), "etcd to lose its leader", || {
            (!cluster.etcd.iter().any(Etcd::leads)).then_some(())
        });
        let lost = prober.answers_without_store();
        std::thread::sleep(Duration::from_secs(20).saturating_sub(cut_at.elapsed()));
        assert!(prober.answers_without_store() > lost, "no status call was answered without the store");
        cut_quorum("-D");
        wait_until(Duration::from_secs(20), "etcd to elect a leader", || {
            cluster.etcd.iter().any(Etcd::leads).then_some(())
        });
        std::thread::sleep(Duration::from_secs(2));
        for index in 0..OSDS {
            let log = std::fs::read_to_string(cluster.scratch.join(&format!("osd{index}.log"))).expect("an OSD's log");
            assert!(log.contains("the store has no leader anywhere"), "osd{index} did not serve on: {log}");
        }
        eprintln!("control plane: etcd's quorum lost for 20 s");

        // The leading mon killed: the other takes over its work.
        let leader = cluster.leading_mon();
        let killed_at = Instant::now();
        cluster.mons[leader].take().expect("a running mon").kill();
        let takeover = cluster.wait_for_leader(1 - leader, killed_at);
        eprintln!("control plane: mon {leader} killed, the other led {takeover:?} later");
        assert!(takeover < TAKEOVER_MAX, "the other mon led {takeover:?} after a kill");
        cluster.start_mon(leader);

        // The leading mon stopped: the other takes over; the stopped one steps down once resumed.
        let leader = cluster.leading_mon();
        let stopped_at = Instant::now();
        cluster.mons[leader].as_ref().expect("a running mon").signal(libc::SIGSTOP);
        let takeover = cluster.wait_for_leader(1 - leader, stopped_at);
        eprintln!("control plane: mon {leader} stopped, the other led {takeover:?} later");
        assert!(takeover < TAKEOVER_MAX, "the other mon led {takeover:?} after a SIGSTOP");
        cluster.mons[leader].as_ref().expect("a stopped mon").signal(libc::SIGCONT);
        std::thread::sleep(Duration::from_secs(2));
        assert_eq!(cluster.leading_mon(), 1 - leader, "a resumed mon must not lead beside the new leader");

        // The leading mon cut off from etcd: the other takes over; healed, the first follows.
        let leader = cluster.leading_mon();
        let cut_at = Instant::now();
        cut_mon(leader, true);
        let takeover = cluster.wait_for_leader(1 - leader, cut_at);
        eprintln!("control plane: mon {leader} cut off from etcd, the other led {takeover:?} later");
        assert!(takeover < TAKEOVER_MAX, "the other mon led {takeover:?} after a cut");
        cut_mon(leader, false);
        std::thread::sleep(Duration::from_secs(2));
        assert_eq!(cluster.leading_mon(), 1 - leader, "a healed mon must not lead beside the new leader");

        // The leading mon and etcd's leader killed together (the election renews the mon's lease
        // by its TTL, the longest wait), then an OSD.
        let leader = cluster.leading_mon();
        let etcd_leader =
            wait_until(Duration::from_secs(10), "etcd's leader", || cluster.etcd.iter().position(Etcd::leads));
        cluster.mons[leader].take().expect("a running mon").kill();
        cluster.kill_etcd(etcd_leader);
        std::thread::sleep(Duration::from_secs(2));
        cluster.osds[2].take().expect("a running osd").kill();
        std::thread::sleep(Duration::from_secs(8));
        eprintln!("control plane: a mon, an etcd member and an OSD killed");
        cluster.restart_etcd(etcd_leader);
        cluster.start_mon(leader);
        cluster.start_osd(2);

        let longest = finish_timed_fio(writer, "across the control plane's faults").longest_write;
        prober.finish("across the control plane's faults");
        assert!(longest < Duration::from_secs(5), "a write waited {longest:?}");
        wait_until(Duration::from_secs(60), "every OSD up", || (up_osds_at().len() == OSDS).then_some(()));
        wait_clean_at(APIS);
        replicas_equal_at(APIS);

        // etcd's quorum lost with two members killed: the one left cannot speak for them, so
        // the OSDs stop acknowledging at their deadlines (ADR 0028). Writes wait, no I/O fails,
        // and everything goes on once a leader is elected, with nothing lost.
        let writer = start_timed_fio(&dir, 43, 30);
        let prober = Prober::start();
        std::thread::sleep(Duration::from_secs(3));
        cluster.kill_etcd(1);
        cluster.kill_etcd(2);
        std::thread::sleep(Duration::from_secs(12));
        cluster.restart_etcd(1);
        cluster.restart_etcd(2);
        eprintln!("control plane: etcd's quorum lost for 12 s, two members killed");
        // The OSDs refuse reads as well as writes once their leases run out, and the stall
        // lands on whichever fio is waiting for: a write, or a read verifying the last writes.
        let longest = finish_timed_fio(writer, "across a quorum lost with two members down").longest();
        prober.finish("across a quorum lost with two members down");
        assert!(
            longest > Duration::from_secs(5),
            "I/O went on ({longest:?}) while no member could speak for the others"
        );
        wait_clean_at(APIS);
        replicas_equal_at(APIS);
    });
}
