//! `basalt engine sync-floor` and `read-floor`, the measurements the cluster and NBD benchmarks
//! set their replicated writes and their reads against: each runs on a real file system,
//! reports sane figures, leaves no file behind, and refuses bad arguments with a line naming
//! them.

use std::process::Command;

use testkit::Scratch;

const BASALT: &str = env!("CARGO_BIN_EXE_basalt");

/// `basalt engine FLOOR ARGS` fails for each case, its error naming what the case names.
fn refused(floor: &str, cases: &[(Vec<&str>, &str)]) {
    for (args, named) in cases {
        let output = Command::new(BASALT).args(["engine", floor]).args(args).output().expect("run basalt");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{floor} {args:?} succeeded");
        assert!(stderr.contains(named), "{floor} {args:?}: error does not name {named}: {stderr}");
    }
}

#[test]
fn sync_floor_reports_one_writer_and_lockstep_rounds_and_cleans_up() {
    let dir = Scratch::new("sync-floor-reports");
    let dir_text = dir.path().to_str().expect("utf-8 path");
    let output = Command::new(BASALT)
        .args(["-q", "engine", "sync-floor", "--dir", dir_text, "--writers", "2", "--runtime", "3"])
        .args(["--file-size", "1M", "--json"])
        .output()
        .expect("run basalt");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "sync-floor failed: {stdout}{}", String::from_utf8_lossy(&output.stderr));
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(report["writers"], 2);
    assert_eq!(report["windows"], 1);
    let one = report["one_writer_us"].as_f64().expect("one_writer_us");
    let lockstep = report["lockstep_us"].as_f64().expect("lockstep_us");
    // A write + fdatasync through a real file system takes microseconds to milliseconds, never
    // nothing and never a second.
    assert!(one > 1.0 && one < 1e6, "one writer: {one} us");
    assert!(lockstep > 1.0 && lockstep < 1e6, "lockstep: {lockstep} us");
    let ratio = report["ratio"].as_f64().expect("ratio");
    assert!((ratio - lockstep / one).abs() < 1e-9);
    // Two copies behind two round trips: at least one copy's durable write.
    let replicated = report["replicated_us"].as_f64().expect("replicated_us");
    assert!(replicated > one / 2.0 && replicated < 1e6, "replicated: {replicated} us against {one} us");
    let left: Vec<_> = std::fs::read_dir(dir.path()).expect("list scratch").collect();
    assert!(left.is_empty(), "files left behind: {left:?}");
}

#[test]
fn sync_floor_refuses_bad_arguments_naming_them() {
    let dir = Scratch::new("sync-floor-refuses");
    let dir_text = dir.path().to_str().expect("utf-8 path");
    let missing = dir.path().join("missing");
    let cases: [(Vec<&str>, &str); 5] = [
        (vec!["--dir", dir_text, "--writers", "0"], "--writers"),
        (vec!["--dir", dir_text, "--writers", "65"], "--writers"),
        (vec!["--dir", dir_text, "--runtime", "2"], "--runtime"),
        (vec!["--dir", dir_text, "--file-size", "1000"], "--file-size"),
        (vec!["--dir", missing.to_str().unwrap()], "missing"),
    ];
    refused("sync-floor", &cases);
}

#[test]
fn read_floor_reports_the_disk_and_a_round_trip_and_cleans_up() {
    let dir = Scratch::new("read-floor-reports");
    let dir_text = dir.path().to_str().expect("utf-8 path");
    let output = Command::new(BASALT)
        .args(["-q", "engine", "read-floor", "--dir", dir_text, "--runtime", "5", "--file-size", "4M", "--json"])
        .output()
        .expect("run basalt");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "read-floor failed: {stdout}{}", String::from_utf8_lossy(&output.stderr));
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(report["rounds"], 1);
    let figure = |name: &str| report[name].as_f64().unwrap_or_else(|| panic!("{name} in {report}"));
    for name in ["disk_us", "round_trip_free_us", "round_trip_one_cpu_us"] {
        assert!(figure(name) > 0.1 && figure(name) < 1e6, "{name}: {report}");
    }
    // The disk behind a round trip costs more than the round trip alone, and the floor is the
    // lower of the two placements.
    assert!(figure("disk_behind_round_trip_free_us") > figure("round_trip_free_us"), "{report}");
    let floor = figure("floor_us");
    assert_eq!(floor, figure("disk_behind_round_trip_free_us").min(figure("disk_behind_round_trip_one_cpu_us")));
    let left: Vec<_> = std::fs::read_dir(dir.path()).expect("list scratch").collect();
    assert!(left.is_empty(), "files left behind: {left:?}");
}

#[test]
fn read_floor_refuses_bad_arguments_naming_them() {
    let dir = Scratch::new("read-floor-refuses");
    let dir_text = dir.path().to_str().expect("utf-8 path");
    let missing = dir.path().join("missing");
    let cases: [(Vec<&str>, &str); 3] = [
        (vec!["--dir", dir_text, "--runtime", "4"], "--runtime"),
        (vec!["--dir", dir_text, "--file-size", "1000"], "--file-size"),
        (vec!["--dir", missing.to_str().unwrap()], "missing"),
    ];
    refused("read-floor", &cases);
}
