//! `basalt engine bench`, the engine's benchmark: it formats with the journal size asked for,
//! prints one JSON object per workload in the shape the scripts read, and refuses a journal
//! size the format cannot hold with a line naming it.

use std::process::Command;

use testkit::Scratch;

const BASALT: &str = env!("CARGO_BIN_EXE_basalt");

#[test]
fn engine_bench_formats_with_the_journal_size_asked_for_and_prints_json() {
    let dir = Scratch::new("engine-bench-json");
    let data = dir.path().join("bench.img");
    let output = Command::new(BASALT)
        .args(["engine", "bench", "--data", data.to_str().expect("utf-8 path"), "--size", "96M"])
        .args(["--journal-size", "40M", "--runtime", "1", "--ramp", "0", "--json"])
        .args(["--workloads", "randwrite-4k-qd32,randread-4k-qd1"])
        .output()
        .expect("run basalt");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "engine bench failed: {stdout}{stderr}");
    assert!(stderr.contains("journal 40 MiB"), "journal size not applied: {stderr}");
    let rows: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON array");
    let rows = rows.as_array().expect("an array");
    let names: Vec<&str> = rows.iter().map(|row| row["workload"].as_str().expect("workload")).collect();
    assert_eq!(names, ["randread-4k-qd1", "randwrite-4k-qd32"], "the suite's order, reads first");
    for row in rows {
        let iops = row["iops"].as_f64().expect("iops");
        let mean = row["lat_mean_us"].as_f64().expect("lat_mean_us");
        let p99 = row["lat_p99_us"].as_f64().expect("lat_p99_us");
        assert!(iops > 0.0 && mean > 0.0 && p99 >= mean * 0.5, "implausible figures: {row}");
    }
}

#[test]
fn engine_bench_refuses_a_journal_size_the_format_cannot_hold() {
    let dir = Scratch::new("engine-bench-refuses");
    let data = dir.path().join("bench.img");
    for journal_size in ["5000", "1M"] {
        let output = Command::new(BASALT)
            .args(["engine", "bench", "--data", data.to_str().expect("utf-8 path"), "--size", "96M"])
            .args(["--journal-size", journal_size, "--runtime", "1"])
            .output()
            .expect("run basalt");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "--journal-size {journal_size} succeeded");
        assert!(stderr.contains("journal size"), "--journal-size {journal_size}: error does not name it: {stderr}");
        assert!(!data.exists(), "--journal-size {journal_size}: refused, yet created {}", data.display());
    }
}
