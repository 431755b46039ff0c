//! Snapshots, clones and rollback (ADR 0026) with real processes in a network namespace: data
//! written with `qemu-io` through NBD and, alike, into model files on the local filesystem;
//! `qemu-img compare` holds each export to its model after overwrites of the volume and of a
//! clone, whole-object trims over a parent, an OSD killed and its PGs recovered, a scrub that
//! repairs damaged copies, an OSD joining and the PGs moved onto it backfilled, and a rollback;
//! fio's `--verify=crc32c` holds a snapshot to what was written before it while the volume is
//! overwritten. The trash (ADR 0030): a volume with a snapshot removed, its name taken by a new
//! volume, restored under another name with its data and its snapshot's as fio wrote them,
//! purged by hand or on expiry with every object removed. `basalt volume du`'s counts of each
//! layer's objects and of what deleting it frees, with a clone reading through a snapshot. A group
//! snapshot of two volumes in two pools taken while two clients write with dependencies between
//! them holds one cut (ADR 0033). Then every bad input the commands refuse.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::cluster::*;
use common::{Store, BASALT};
use serde_json::Value;
use testkit::wait_until;

const MIB: u64 = 1 << 20;
const SIZE: u64 = 32 * MIB;

fn export(name: &str) -> String {
    format!("nbd://127.0.0.1:10809/{name}")
}

/// Runs `qemu-io` commands on `target` (an NBD URI or a file).
fn qemu_io(target: &str, commands: &[String]) -> std::process::Output {
    let mut command = Command::new("qemu-io");
    command.args(["-f", "raw"]);
    for each in commands {
        command.args(["-c", each]);
    }
    command.arg(target).output().expect("run qemu-io")
}

/// Applies `commands` to the export and to its model file alike.
fn write_both(name: &str, model: &Path, commands: &[String]) {
    for target in [export(name), model.to_str().expect("utf-8").to_string()] {
        let output = qemu_io(&target, commands);
        let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert!(output.status.success() && !text.contains("failed"), "qemu-io {commands:?} on {target}: {text}");
    }
}

/// The export reads exactly as its model.
fn same(name: &str, model: &Path) {
    let output = Command::new("qemu-img")
        .args(["compare", "-f", "raw", "-F", "raw", &export(name), model.to_str().expect("utf-8")])
        .output()
        .expect("run qemu-img");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{name} differs from its model: {text}");
}

/// fio through NBD on export `name`: 4 KiB random writes over all of it, each block written once
/// and checked (or only checked, with `--verify_only`); fails the test on any error.
fn fio_on(dir: &Path, name: &str, seed: u32, extra: &[&str]) {
    let output = Command::new("fio")
        .current_dir(dir)
        .args(["--name=snapshot", "--ioengine=nbd", &format!("--uri={}", export(name)), "--rw=randwrite"])
        .args(["--bs=4k", "--iodepth=8", "--verify=crc32c", "--verify_fatal=1", &format!("--randseed={seed}")])
        .args(extra)
        .output()
        .expect("run fio");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success() && text.contains("err= 0"), "fio on {name} (seed {seed}, {extra:?}): {text}");
}

fn model(dir: &Path, name: &str, from: Option<&Path>) -> PathBuf {
    let path = dir.join(format!("{name}.model"));
    match from {
        Some(from) => {
            std::fs::copy(from, &path).expect("copy a model");
        }
        None => std::fs::File::create(&path).and_then(|file| file.set_len(SIZE)).expect("a model file"),
    }
    path
}

/// `basalt ARGS`, expected to fail; returns its stderr.
fn refused(args: &[&str]) -> String {
    let output = Command::new(BASALT).args(args).args(["--api", API]).output().expect("run basalt");
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert!(!output.status.success(), "basalt {args:?} succeeded: {}", String::from_utf8_lossy(&output.stdout));
    stderr
}

fn api(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["--json", "--api", API]);
    serde_json::from_str(&cli(&all)).expect("json")
}

