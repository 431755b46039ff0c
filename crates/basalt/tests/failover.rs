//! Failover, peering and catch-up under load (`docs/design/peering.md`): real processes in a
//! network namespace (`basalt mon` on its embedded store, `basalt osd` per drive, `basalt nbd`)
//! and fio writing through NBD with `--verify=crc32c`. Each test kills or stops OSDs and checks
//! that no I/O failed, every block verifies, every PG becomes clean, and the members of every
//! PG hold the same versions and bytes.

mod common;

use std::process::Command;
use std::time::Duration;

use common::cluster::*;
use common::{Store, BASALT};
use serde_json::Value;
use testkit::wait_until;

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
    // Metadata-store writes: each PG's first clean record when it first activated, then for the
    // two changes (osd 0 out, osd 0 back) one interval record when the PG first writes without
    // osd 0 and one clean record once osd 0 caught up; none per I/O. (The count is each OSD's
    // since it started, so osd 0's share of the first records is not in it.)
    let status: Value = serde_json::from_str(&cli(&["status", "--json", "--api", API])).expect("json");
    let writes = status["pg_history_writes"].as_u64().expect("a count");
    eprintln!("failover: {writes} metadata-store writes of PG histories for one OSD's loss and return (16 PGs)");
    assert!(writes <= 3 * 16, "{writes} history writes for one OSD's loss and return, 16 PGs");
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
