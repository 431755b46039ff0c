//! Incremental backup with standard NBD tools only (ADR 0034), with real processes in a network
//! namespace: a full backup of a snapshot with `nbdcopy`; the extents changed since, listed by
//! `nbdinfo --map=qemu:dirty-bitmap:SNAP` on the later snapshot's export and by `basalt snapshot
//! diff`, exactly the pages written (writes, write-zeroes and a trim) and copied with `nbdsh`;
//! a second increment over a snapshot taken while fio writes the volume; the backup file then
//! equal to the last snapshot byte for byte (`qemu-img compare`), restored into a new volume with
//! `nbdcopy` and equal again. A clone against the snapshot it was made from. Then the bad input
//! `snapshot diff` and the export refuse.

mod common;

use std::path::Path;
use std::process::Command;

use common::cluster::*;
use common::{Store, BASALT};
use serde_json::Value;

const MIB: u64 = 1 << 20;
const KIB: u64 = 1 << 10;

fn export(name: &str) -> String {
    format!("nbd://127.0.0.1:10809/{name}")
}

fn run(command: &mut Command) -> String {
    let output = command.output().expect("run a tool");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{command:?} failed: {text}");
    String::from_utf8_lossy(&output.stdout).to_string()
}

fn qemu_io(name: &str, commands: &[&str]) {
    let mut command = Command::new("qemu-io");
    command.args(["-f", "raw"]);
    for each in commands {
        command.args(["-c", each]);
    }
    let text = run(command.arg(export(name)));
    assert!(!text.contains("failed"), "qemu-io {commands:?}: {text}");
}

/// The changed extents `nbdinfo` lists for `name` in its `qemu:dirty-bitmap:since` context,
/// merged, as `(offset, length)`; also saves nbdinfo's map to `map`.
fn dirty_map(name: &str, since: &str, map: &Path) -> Vec<(u64, u64)> {
    let text =
        run(Command::new("nbdinfo").args([&format!("--map=qemu:dirty-bitmap:{since}"), "--json", &export(name)]));
    std::fs::write(map, &text).expect("save the map");
    let entries: Vec<Value> = serde_json::from_str(&text).unwrap_or_else(|_| panic!("nbdinfo's map: {text}"));
    let mut extents: Vec<(u64, u64)> = Vec::new();
    for entry in entries {
        let (offset, length, kind) = (&entry["offset"], &entry["length"], &entry["type"]);
        let (offset, length, kind) = (offset.as_u64().unwrap(), length.as_u64().unwrap(), kind.as_u64().unwrap());
        if kind & 1 == 0 {
            continue;
        }
        match extents.last_mut() {
            Some(last) if last.0 + last.1 == offset => last.1 += length,
            _ => extents.push((offset, length)),
        }
    }
    extents
}

/// The extents `basalt snapshot diff` lists.
fn diff(from: &str, to: &str) -> Vec<(u64, u64)> {
    let text = cli(&["snapshot", "diff", from, to, "--json", "--api", API]);
    let view: Value = serde_json::from_str(&text).expect("json");
    let extents: Vec<(u64, u64)> = view["extents"]
        .as_array()
        .expect("extents")
        .iter()
        .map(|extent| (extent["offset_bytes"].as_u64().unwrap(), extent["length_bytes"].as_u64().unwrap()))
        .collect();
    assert_eq!(view["changed_bytes"].as_u64(), Some(extents.iter().map(|extent| extent.1).sum()), "{view}");
    extents
}

/// Copies the dirty extents of nbdinfo's `map` from export `name` into `backup` with nbdsh.
fn apply(name: &str, map: &Path, backup: &Path) {
    let script = format!(
        r#"
import json
extents = json.load(open({map:?}))
with open({backup:?}, "r+b") as backup:
    for extent in extents:
        if extent["type"] & 1 == 0:
            continue
        offset, left = extent["offset"], extent["length"]
        while left > 0:
            length = min(left, 8 << 20)
            backup.seek(offset)
            backup.write(h.pread(length, offset))
            offset += length
            left -= length
"#,
        map = map.to_str().unwrap(),
        backup = backup.to_str().unwrap()
    );
    // nbdsh runs `python3 -m nbd`: the distribution's python3 has the libnbd module, one earlier
    // in PATH (pyenv, a venv) may not.
    let path = format!("/usr/bin:{}", std::env::var("PATH").unwrap_or_default());
    run(Command::new("nbdsh").env("PATH", path).args(["-u", &export(name), "-c", &script]));
}

fn compare(left: &str, right: &str) {
    run(Command::new("qemu-img").args(["compare", "-f", "raw", "-F", "raw", left, right]));
}

/// `basalt ARGS`, expected to fail; returns its stderr.
fn refused(args: &[&str]) -> String {
    let output = Command::new(BASALT).args(args).args(["--api", API]).output().expect("run basalt");
    assert!(!output.status.success(), "basalt {args:?} succeeded: {}", String::from_utf8_lossy(&output.stdout));
    String::from_utf8_lossy(&output.stderr).to_string()
}

