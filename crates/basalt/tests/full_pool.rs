//! A thin pool that fills (`nearfull_ratio_percent`, `full_ratio_percent`): three 512 MiB OSDs, a
//! 2 GiB volume written until the OSDs are full. The writer gets `No space left on device`, every
//! daemon stays up, `basalt status` names the full OSDs, older data still verifies and can be
//! overwritten; removing the volume gives its space back without a restart, and new writes work.

mod common;

use std::process::Command;
use std::time::Duration;

use common::cluster::*;
use common::Store;
use serde_json::Value;
use testkit::wait_until;

fn status() -> Value {
    serde_json::from_str(&cli(&["status", "--json", "--api", API])).expect("json")
}

fn full_osds() -> Vec<Value> {
    status()["osds_full"].as_array().expect("a list").clone()
}

/// fio writing `volume` sequentially in 1 MiB blocks from the start; returns whether it
/// succeeded and its output.
fn fill(dir: &std::path::Path, volume: &str, size: &str) -> (bool, String) {
    let output = Command::new("fio")
        .current_dir(dir)
        .args([
            "--name=fill",
            "--ioengine=nbd",
            &format!("--uri=nbd://127.0.0.1:10809/{volume}"),
            "--rw=write",
            "--bs=1M",
            "--iodepth=4",
            &format!("--size={size}"),
        ])
        .output()
        .expect("run fio");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success() && text.contains("err= 0"), text)
}

#[test]
fn a_full_pool_refuses_new_space_keeps_old_data_and_gets_space_back_when_a_volume_goes() {
    isolated(|| {
        let mut cluster = Cluster::start(Store::Embedded, "full-pool", 3, 3, 2, "64M");
        let dir = cluster.scratch.path().to_path_buf();
        // The older data: every block of `v` written and checked.
        run_fio(&dir, "64M", 31, &[]);
        cli(&["volume", "create", "filler", "--size", "2G", "--pool", "p", "--api", API]);
        let started = std::time::Instant::now();
        let (filled, text) = fill(&dir, "filler", "2G");
        assert!(!filled, "2 GiB fit on three 512 MiB OSDs: {text}");
        assert!(
            text.contains("No space left on device") || text.contains("error=28"),
            "the writer did not get no space: {text}"
        );
        eprintln!("full_pool: the writer got no space after {:?}", started.elapsed());
        for index in 0..3 {
            cluster.osds[index].as_mut().expect("a running osd").assert_running();
        }
        let full = full_osds();
        eprintln!("full_pool: status names {full:?}");
        assert!(full.iter().any(|osd| osd["state"] == "full"), "no OSD is reported full: {:?}", status());
        let shown = cli(&["status", "--api", API]);
        assert!(shown.contains("full: it takes no new objects"), "{shown}");

        // Overwrites of existing data go on, and every block of it verifies.
        run_fio(&dir, "64M", 32, &[]);
        run_fio(&dir, "64M", 32, &["--verify_only"]);

        // Removing the filler gives its space back without a restart.
        cli(&["volume", "rm", "filler", "--now", "--api", API]);
        let removed = std::time::Instant::now();
        wait_until(Duration::from_secs(90), "the space back", || full_osds().is_empty().then_some(()));
        eprintln!("full_pool: no OSD full {:?} after the volume was removed", removed.elapsed());
        cli(&["volume", "create", "after", "--size", "256M", "--pool", "p", "--api", API]);
        let (filled, text) = fill(&dir, "after", "256M");
        assert!(filled, "a new volume could not be written after the filler went: {text}");
        wait_clean();
        run_fio(&dir, "64M", 32, &["--verify_only"]);
        for index in 0..3 {
            cluster.osds[index].as_mut().expect("a running osd").assert_running();
        }
    });
}
