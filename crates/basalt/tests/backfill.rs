//! OSDs joining, draining, leaving and being rebuilt elsewhere (`docs/design/backfill.md`):
//! real processes in a network namespace, fio writing through NBD with `--verify=crc32c`. Each
//! test changes the cluster's membership under load and checks that no I/O failed, every
//! block verifies, every PG ends clean on exactly its target set, and the members of every PG
//! hold the same versions and bytes.

mod common;

use std::time::Duration;

use common::cluster::*;
use common::Store;
use serde_json::Value;
use testkit::wait_until;

fn isolated(test: impl FnOnce() + Send + 'static) {
    std::thread::spawn(test).join().expect("the test thread");
}

/// PGs whose target set names `osd`.
fn target_pgs(osd: u64) -> usize {
    pgs().iter().filter(|pg| pg["target"].as_array().unwrap().iter().any(|member| member == osd)).count()
}

/// Objects `osd` (reached at `address`) holds of every PG, over the wire.
fn objects_held(address: &str) -> usize {
    let mut held = 0;
    for pg in pgs() {
        let id = wire::PgId { pool: pg["pool"].as_u64().unwrap() as u32, pg: pg["pg"].as_u64().unwrap() as u32 };
        let start = wire::ObjectId { inode: 0, stripe: 0 };
        let request = wire::Request::SecList { pg: id, start, count_max: 100_000 };
        match call(address, pg["epoch"].as_u64().unwrap(), request) {
            wire::Response::SecList { entries } => held += entries.len(),
            other => panic!("{address} answered a list with {other:?}"),
        }
    }
    held
}

/// Runs the CLI expecting it to fail; returns what it printed on stderr.
fn cli_fails(args: &[&str]) -> String {
    let output = std::process::Command::new(common::BASALT).args(args).output().expect("run basalt");
    assert!(!output.status.success(), "basalt {args:?} succeeded");
    String::from_utf8_lossy(&output.stderr).to_string()
}

/// The redundancy of volume `v`, as `basalt volume info --json` reports it.
fn volume_redundancy() -> Value {
    let info: Value = serde_json::from_str(&cli(&["volume", "info", "v", "--json", "--api", API])).expect("json");
    info["redundancy"].clone()
}

fn status() -> Value {
    serde_json::from_str(&cli(&["status", "--json", "--api", API])).expect("json")
}

#[test]
fn a_fourth_osd_joins_under_load_and_takes_a_quarter_of_the_memberships() {
    isolated(|| {
        let mut cluster = Cluster::start(Store::Embedded, "backfill-join", 3, 3, 2, "64M");
        let dir = cluster.scratch.path().to_path_buf();
        run_fio(&dir, "64M", 21, &[]);
        let writer = start_fio(&dir, "64M", 21, &["--loops=2"]);
        std::thread::sleep(Duration::from_secs(1));
        let index = cluster.add_osd();
        let id = cluster.osd_id(index);
        wait_until(Duration::from_secs(30), "osd 4 in target sets", || (target_pgs(id) > 0).then_some(()));
        let moved = target_pgs(id);
        eprintln!("backfill: {moved} of 48 PG memberships moved to the new osd");
        // Its share: 16 PGs × 3 copies over 4 OSDs is 12 memberships, a quarter of 48.
        assert!((10..=14).contains(&moved), "{moved} memberships moved to the new osd");
        finish_fio(writer, "across the join");
        wait_clean();
        assert_eq!(target_pgs(id), moved, "placement moved again");
        replicas_equal();
        run_fio(&dir, "64M", 21, &["--verify_only"]);
        let new_address = format!("127.0.0.{}:6800", index + 2);
        assert!(objects_held(&new_address) > 0, "the new osd holds nothing");
        // The members that left each PG drop their copies once it is clean without them: 512
        // objects (64 MiB of 128 KiB objects), three copies each, over the four OSDs.
        wait_until(Duration::from_secs(30), "stray copies removed", || {
            let held: usize = (0..4).map(|index| objects_held(&format!("127.0.0.{}:6800", index + 2))).sum();
            (held == 3 * 512).then_some(())
        });
    });
}

#[test]
fn an_osd_marked_out_drains_under_load_and_can_then_be_killed_and_removed() {
    isolated(|| {
        let mut cluster = Cluster::start(Store::Embedded, "backfill-out", 4, 3, 2, "64M");
        let dir = cluster.scratch.path().to_path_buf();
        run_fio(&dir, "64M", 22, &[]);
        let id = cluster.osd_id(3).to_string();
        let message = cli_fails(&["osd", "rm", &id, "--api", API]);
        assert!(message.contains("is up; stop it first"), "{message}");
        let writer = start_fio(&dir, "64M", 22, &["--loops=2"]);
        cli(&["osd", "out", &id, "--api", API]);
        finish_fio(writer, "across the drain");
        wait_clean();
        let osd: u64 = id.parse().unwrap();
        assert_eq!(target_pgs(osd), 0);
        assert!(pgs().iter().all(|pg| !pg["acting"].as_array().unwrap().iter().any(|member| member == osd)));
        // Drained: its loss costs nothing.
        cluster.kill_osd(3);
        std::thread::sleep(Duration::from_secs(4));
        let summary = status()["pgs"].clone();
        assert_eq!((summary["clean"].as_u64(), summary["degraded"].as_u64()), (Some(16), Some(0)), "{summary}");
        run_fio(&dir, "64M", 22, &["--verify_only"]);
        replicas_equal();
        cli(&["osd", "rm", &id, "--api", API]);
        let listing: Value = serde_json::from_str(&cli(&["osd", "ls", "--json", "--api", API])).expect("json");
        assert!(listing["osds"].as_array().unwrap().iter().all(|record| record["id"] != osd), "{listing}");
    });
}

