//! Real-process durability: `basalt engine torture` writes through `UringDisk` at queue depth
//! 16 and is killed with SIGKILL at a random moment; `basalt engine verify` then opens the
//! engine (replaying its journal) and checks every acknowledged write and delete against the
//! torture log. Several cycles run on the same file, so later cycles replay after a crash that
//! interrupted a replayed engine.
//!
//! `BASALT_KILL9_SEED=N` replays a run's timing and operation seeds; `BASALT_KILL9_CYCLES=N`
//! changes the number of cycles (default 4).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const BASALT: &str = env!("CARGO_BIN_EXE_basalt");
const CYCLES_DEFAULT: u32 = 4;
/// How long torture may take to acknowledge its first write before the test gives up.
const FIRST_ACK_TIMEOUT: Duration = Duration::from_secs(30);

/// A directory under the target's temporary directory (a real filesystem with O_DIRECT, unlike
/// some tmpfs mounts), removed when the test passes and kept for inspection when it fails.
struct Scratch {
    path: PathBuf,
    passed: bool,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if self.passed {
            let _ = std::fs::remove_dir_all(&self.path);
        } else {
            eprintln!("kill9: files kept in {}", self.path.display());
        }
    }
}

fn basalt(args: &[&str]) -> String {
    let output = Command::new(BASALT).args(args).output().expect("run basalt");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "basalt {} failed ({}):\n{stdout}{stderr}", args.join(" "), output.status);
    stdout
}

fn count_acks(log: &Path) -> usize {
    std::fs::read_to_string(log).map(|text| text.lines().filter(|line| line.starts_with("A ")).count()).unwrap_or(0)
}

/// Fails the test with torture's stderr if it has exited by itself (it only stops when killed).
fn assert_running(child: &mut Child, stderr_path: &Path, cycle: u32) {
    if let Some(status) = child.try_wait().expect("poll torture") {
        let stderr = std::fs::read_to_string(stderr_path).unwrap_or_default();
        panic!("cycle {cycle}: torture exited by itself ({status}) before the kill:\n{stderr}");
    }
}

#[test]
fn acknowledged_writes_survive_sigkill() {
    let seed: u64 = match std::env::var("BASALT_KILL9_SEED") {
        Ok(text) => text.parse().expect("BASALT_KILL9_SEED is a number"),
        Err(_) => {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock after 1970");
            now.as_nanos() as u64 ^ u64::from(std::process::id())
        }
    };
    let cycles: u32 =
        std::env::var("BASALT_KILL9_CYCLES").map_or(CYCLES_DEFAULT, |text| text.parse().expect("a number"));
    eprintln!("kill9: seed {seed} (set BASALT_KILL9_SEED={seed} to repeat), {cycles} cycles");
    let mut rng = SmallRng::seed_from_u64(seed);

    let mut scratch = Scratch {
        path: Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("kill9-{}-{seed}", std::process::id())),
        passed: false,
    };
    std::fs::create_dir_all(&scratch.path).expect("create the scratch directory");
    let data = scratch.path.join("engine.img");
    let log = scratch.path.join("torture.log");
    let data_text = data.to_str().expect("utf-8 path");
    let log_text = log.to_str().expect("utf-8 path");
    basalt(&["osd", "init", "--quiet", "--data", data_text, "--size", "256M", "--sparse"]);

    for cycle in 0..cycles {
        let torture_seed = rng.gen::<u64>().to_string();
        let stderr_path = scratch.path.join(format!("torture-{cycle}.stderr"));
        let acks_before = count_acks(&log);
        let mut child = Command::new(BASALT)
            .args(["engine", "torture", "--data", data_text, "--log", log_text, "--seed", &torture_seed])
            .stdout(Stdio::null())
            .stderr(File::create(&stderr_path).expect("create the stderr file"))
            .spawn()
            .expect("start torture");
        // Kill only once torture is writing: its open (and journal replay) comes first.
        let started = Instant::now();
        while count_acks(&log) == acks_before {
            assert_running(&mut child, &stderr_path, cycle);
            assert!(
                started.elapsed() < FIRST_ACK_TIMEOUT,
                "cycle {cycle}: torture acknowledged nothing in {FIRST_ACK_TIMEOUT:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let sleep = Duration::from_millis(rng.gen_range(500..=2000));
        std::thread::sleep(sleep);
        assert_running(&mut child, &stderr_path, cycle);
        // `Child::kill` sends SIGKILL on Unix: no destructor, no flush, no goodbye.
        child.kill().expect("SIGKILL torture");
        let status = child.wait().expect("reap torture");
        assert!(!status.success());
        let acks = count_acks(&log) - acks_before;
        let report = basalt(&["engine", "verify", "--quiet", "--data", data_text, "--log", log_text]);
        eprintln!(
            "kill9: cycle {cycle}: killed after {} ms with {acks} new acknowledgments; {}",
            sleep.as_millis(),
            report.trim()
        );
    }
    scratch.passed = true;
}
