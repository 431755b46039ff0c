//! A killed OSD is known at once (ADR 0015): a client's connect to it is refused, the client
//! reports it to the mon, the mon's own connect is refused too, and the mon revokes its lease.
//! Real processes in a network namespace: `basalt mon` on its embedded store, three `basalt osd`
//! with leases of 60 s (so only the report can take a liveness key away in time), and
//! `basalt bench` reading.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{start_mon, Store, BASALT};
use testkit::{wait_until, Proc, Scratch};

const API: &str = "127.0.0.1:8080";

fn cli(args: &[&str]) -> String {
    testkit::run_ok(BASALT, args)
}

fn up_osds() -> Vec<u64> {
    common::up_osds(API)
}

#[test]
fn a_killed_osd_loses_its_lease_as_soon_as_a_client_finds_it_gone() {
    // The namespace belongs to this thread and whatever it starts.
    std::thread::spawn(|| {
        testkit::netns::enter_new();
        let scratch = Scratch::new("fast-down");
        let dir = scratch.path();
        let mon = start_mon(dir, API, Store::Embedded);
        let mut osds = Vec::new();
        for index in 0..3 {
            let data = dir.join(format!("osd{index}.img"));
            let data = data.to_str().expect("utf-8");
            cli(&["osd", "init", "--data", data, "--size", "256M", "--sparse"]);
            let listen = format!("127.0.0.{}:6800", index + 2);
            let mut command = Command::new(BASALT);
            command.args(["osd", "--etcd", &mon.meta_url, "--data", data, "--listen", &listen]);
            command.args(["--host", &format!("host{index}"), "--lease-ttl", "60"]);
            osds.push(Proc::spawn(&format!("osd{index}"), dir, &mut command));
        }
        wait_until(Duration::from_secs(60), "three OSDs up", || (up_osds().len() == 3).then_some(()));
        cli(&["pool", "create", "rep3", "--replicas", "3", "--min-size", "2", "--pgs", "16", "--api", API]);
        cli(&["volume", "create", "v", "--size", "64M", "--pool", "rep3", "--api", API]);

        let mut victim = osds.remove(0);
        victim.kill();
        let killed = Instant::now();
        // Reads at depth 16 reach every PG's primary, the killed one's among them.
        let mut bench = Proc::spawn(
            "bench",
            dir,
            Command::new(BASALT).args(["bench", "--api", API, "--volume", "v", "--rw", "randread"]).args([
                "--iodepth",
                "16",
                "--runtime",
                "5",
            ]),
        );
        wait_until(Duration::from_secs(20), "the killed OSD to be down", || (up_osds().len() == 2).then_some(()));
        let elapsed = killed.elapsed();
        assert!(elapsed < Duration::from_secs(10), "the killed OSD was down only after {elapsed:?}");
        let mon_log = mon.proc.log_tail(50);
        assert!(
            mon_log.lines().any(|line| line.contains("declared down") && line.contains("address=127.0.0.2:6800")),
            "the mon did not revoke the killed OSD's lease: {mon_log}"
        );
        for osd in &mut osds {
            osd.assert_running();
        }
        eprintln!("fast-down: the killed OSD was down {elapsed:?} after SIGKILL (its lease: 60 s)");
        bench.kill();
    })
    .join()
    .expect("the test thread");
}