#[test]
fn snapshots_and_clones_keep_their_data_through_overwrites_failures_scrub_and_rollback() {
    isolated(|| {
        let mut cluster = Cluster::start(Store::Etcd, "snapshots", 3, 3, 2, "32M");
        let dir = cluster.scratch.path().to_path_buf();
        // fio's own check: a snapshot keeps what was written before it after the volume is
        // overwritten whole.
        cli(&["volume", "create", "f", "--size", "16M", "--pool", "p", "--api", API]);
        fio_on(&dir, "f", 7, &[]);
        cli(&["snapshot", "create", "f@a", "--api", API]);
        fio_on(&dir, "f", 8, &[]);
        fio_on(&dir, "f@a", 7, &["--verify_only"]);
        fio_on(&dir, "f", 8, &["--verify_only"]);

        let v = model(&dir, "v", None);
        // Whole objects, runs of pages and single pages, so objects hold some pages only.
        let first: Vec<String> = [
            "write -P 0x11 0 1M",
            "write -P 0x12 4M 4k",
            "write -P 0x13 4259840 8k",
            "write -P 0x14 9441280 124k",
            "write -P 0x15 20M 3M",
        ]
        .map(String::from)
        .to_vec();
        write_both("v", &v, &first);
        let snapshot = api(&["snapshot", "create", "v@s1"]);
        assert_eq!(snapshot["name"], "v@s1", "{snapshot}");
        let s1 = model(&dir, "s1", Some(&v));

        // Overwrites of pages the snapshot holds, pages it lacks in objects it holds, a whole
        // object trimmed and one zeroed over the snapshot's data: none of it shows in v@s1, and
        // the trimmed and zeroed objects read zeros in v, not the snapshot's data.
        let second: Vec<String> = [
            "write -P 0x21 4k 4k",
            "write -P 0x22 4202496 4k",
            "write -P 0x23 9M 4k",
            "discard 128k 128k",
            "write -z 21102592 128k",
            "write -P 0x24 30M 1M",
        ]
        .map(String::from)
        .to_vec();
        write_both("v", &v, &second);
        same("v", &v);
        same("v@s1", &s1);

        // The snapshot is a read-only export.
        let info: Value = serde_json::from_slice(
            &Command::new("nbdinfo").args(["--json", &export("v@s1")]).output().expect("nbdinfo").stdout,
        )
        .expect("nbdinfo json");
        assert_eq!(info["exports"][0]["is_read_only"], true, "{info}");
        let write = qemu_io(&export("v@s1"), &["write -P 0x99 0 4k".to_string()]);
        let text = format!("{}{}", String::from_utf8_lossy(&write.stdout), String::from_utf8_lossy(&write.stderr));
        assert!(text.contains("failed") || !write.status.success(), "a write to a snapshot went through: {text}");
        same("v@s1", &s1);

        // A clone reads the snapshot where it has not written.
        let clone = api(&["volume", "clone", "v@s1", "c"]);
        assert_eq!(clone["parent"], "v@s1", "{clone}");
        let c = model(&dir, "c", Some(&s1));
        let third: Vec<String> =
            ["write -P 0x31 512k 4k", "write -P 0x32 4206592 4k", "discard 21233664 128k", "write -P 0x33 10M 64k"]
                .map(String::from)
                .to_vec();
        write_both("c", &c, &third);
        same("c", &c);
        same("v@s1", &s1);
        same("v", &v);
        let info = api(&["volume", "info", "c"]);
        assert_eq!(info["chain"][0]["name"], "v@s1", "{info}");

        // An OSD killed while the clone and the volume are written: recovery and catch-up copy
        // what it lacks with its pages, and the clone still reads its parent where it never wrote.
        cluster.kill_osd(1);
        let fourth: Vec<String> =
            ["write -P 0x41 4210688 4k", "write -P 0x42 21M 4k", "write -P 0x43 0 64k"].map(String::from).to_vec();
        write_both("c", &c, &fourth);
        write_both("v", &v, &fourth);
        cluster.start_osd(1);
        wait_clean();
        same("c", &c);
        same("v", &v);
        same("v@s1", &s1);
        replicas_equal();

        // A scrub finds every copy alike, and after damage on one drive it repairs each copy
        // from a good one, keeping which pages it holds.
        let scrub: Value = serde_json::from_str(&cli(&["scrub", "--wait", "--json", "--api", API])).expect("json");
        assert_eq!(scrub["found"], 0, "{scrub}");
        let (status, _) = cluster.osds[2].take().expect("a running osd").stop(15, Duration::from_secs(30));
        assert!(status.success(), "osd 2 did not stop cleanly: {status:?}");
        damage_first_pages(&cluster.data(2));
        cluster.start_osd(2);
        wait_clean();
        let scrub: Value = serde_json::from_str(&cli(&["scrub", "--wait", "--json", "--api", API])).expect("json");
        assert!(scrub["found"].as_u64().unwrap() > 0, "the damage was not found: {scrub}");
        assert_eq!(scrub["unrepairable"], 0, "{scrub}");
        same("c", &c);
        same("v", &v);
        same("v@s1", &s1);
        replicas_equal();

        // A fourth OSD joins: the PGs placed onto it are backfilled, page masks and all, and the
        // members that left drop their copies; every export still reads as its model.
        let fourth = cluster.add_osd();
        let id = cluster.osd_id(fourth);
        wait_until(Duration::from_secs(30), "the fourth osd in target sets", || {
            pgs().iter().any(|pg| pg["target"].as_array().unwrap().iter().any(|member| member == id)).then_some(())
        });
        wait_clean();
        same("c", &c);
        same("v", &v);
        same("v@s1", &s1);
        replicas_equal();

        // A rollback: v reads as the snapshot again; its data since is deleted in the background.
        let rolled = api(&["volume", "rollback", "v@s1"]);
        assert_eq!(rolled["parent"], "v@s1", "{rolled}");
        same("v", &s1);
        let after_rollback: Vec<String> = ["write -P 0x51 8M 4k"].map(String::from).to_vec();
        let v = model(&dir, "v-rolled", Some(&s1));
        write_both("v", &v, &after_rollback);
        same("v", &v);
        same("c", &c);

        // Removing a snapshot that two layers read through (v's head and the clone): it is
        // hidden, both read as before, and its volume stays until the clone goes.
        cli(&["snapshot", "rm", "v@s1", "--api", API]);
        same("c", &c);
        same("v", &v);
        assert!(refused(&["snapshot", "info", "v@s1"]).contains("does not exist"));
        assert!(refused(&["volume", "clone", "v@s1", "c2"]).contains("does not exist"));
        let error = refused(&["volume", "rm", "v", "--now"]);
        assert!(error.contains("clones") && error.contains('c'), "{error}");
        cli(&["volume", "rm", "c", "--now", "--api", API]);
        cli(&["snapshot", "rm", "f@a", "--api", API]);
        cli(&["volume", "rm", "f", "--now", "--api", API]);
        let list = api(&["snapshot", "ls"]);
        assert_eq!(list["snapshots"].as_array().map(Vec::len), Some(0), "{list}");
        same("v", &v);
        cli(&["volume", "rm", "v", "--now", "--api", API]);
        // Every object of both families is gone: nothing is left on the drives.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while held_objects() > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "objects left after the families' removal: {:?}",
                objects_left()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    });
}