#[test]
fn an_incremental_backup_with_nbd_tools_restores_a_volume_byte_for_byte() {
    isolated(|| {
        let cluster = Cluster::start(Store::Embedded, "backup", 3, 3, 2, "64M");
        let dir = cluster.scratch.path().to_path_buf();
        let (backup, map) = (dir.join("backup.img"), dir.join("map.json"));
        let backup_path = backup.to_str().unwrap();

        // Objects of 128 KiB, some whole, some in part, most never written.
        qemu_io("v", &["write -P 0x21 0 8M", "write -P 0x22 20M 4M", "write -P 0x23 63M 1M"]);
        cli(&["snapshot", "create", "v@full", "--api", API]);
        run(Command::new("nbdcopy").args([&export("v@full"), backup_path]));

        // Pages written, zeroed and trimmed, inside written objects and beyond them.
        qemu_io(
            "v",
            &[
                "write -P 0x31 4k 4k",
                "write -P 0x32 1M 8k",
                "write -z 21M 64k",
                "discard 22M 128k",
                "write -P 0x33 30M 132k",
            ],
        );
        cli(&["snapshot", "create", "v@mon", "--api", API]);
        let written = vec![
            (4 * KIB, 4 * KIB),
            (MIB, 8 * KIB),
            (21 * MIB, 64 * KIB),
            (22 * MIB, 128 * KIB),
            (30 * MIB, 132 * KIB),
        ];
        assert_eq!(dirty_map("v@mon", "full", &map), written, "the export's dirty bitmap");
        assert_eq!(diff("v@full", "v@mon"), written, "snapshot diff");
        apply("v@mon", &map, &backup);
        compare(backup_path, &export("v@mon"));

        // The next snapshot is taken while fio overwrites the volume.
        let fio = start_fio(&dir, "64M", 5, &[]);
        std::thread::sleep(std::time::Duration::from_secs(2));
        cli(&["snapshot", "create", "v@tue", "--api", API]);
        finish_fio(fio, "while v@tue was taken");
        let changed = dirty_map("v@tue", "mon", &map);
        assert!(!changed.is_empty(), "fio wrote before v@tue");
        assert_eq!(diff("v@mon", "v@tue"), changed);
        apply("v@tue", &map, &backup);
        compare(backup_path, &export("v@tue"));
        // Two increments on from the full backup, as one.
        assert_eq!(
            diff("v@full", "v@tue").iter().map(|extent| extent.1).sum::<u64>(),
            dirty_map("v@tue", "full", &map).iter().map(|extent| extent.1).sum::<u64>()
        );

        // Restored into a new volume with the standard tools.
        cli(&["volume", "create", "r", "--size", "64M", "--pool", "p", "--api", API]);
        run(Command::new("nbdcopy").args([backup_path, &export("r")]));
        compare(&export("r"), &export("v@tue"));

        // Against the volume itself: nothing right after a snapshot, then one page.
        cli(&["snapshot", "create", "v@wed", "--api", API]);
        assert_eq!(diff("v@wed", "v"), Vec::new());
        qemu_io("v", &["write -P 0x41 40M 4k"]);
        assert_eq!(diff("v@wed", "v"), vec![(40 * MIB, 4 * KIB)]);
        assert_eq!(dirty_map("v", "wed", &map), vec![(40 * MIB, 4 * KIB)]);

        // A clone against the snapshot it was made from, which its export names with the volume.
        cli(&["volume", "clone", "v@mon", "c", "--api", API]);
        qemu_io("c", &["write -P 0x51 12M 8k"]);
        assert_eq!(diff("v@mon", "c"), vec![(12 * MIB, 8 * KIB)]);
        assert_eq!(dirty_map("c", "v@mon", &map), vec![(12 * MIB, 8 * KIB)]);
        assert_eq!(diff("v@full", "c").len(), written.len() + 1, "v@full is below the clone's parent");

        // Bad input: each refused with a message that names the problem.
        assert!(refused(&["snapshot", "diff", "v@tue", "v@mon"]).contains("older than"));
        assert!(refused(&["snapshot", "diff", "v@mon", "r"]).contains("different volumes"));
        assert!(refused(&["snapshot", "diff", "v@nosuch", "v@mon"]).contains("no snapshot named"));
        assert!(refused(&["snapshot", "diff", "v", "v@mon"]).contains("names no snapshot"));
        assert!(refused(&["snapshot", "diff", "v@mon", "v@mon"]).contains("itself"));
        // A context the export does not offer: a later snapshot's, or another volume's.
        for (name, context) in [("v@mon", "tue"), ("r", "mon")] {
            let output = Command::new("nbdinfo")
                .args([&format!("--map=qemu:dirty-bitmap:{context}"), &export(name)])
                .output()
                .expect("run nbdinfo");
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(!output.status.success(), "{name} offered qemu:dirty-bitmap:{context}");
            assert!(stderr.contains("qemu:dirty-bitmap:"), "{stderr}");
        }
    });
}
