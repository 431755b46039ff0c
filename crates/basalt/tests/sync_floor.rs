//! `basalt engine sync-floor`, the disk measurement the cluster and NBD benchmarks set their
//! replicated writes against: it runs on a real file system, reports sane figures, leaves no
//! file behind, and refuses bad arguments with a line naming them.

use std::process::Command;

use testkit::Scratch;

const BASALT: &str = env!("CARGO_BIN_EXE_basalt");

#[test]
fn sync_floor_reports_one_writer_and_lockstep_rounds_and_cleans_up() {
    let dir = Scratch::new("sync-floor-reports");
    let dir_text = dir.path().to_str().expect("utf-8 path");
    let output = Command::new(BASALT)
        .args(["-q", "engine", "sync-floor", "--dir", dir_text, "--writers", "2", "--runtime", "2"])
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
        (vec!["--dir", dir_text, "--runtime", "1"], "--runtime"),
        (vec!["--dir", dir_text, "--file-size", "1000"], "--file-size"),
        (vec!["--dir", missing.to_str().unwrap()], "missing"),
    ];
    for (args, named) in cases {
        let output = Command::new(BASALT).args(["engine", "sync-floor"]).args(&args).output().expect("run basalt");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(named), "{args:?}: error does not name {named}: {stderr}");
    }
}