#[test]
fn a_volume_in_the_trash_keeps_its_data_until_restored_and_loses_it_when_purged() {
    isolated(|| {
        let cluster = Cluster::start(Store::Embedded, "trash", 3, 3, 2, "32M");
        let dir = cluster.scratch.path().to_path_buf();
        cli(&["volume", "rm", "v", "--now", "--api", API]);
        cli(&["volume", "create", "t", "--size", "8M", "--pool", "p", "--api", API]);
        fio_on(&dir, "t", 3, &[]);
        cli(&["snapshot", "create", "t@s", "--api", API]);
        fio_on(&dir, "t", 4, &[]);

        let removed = cli(&["volume", "rm", "t", "--api", API]);
        assert!(removed.contains("moved to the trash"), "{removed}");
        let trash = api(&["trash", "ls"]);
        assert_eq!(trash["entries"][0]["name"], "t", "{trash}");
        assert_eq!(trash["entries"][0]["snapshots"], serde_json::json!(["s"]), "{trash}");
        assert!(refused(&["volume", "info", "t"]).contains("does not exist"));
        // The name is free: a new volume takes it, with other data.
        cli(&["volume", "create", "t", "--size", "8M", "--pool", "p", "--api", API]);
        fio_on(&dir, "t", 5, &[]);
        assert!(refused(&["trash", "restore", "t"]).contains("exists"));
        let restored = cli(&["trash", "restore", "t", "--as", "t-old", "--api", API]);
        assert!(restored.contains("volume t-old restored"), "{restored}");
        // Everything as fio wrote it: the restored volume, its snapshot, the new volume.
        fio_on(&dir, "t-old", 4, &["--verify_only"]);
        fio_on(&dir, "t-old@s", 3, &["--verify_only"]);
        fio_on(&dir, "t", 5, &["--verify_only"]);

        // Purged by hand, and on expiry: no object of either family is left.
        cli(&["volume", "rm", "t-old", "--api", API]);
        let purged = cli(&["trash", "purge", "t-old", "--api", API]);
        assert!(purged.contains("purged t-old"), "{purged}");
        cli(&["config", "set", "trash_retention_s", "1", "--api", API]);
        cli(&["volume", "rm", "t", "--api", API]);
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while held_objects() > 0 || !api(&["trash", "ls"])["entries"].as_array().unwrap().is_empty() {
            assert!(std::time::Instant::now() < deadline, "objects left after the purges: {:?}", objects_left());
            std::thread::sleep(Duration::from_millis(250));
        }
        assert_eq!(api(&["volume", "ls"])["volumes"].as_array().map(Vec::len), Some(0));
    });
}

