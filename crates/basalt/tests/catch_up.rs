//! Catch-up by changed pages (ADR 0023): real processes in a network namespace, one OSD killed
//! while fio writes random 4 KiB blocks through NBD, then started again. What the primaries send
//! it is counted by the OSDs themselves (`copied_bytes` in `basalt status`) and must stay within
//! 4x the bytes written meanwhile; every block verifies and the replicas end equal.

mod common;

use std::time::Duration;

use common::cluster::*;
use common::Store;
use serde_json::Value;
use testkit::wait_until;

const MIB: u64 = 1 << 20;

fn copied_bytes() -> u64 {
    let status: Value = serde_json::from_str(&cli(&["status", "--json", "--api", API])).expect("json");
    status["copied_bytes"].as_u64().expect("a count")
}

#[test]
fn a_member_back_from_a_short_outage_receives_only_the_pages_written_meanwhile() {
    isolated(|| {
        let mut cluster = Cluster::start(Store::Embedded, "catch-up-pages", 3, 3, 2, "128M");
        let dir = cluster.scratch.path().to_path_buf();
        // The first half of the volume written whole, so members hold older versions of those
        // objects; the writes below also create objects in the second half.
        run_fio(&dir, "64M", 30, &["--rw=write", "--bs=128k"]);
        wait_clean();
        assert_eq!(copied_bytes(), 0, "a cluster that lost nothing copied objects");

        let osd_id = cluster.osd_id(2);
        cluster.kill_osd(2);
        wait_until(Duration::from_secs(30), "the killed OSD down", || (!up_osds().contains(&osd_id)).then_some(()));
        let written = 12 * MIB;
        run_fio(&dir, "128M", 31, &[&format!("--io_size={written}")]);
        cluster.start_osd(2);
        wait_clean();

        let copied = copied_bytes();
        let whole = 128 * MIB;
        eprintln!(
            "catch-up: {copied} bytes sent for {written} bytes written meanwhile ({:.2}x; whole objects: up to {whole})",
            copied as f64 / written as f64
        );
        assert!(copied > 0, "the returning member received nothing");
        assert!(copied <= 4 * written, "{copied} bytes sent for {written} bytes written: more than 4x");
        replicas_equal();
        run_fio(&dir, "128M", 31, &[&format!("--io_size={written}"), "--verify_only"]);
    });
}
