//! Scrub and repair (`docs/design/scrub.md`): real processes in a network namespace, fio
//! reading and verifying through NBD. One OSD's data file damaged while it is stopped: client
//! reads return correct data, `basalt scrub --wait` finds and repairs the damage, a second
//! scrub finds nothing. Then a primary's data file damaged while it runs (rot under a live
//! OSD): client reads of the damaged blocks return correct data, repaired on the spot.

mod common;

use std::io::{Seek, SeekFrom, Write};
use std::time::Duration;

use common::cluster::*;
use common::Store;
use serde_json::Value;

fn isolated(test: impl FnOnce() + Send + 'static) {
    std::thread::spawn(test).join().expect("the test thread");
}

/// Overwrites the second 4 KiB page of every `stride`-th data block of the drive at `data`
/// with garbage, used or not; returns how many pages it damaged.
fn damage(data: &str, stride: u64) -> u64 {
    let info: Value = serde_json::from_str(&cli(&["osd", "info", "--data", data, "--json"])).expect("json");
    let data_offset = info["data_offset_bytes"].as_u64().unwrap_or_else(|| panic!("no data offset in {info}"));
    let object_size = info["object_size_bytes"].as_u64().expect("an object size");
    let blocks = info["block_count"].as_u64().expect("a block count");
    let mut file = std::fs::OpenOptions::new().write(true).open(data).expect("open the drive");
    let garbage: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let mut damaged = 0;
    for block in (0..blocks).step_by(stride as usize) {
        file.seek(SeekFrom::Start(data_offset + block * object_size + 4096)).expect("seek");
        file.write_all(&garbage).expect("write garbage");
        damaged += 1;
    }
    file.sync_all().expect("sync the drive");
    damaged
}

fn scrub() -> Value {
    serde_json::from_str(&cli(&["scrub", "--wait", "--json", "--api", API])).expect("json")
}

#[test]
fn damaged_copies_are_repaired_by_client_reads_and_by_scrub() {
    isolated(|| {
        let mut cluster = Cluster::start(Store::Embedded, "scrub-damage", 3, 3, 2, "64M");
        let dir = cluster.scratch.path().to_path_buf();
        run_fio(&dir, "64M", 31, &[]);
        // A clean stop writes the journal back: every object is in its data block.
        let (status, _) = cluster.osds[1].take().expect("a running osd").stop(15, Duration::from_secs(30));
        assert!(status.success(), "osd 1 did not stop cleanly: {status:?}");
        // 64 MiB in 128 KiB objects: 512 of its blocks hold data; about a quarter of them are hit.
        let damaged = damage(&cluster.data(1), 4);
        cluster.start_osd(1);
        wait_clean();

        // Every block read back through NBD verifies (osd 1 came back behind the primaries its
        // PGs have now, so the damage is on copies clients do not read).
        run_fio(&dir, "64M", 31, &["--verify_only"]);

        let first = scrub();
        eprintln!("scrub: {damaged} pages damaged; first scrub {first}");
        let found = first["found"].as_u64().unwrap();
        assert!(found > 0 && found <= damaged, "{first}");
        assert_eq!(first["repaired"].as_u64(), Some(found), "{first}");
        assert_eq!(first["unrepairable"].as_u64(), Some(0), "{first}");
        assert_eq!(first["pgs_done"], first["pgs_total"]);
        let second = scrub();
        assert_eq!(second["found"].as_u64(), Some(0), "{second}");
        assert!(second["objects"].as_u64().unwrap() >= 512, "{second}");

        // The results are kept per PG and summed in the status.
        let status: Value = serde_json::from_str(&cli(&["status", "--json", "--api", API])).expect("json");
        assert_eq!(status["scrub"]["pgs_scrubbed"], 16, "{status}");
        assert_eq!(status["scrub"]["unrepairable"], 0, "{status}");
        assert!(pgs().iter().all(|pg| pg["scrub"]["found"] == 0), "the second scrub's results are not listed");
        replicas_equal();

        // Rot under a running primary: osd 0 leads PGs now. Every read of a damaged block is
        // answered with the good data, and rewrites the copy, so the next scrub finds nothing.
        let osd0 = cluster.osd_id(0);
        let led: Vec<(u64, u64)> = pgs()
            .iter()
            .filter(|pg| pg["primary"] == osd0)
            .map(|pg| (pg["pool"].as_u64().unwrap(), pg["pg"].as_u64().unwrap()))
            .collect();
        assert!(!led.is_empty(), "osd 0 leads no PG");
        let rotten = damage(&cluster.data(0), 3);
        run_fio(&dir, "64M", 31, &["--verify_only"]);
        let log = cluster.osd(0).log_tail(4000);
        let repairs = log.matches("repairing a copy that cannot be read").count();
        eprintln!("scrub: {rotten} pages of a running primary damaged; {repairs} repaired by client reads");
        assert!(repairs > 0, "no client read repaired a copy: {log}");
        // Its copies in the PGs it leads were all read, so repaired; its other copies are the
        // scrub's to find.
        let third = scrub();
        for pg in third["pgs"].as_array().unwrap() {
            let id = (pg["pool"].as_u64().unwrap(), pg["pg"].as_u64().unwrap());
            if led.contains(&id) {
                assert_eq!(pg["found"], 0, "client reads left damage behind in {id:?}: {pg}");
            }
        }
        assert!(third["found"].as_u64().unwrap() > 0 && third["unrepairable"] == 0, "{third}");
        assert_eq!(scrub()["found"].as_u64(), Some(0));
        run_fio(&dir, "64M", 31, &["--verify_only"]);

        // One PG, one volume, and bad names.
        let one: Value =
            serde_json::from_str(&cli(&["scrub", "--pg", "1.3", "--wait", "--json", "--api", API])).unwrap();
        assert_eq!((one["pgs_total"].as_u64(), one["found"].as_u64()), (Some(1), Some(0)), "{one}");
        let volume: Value =
            serde_json::from_str(&cli(&["scrub", "--volume", "v", "--wait", "--json", "--api", API])).unwrap();
        assert!(volume["objects"].as_u64().unwrap() >= 512, "{volume}");
        let output = std::process::Command::new(common::BASALT)
            .args(["scrub", "--pool", "nope", "--api", API])
            .output()
            .expect("run basalt");
        assert!(!output.status.success());
        assert!(String::from_utf8_lossy(&output.stderr).contains("no pool named \"nope\""));
    });
}