/// A group snapshot across two pools while two clients write with dependencies between them:
/// client X writes block i of `a` (in pool p), then client Y block i of `b` (in pool q), then
/// X block i + 1, each write only after the one before it was acknowledged. Whatever instant
/// the group's cut falls at, the snapshots hold a prefix of that order: `a@g` blocks 0..k and
/// `b@g` blocks 0..k or 0..k-1, nothing after, no hole.
#[test]
fn a_group_snapshot_holds_one_cut_across_two_pools_under_dependent_writes() {
    isolated(|| {
        let cluster = Cluster::start(Store::Embedded, "group", 3, 3, 2, "8M");
        cli(&["pool", "create", "q", "--replicas", "2", "--min-size", "1", "--pgs", "8", "--api", API]);
        cli(&["volume", "create", "a", "--size", "8M", "--pool", "p", "--api", API]);
        cli(&["volume", "create", "b", "--size", "8M", "--pool", "q", "--api", API]);
        const BLOCKS: u64 = 2048;
        let block =
            |i: u64| bytes::Bytes::from((0..1024).flat_map(|_| (i as u32 + 1).to_le_bytes()).collect::<Vec<u8>>());
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        let meta_url = cluster.mon.meta_url.clone();
        let (written, cut) = runtime.block_on(async move {
            let x = client::Client::connect(&meta_url).await.expect("client x");
            let y = client::Client::connect(&meta_url).await.expect("client y");
            let (a, b) = (x.open_volume("a").await.expect("open a"), y.open_volume("b").await.expect("open b"));
            // The writer's pairs done, and the pair it stops after: 64 past the snapshot's end,
            // so the cut falls inside the run.
            let progress = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
            let stop_after = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(BLOCKS));
            let (done, stop) = (progress.clone(), stop_after.clone());
            let writer = tokio::spawn(async move {
                for i in 0..BLOCKS {
                    a.write(i * 4096, block(i)).await.expect("x writes a");
                    b.write(i * 4096, block(i)).await.expect("y writes b");
                    done.store(i + 1, std::sync::atomic::Ordering::Relaxed);
                    if i + 1 >= stop.load(std::sync::atomic::Ordering::Relaxed) {
                        return i + 1;
                    }
                }
                BLOCKS
            });
            while progress.load(std::sync::atomic::Ordering::Relaxed) < 32 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let created =
                tokio::task::spawn_blocking(|| cli(&["snapshot", "create", "--group", "g", "a", "b", "--api", API]))
                    .await
                    .expect("the snapshot's thread");
            stop_after
                .store(progress.load(std::sync::atomic::Ordering::Relaxed) + 64, std::sync::atomic::Ordering::Relaxed);
            let written = writer.await.expect("the writer");
            (written, created)
        });
        assert!(cut.contains("created group snapshot g at one cut: a@g, b@g"), "{cut}");

        // Reads each snapshot back: the count of leading blocks as written, and nothing after.
        let prefix = |name: &str| -> u64 {
            let meta_url = cluster.mon.meta_url.clone();
            let name = name.to_string();
            runtime.block_on(async move {
                let client = client::Client::connect(&meta_url).await.expect("client");
                let snapshot = client.open_snapshot(&name).await.expect("open the snapshot");
                let data = snapshot.read(0, (BLOCKS * 4096) as u32).await.expect("read the snapshot");
                let held =
                    (0..BLOCKS).take_while(|&i| data[(i * 4096) as usize..][..4096] == block(i)[..]).count() as u64;
                assert!(
                    data[(held * 4096) as usize..].iter().all(|&byte| byte == 0),
                    "{name} holds block {held} or later without all before it"
                );
                held
            })
        };
        let (in_a, in_b) = (prefix("a@g"), prefix("b@g"));
        assert!(in_b == in_a || in_b + 1 == in_a, "the cut is not one instant: a@g holds {in_a} blocks, b@g {in_b}");
        assert!(in_a > 0 && in_a < written, "the cut fell outside the run: {in_a} of {written} blocks");

        // Listed and removed together; one alone, a group over an unknown volume, a name taken: refused.
        let list = api(&["snapshot", "ls"]);
        let grouped: Vec<&str> = list["snapshots"]
            .as_array()
            .expect("snapshots")
            .iter()
            .filter(|s| s["grouped"] == true)
            .map(|s| s["name"].as_str().unwrap())
            .collect();
        assert_eq!(grouped, ["a@g", "b@g"], "{list}");
        assert!(refused(&["snapshot", "rm", "a@g"]).contains("belongs to group snapshot \"g\""));
        assert!(refused(&["snapshot", "create", "--group", "h", "a", "nosuch"]).contains("does not exist"));
        assert!(refused(&["snapshot", "create", "--group", "g", "v"]).contains("already exists"));
        assert!(refused(&["snapshot", "create", "--group", "h", "a", "a"]).contains("named twice"));
        let unchanged = api(&["snapshot", "ls"]);
        assert_eq!(unchanged["snapshots"].as_array().map(Vec::len), Some(2), "{unchanged}");
        let removed = cli(&["snapshot", "rm", "--group", "g", "--api", API]);
        assert!(removed.contains("group snapshot g removed: a@g, b@g"), "{removed}");
        assert_eq!(api(&["snapshot", "ls"])["snapshots"].as_array().map(Vec::len), Some(0));
        cli(&["snapshot", "create", "--group", "g", "v", "--api", API]);
    });
}