#[test]
fn an_undrained_osd_is_not_removed() {
    isolated(|| {
        let mut cluster = Cluster::start(Store::Embedded, "backfill-rm", 3, 3, 2, "16M");
        let dir = cluster.scratch.path().to_path_buf();
        run_fio(&dir, "16M", 23, &[]);
        let id = cluster.osd_id(2).to_string();
        cluster.kill_osd(2);
        wait_until(Duration::from_secs(20), "the osd down", || (common::up_osds(API).len() == 2).then_some(()));
        let message = cli_fails(&["osd", "rm", &id, "--api", API]);
        assert!(message.contains("is still a member of 16 PGs"), "{message}");
        assert!(message.contains("--force"), "{message}");
    });
}

#[test]
fn an_osd_down_past_its_interval_is_marked_out_and_rebuilt_elsewhere() {
    isolated(|| {
        let mut cluster = Cluster::start(Store::Embedded, "backfill-down-out", 4, 3, 2, "64M");
        let dir = cluster.scratch.path().to_path_buf();
        cli(&["config", "set", "down_out_interval_s", "8", "--api", API]);
        run_fio(&dir, "64M", 24, &[]);
        let intact = volume_redundancy();
        assert_eq!((intact["state"].as_str(), intact["objects"].as_u64()), (Some("intact"), Some(512)), "{intact}");
        let id = cluster.osd_id(1);
        let writer = start_fio(&dir, "64M", 24, &["--loops=2"]);
        cluster.kill_osd(1);
        // Before it is marked out: its PGs run on two copies, and the volume says so.
        let at_risk = testkit::wait_until(Duration::from_secs(6), "the volume at risk", || {
            let redundancy = volume_redundancy();
            (redundancy["state"] == "at_risk" && redundancy["degraded_objects"].as_u64() > Some(0))
                .then_some(redundancy)
        });
        eprintln!("backfill: with one OSD down: {at_risk}");
        finish_fio(writer, "across the loss and the rebuild");
        wait_until(Duration::from_secs(60), "the osd marked out", || {
            let listing: Value = serde_json::from_str(&cli(&["osd", "ls", "--json", "--api", API])).expect("json");
            let osds = listing["osds"].as_array().unwrap().clone();
            osds.iter().any(|osd| osd["id"] == id && osd["out"] == true).then_some(())
        });
        wait_clean();
        assert_eq!(target_pgs(id), 0);
        let rebuilt = volume_redundancy();
        assert_eq!(
            (rebuilt["state"].as_str(), rebuilt["degraded_objects"].as_u64()),
            (Some("intact"), Some(0)),
            "{rebuilt}"
        );
        replicas_equal();
        run_fio(&dir, "64M", 24, &["--verify_only"]);
    });
}

#[test]
fn membership_changes_in_the_middle_of_a_backfill_lose_nothing() {
    isolated(|| {
        let mut cluster = Cluster::start(Store::Embedded, "backfill-twice", 3, 3, 2, "128M");
        let dir = cluster.scratch.path().to_path_buf();
        run_fio(&dir, "128M", 25, &["--iodepth=32", "--bs=128k"]);
        let writer = start_fio(&dir, "128M", 25, &["--iodepth=32", "--bs=128k"]);
        let fourth = cluster.add_osd();
        let fourth_id = cluster.osd_id(fourth);
        wait_until(Duration::from_secs(30), "a backfill under way", || {
            (status()["pgs"]["misplaced"].as_u64().unwrap_or(0) > 0).then_some(())
        });
        // A second change before the first is done: a fifth OSD joins, then the fourth goes out.
        let fifth = cluster.add_osd();
        cluster.osd_id(fifth);
        cli(&["osd", "out", &fourth_id.to_string(), "--api", API]);
        finish_fio(writer, "across the changes");
        wait_clean();
        assert_eq!(target_pgs(fourth_id), 0);
        replicas_equal();
        run_fio(&dir, "128M", 25, &["--iodepth=32", "--bs=128k", "--verify_only"]);
    });
}

/// An OSD that joined, took PGs and then gave up the copies it no longer needed (stray
/// removal, at a version above the one each copy had) gets those PGs back when the new OSD is
/// marked out: writes to objects it remembers deleting go through, not refused forever.
#[test]
fn pgs_return_to_an_osd_that_removed_its_copies_of_them() {
    isolated(|| {
        let mut cluster = Cluster::start(Store::Embedded, "backfill-return", 3, 3, 2, "64M");
        let dir = cluster.scratch.path().to_path_buf();
        run_fio(&dir, "64M", 27, &[]);
        let fourth = cluster.add_osd();
        let id = cluster.osd_id(fourth);
        wait_until(Duration::from_secs(30), "osd 4 in target sets", || (target_pgs(id) > 0).then_some(()));
        wait_clean();
        wait_until(Duration::from_secs(30), "stray copies removed", || {
            let held: usize = (0..4).map(|index| objects_held(&format!("127.0.0.{}:6800", index + 2))).sum();
            (held == 3 * 512).then_some(())
        });
        // The copies move back to the OSDs that removed them; writes go on meanwhile and after.
        let writer = start_fio(&dir, "64M", 27, &["--loops=2"]);
        cli(&["osd", "out", &id.to_string(), "--api", API]);
        // Refused copies once kept these writes waiting for good: bound the wait.
        finish_fio_within(writer, "across the move back", Duration::from_secs(120));
        wait_clean();
        assert_eq!(target_pgs(id), 0);
        replicas_equal();
        run_fio(&dir, "64M", 27, &["--verify_only"]);
    });
}
