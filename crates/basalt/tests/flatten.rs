//! Flatten (ADR 0035) with real processes in a network namespace: a clone of a snapshot, written
//! in part, flattened while fio writes and verifies half of it and one OSD is killed and started
//! again midway; its progress in `basalt volume info` and `basalt status` meanwhile, and a
//! snapshot of it refused; then the clone has no parent and reads, byte for byte, what it read
//! before (its own writes over the snapshot's data), fio's half verified. The volume it was
//! cloned from is then removed with its snapshot, and the clone still reads the same. Then the
//! bad input `volume flatten` refuses.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::cluster::*;
use common::{Store, BASALT};
use serde_json::Value;
use testkit::wait_until;

const MIB: u64 = 1 << 20;
const HALF: u64 = 16 * MIB;

fn export(name: &str) -> String {
    format!("nbd://127.0.0.1:10809/{name}")
}

/// Runs `qemu-io` commands on an NBD export and on a model file alike.
fn write_both(name: &str, model: &Path, commands: &[&str]) {
    for target in [export(name), model.to_str().unwrap().to_string()] {
        let mut command = Command::new("qemu-io");
        command.args(["-f", "raw"]);
        for each in commands {
            command.args(["-c", each]);
        }
        let output = command.arg(&target).output().expect("run qemu-io");
        let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert!(output.status.success() && !text.contains("failed"), "qemu-io {commands:?} on {target}: {text}");
    }
}

/// The first half of export `name` reads as `model` does.
fn first_half_same(dir: &Path, name: &str, model: &Path) {
    let copy = dir.join("copy.img");
    let output = Command::new("nbdcopy").args([&export(name), copy.to_str().unwrap()]).output().expect("run nbdcopy");
    assert!(output.status.success(), "nbdcopy: {}", String::from_utf8_lossy(&output.stderr));
    let output = Command::new("cmp")
        .args(["-n", &HALF.to_string(), copy.to_str().unwrap(), model.to_str().unwrap()])
        .output()
        .expect("run cmp");
    assert!(output.status.success(), "{name} differs from its model: {}", String::from_utf8_lossy(&output.stdout));
}

/// fio through NBD on the second half of export `name`: 4 KiB random writes, each block once,
/// every one checked; or only checked.
fn fio_second_half(dir: &Path, name: &str, extra: &[&str]) -> Command {
    let mut command = Command::new("fio");
    command
        .current_dir(dir)
        .args(["--name=flatten", "--ioengine=nbd", &format!("--uri={}", export(name)), "--rw=randwrite"])
        .args(["--bs=4k", "--iodepth=4", "--verify=crc32c", "--verify_fatal=1", "--randseed=11"])
        .args([&format!("--offset={HALF}"), &format!("--size={HALF}"), "--rate_iops=1500"])
        .args(extra);
    command
}

fn volume(name: &str) -> Value {
    serde_json::from_str(&cli(&["volume", "info", name, "--json", "--api", API])).expect("json")
}

/// `basalt ARGS`, expected to fail; returns its stderr.
fn refused(args: &[&str]) -> String {
    let output = Command::new(BASALT).args(args).args(["--api", API]).output().expect("run basalt");
    assert!(!output.status.success(), "basalt {args:?} succeeded: {}", String::from_utf8_lossy(&output.stdout));
    String::from_utf8_lossy(&output.stderr).to_string()
}

#[test]
fn a_clone_flattened_under_load_and_an_osd_kill_keeps_its_data_and_loses_its_parent() {
    isolated(|| {
        let mut cluster = Cluster::start(Store::Embedded, "flatten", 3, 3, 2, "32M");
        let dir = cluster.scratch.path().to_path_buf();
        let model = dir.join("c.model");
        std::fs::File::create(&model).and_then(|file| file.set_len(2 * HALF)).expect("a model file");

        // The golden image: whole objects, runs of pages and single pages, over both halves.
        let gold = ["write -P 0x11 0 4M", "write -P 0x12 6M 12k", "write -P 0x13 9441280 124k", "write -P 0x14 14M 6M"];
        write_both("v", &model, &gold);
        cli(&["snapshot", "create", "v@gold", "--api", API]);
        cli(&["volume", "clone", "v@gold", "c", "--api", API]);
        // The clone's own pages, over the golden image's and beside them.
        write_both("c", &model, &["write -P 0x21 8k 8k", "write -P 0x22 6M 4k", "write -P 0x23 12M 1M"]);
        // The volume moves on: the clone must not see it.
        cli(&["snapshot", "create", "v@later", "--api", API]);
        let output = Command::new("qemu-io")
            .args(["-f", "raw", "-c", "write -P 0x31 0 8M", &export("v")])
            .output()
            .expect("run qemu-io");
        assert!(output.status.success());
        assert_eq!(volume("c")["parent"], "v@gold");

        let fio = fio_second_half(&dir, "c", &[])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start fio");
        std::thread::sleep(Duration::from_secs(1));
        cluster.kill_osd(1);
        let started = cli(&["volume", "flatten", "c", "--no-wait", "--api", API]);
        assert!(started.contains("is being flattened"), "{started}");
        // While the killed OSD's PGs fail over, the flatten runs and shows its progress.
        assert!(refused(&["snapshot", "create", "c@during"]).contains("being flattened"));
        let shown = wait_until(Duration::from_secs(30), "the flatten's progress", || {
            let view = volume("c");
            (view["state"] == "flattening" && view["flatten"]["pg_count"] == 16).then_some(view)
        });
        assert!(shown["flatten"]["pgs_done"].as_u64().unwrap() <= 16, "{shown}");
        let status = cli(&["status", "--api", API]);
        assert!(status.contains("flatten   c:") || volume("c")["parent"].is_null(), "{status}");
        std::thread::sleep(Duration::from_secs(2));
        cluster.start_osd(1);
        wait_until(Duration::from_secs(120), "the flatten's end", || volume("c")["parent"].is_null().then_some(()));
        assert_eq!(volume("c")["state"], "ready");
        finish_fio(fio, "during the flatten");
        wait_clean();

        // Everything the clone read before, now from its own layer.
        first_half_same(&dir, "c", &model);
        fio_done(fio_second_half(&dir, "c", &["--verify_only"]));
        let chain = volume("c")["chain"].as_array().map_or(0, Vec::len);
        assert_eq!(chain, 0, "the head reads through nothing");

        // The golden image can go now, with its snapshots; the clone keeps its data.
        cli(&["snapshot", "rm", "v@gold", "--api", API]);
        cli(&["snapshot", "rm", "v@later", "--api", API]);
        cli(&["volume", "rm", "v", "--now", "--api", API]);
        first_half_same(&dir, "c", &model);
        fio_done(fio_second_half(&dir, "c", &["--verify_only"]));
        cli(&["snapshot", "create", "c@after", "--api", API]);

        // A flatten of a volume over its own snapshot cuts it from that snapshot too.
        cli(&["volume", "flatten", "c", "--api", API]);
        assert!(volume("c")["parent"].is_null());
        first_half_same(&dir, "c", &model);

        // Bad input.
        assert!(refused(&["volume", "flatten", "c"]).contains("nothing to flatten"));
        assert!(refused(&["volume", "flatten", "nosuch"]).contains("does not exist"));
    });
}

/// Runs fio to its end and fails the test, with its output, on any I/O or verify error.
fn fio_done(mut command: Command) {
    let output = command.output().expect("run fio");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success() && text.contains("err= 0"), "fio: {text}");
}