/// `basalt volume du`: each layer's objects as the OSDs count them, and what deleting it
/// frees: a snapshot's objects that every layer reading through it holds a copy of.
#[test]
fn volume_du_counts_each_layers_objects_and_what_deleting_it_frees() {
    isolated(|| {
        let _cluster = Cluster::start(Store::Embedded, "du", 3, 3, 2, "4M");
        let kib = |layer: &Value, field: &str| layer[field].as_u64().expect("a byte count") / 1024;
        let usage = || {
            let view = api(&["volume", "du", "v"]);
            assert_eq!(view["osds_silent"], 0, "{view}");
            let layers = view["layers"].as_array().expect("layers").clone();
            let rows: Vec<(String, u64, u64)> = layers
                .iter()
                .map(|layer| {
                    (
                        layer["name"].as_str().expect("a name").to_string(),
                        kib(layer, "used_bytes"),
                        kib(layer, "exclusive_bytes"),
                    )
                })
                .collect();
            (rows, kib(&view, "used_bytes"))
        };
        let write = |target: &str, offset: &str, length: &str| {
            let output = qemu_io(&export(target), &[format!("write -P 7 {offset} {length}")]);
            assert!(output.status.success(), "qemu-io on {target}: {}", String::from_utf8_lossy(&output.stderr));
        };
        // Objects of 128 KiB: eight written, then three of them again (one by a single page).
        write("v", "0", "1M");
        cli(&["snapshot", "create", "v@a", "--api", API]);
        write("v", "0", "256K");
        write("v", "512K", "4K");
        cli(&["snapshot", "create", "v@b", "--api", API]);
        let (rows, total) = usage();
        assert_eq!(
            rows,
            [("v@a".to_string(), 1024, 384), ("v@b".to_string(), 384, 0), ("v".to_string(), 0, 0)],
            "a's objects that b holds too are freed with it; b's are read through by the empty head"
        );
        assert_eq!(total, 1408);

        // The head takes one object of b's; a clone of a reads through a beside b.
        write("v", "0", "4K");
        cli(&["volume", "clone", "v@a", "c", "--api", API]);
        let (rows, total) = usage();
        assert_eq!(
            rows,
            [("v@a".to_string(), 1024, 0), ("v@b".to_string(), 384, 128), ("v".to_string(), 128, 128)],
            "nothing of a is freed while the clone holds none of its objects"
        );
        assert_eq!(total, 1536);
        write("c", "0", "4K");
        assert_eq!(usage().0[0], ("v@a".to_string(), 1024, 128), "object 0 is in b and in the clone");

        // Every volume at once, and the table.
        let all = api(&["volume", "du"]);
        let names: Vec<&str> =
            all["volumes"].as_array().expect("volumes").iter().map(|v| v["volume"].as_str().unwrap()).collect();
        assert_eq!(names, ["c", "v"], "{all}");
        let table = cli(&["volume", "du", "v", "--api", API]);
        assert!(table.contains("FREED IF DELETED") && table.contains("v@b") && table.contains("v (all)"), "{table}");
        assert!(refused(&["volume", "du", "nosuch"]).contains("does not exist"));
    });
}

/// The objects every OSD holds, by its Space answer.
fn held_objects() -> u64 {
    let listing = api(&["osd", "ls"]);
    let osds = listing["osds"].as_array().expect("osds");
    osds.iter()
        .map(|osd| match call(osd["address"].as_str().expect("an address"), 0, wire::Request::Space) {
            wire::Response::Space { object_count, .. } => object_count,
            other => panic!("a Space reply {other:?}"),
        })
        .sum()
}

/// Every object each PG's members list, as `(osd, inode, stripe, version)`.
fn objects_left() -> Vec<(u64, u64, u64, u64)> {
    let listing = api(&["osd", "ls"]);
    let osds = listing["osds"].as_array().expect("osds").clone();
    let mut left = Vec::new();
    for pg in pgs() {
        let id = wire::PgId { pool: pg["pool"].as_u64().unwrap() as u32, pg: pg["pg"].as_u64().unwrap() as u32 };
        let epoch = pg["epoch"].as_u64().unwrap();
        for osd in &osds {
            let start = wire::ObjectId { inode: 0, stripe: 0 };
            let request = wire::Request::SecList { pg: id, start, count_max: 100_000 };
            if let wire::Response::SecList { entries } = call(osd["address"].as_str().unwrap(), epoch, request) {
                let id = osd["id"].as_u64().unwrap();
                left.extend(entries.iter().map(|entry| (id, entry.object.inode, entry.object.stripe, entry.version)));
            }
        }
    }
    left
}

/// Damages the first page of every data block of a stopped OSD's drive.
fn damage_first_pages(data: &str) {
    use std::io::{Seek, SeekFrom, Write};
    let info: Value = serde_json::from_str(&cli(&["osd", "info", "--data", data, "--json"])).expect("json");
    let data_offset = info["data_offset_bytes"].as_u64().expect("a data offset");
    let object_size = info["object_size_bytes"].as_u64().expect("an object size");
    let blocks = info["block_count"].as_u64().expect("a block count");
    let mut file = std::fs::OpenOptions::new().write(true).open(data).expect("open the drive");
    for block in 0..blocks.min(4096) {
        file.seek(SeekFrom::Start(data_offset + block * object_size)).expect("seek");
        file.write_all(&[0xee; 4096]).expect("damage");
    }
    file.sync_all().expect("sync");
}

/// A POST to the API with a JSON body; returns the whole HTTP answer.
fn post(path: &str, body: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(API).expect("connect to the API");
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {API}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read the answer");
    answer
}

#[test]
fn snapshot_commands_refuse_bad_input_and_change_nothing() {
    isolated(|| {
        let _cluster = Cluster::start(Store::Embedded, "snapshots-bad-input", 3, 3, 2, "8M");
        cli(&["volume", "create", "w", "--size", "4M", "--pool", "p", "--api", API]);
        cli(&["snapshot", "create", "v@one", "--api", API]);
        cli(&["snapshot", "create", "w@one", "--api", API]);
        cli(&["pool", "create", "q", "--replicas", "2", "--pgs", "8", "--api", API]);
        for (args, expect) in [
            (vec!["snapshot", "create", "v"], "VOLUME@SNAPSHOT"),
            (vec!["snapshot", "create", "v@"], "VOLUME@SNAPSHOT"),
            (vec!["snapshot", "create", "@s"], "VOLUME@SNAPSHOT"),
            (vec!["snapshot", "create", "v@a@b"], "VOLUME@SNAPSHOT"),
            (vec!["snapshot", "create", "v@a/b"], "'/'"),
            (vec!["snapshot", "create", &format!("v@{}", "x".repeat(65))], "1 to 64"),
            (vec!["snapshot", "create", "nosuch@s"], "does not exist"),
            (vec!["snapshot", "create", "v@one"], "already exists"),
            (vec!["snapshot", "info", "v@nosuch"], "does not exist"),
            (vec!["snapshot", "rm", "v@nosuch"], "does not exist"),
            (vec!["snapshot", "ls", "nosuch"], "does not exist"),
            (vec!["volume", "clone", "v@one", "w"], "already exists"),
            (vec!["volume", "clone", "v@nosuch", "x"], "does not exist"),
            (vec!["volume", "clone", "v@one", "x", "--pool", "q"], "must be in its pool"),
            (vec!["volume", "clone", "v@one", "bad/name"], "'/'"),
            (vec!["volume", "rollback", "w@nosuch"], "does not exist"),
            (vec!["volume", "rm", "v", "--now"], "snapshot"),
        ] {
            let error = refused(&args);
            assert!(error.contains(expect), "basalt {args:?}: expected {expect:?} in {error:?}");
        }
        // A rollback to another volume's snapshot, through the API (the CLI names the volume by
        // the snapshot's).
        let answer = post("/api/v1/volumes/v/rollback", r#"{"snapshot": "w@one"}"#);
        assert!(answer.starts_with("HTTP/1.1 400") && answer.contains("not a snapshot of volume"), "{answer}");
        // A chain past snapshot_chain_max.
        cli(&["config", "set", "snapshot_chain_max", "2", "--api", API]);
        cli(&["snapshot", "create", "v@two", "--api", API]);
        let error = refused(&["snapshot", "create", "v@three"]);
        assert!(error.contains("snapshot_chain_max"), "{error}");
        // Nothing was changed by any refusal.
        let list = api(&["snapshot", "ls"]);
        let names: Vec<&str> =
            list["snapshots"].as_array().expect("a list").iter().map(|s| s["name"].as_str().expect("a name")).collect();
        assert_eq!(names, ["v@one", "v@two", "w@one"], "{list}");
        let volumes = api(&["volume", "ls"]);
        assert_eq!(volumes["volumes"].as_array().map(Vec::len), Some(2), "{volumes}");
    });
}
