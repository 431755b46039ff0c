//! `basalt dev` end to end with unmodified third-party clients, in a private network namespace:
//! the rig's interop checks (libnbd tools, qemu-img, qemu-io, nbdcopy), fio's verify run with a
//! SIGKILL of the whole cluster and a restart between writing and verifying, and PostgreSQL's
//! pgbench on ext4 on a volume (through nbdfuse and a loop device). Also: a second instance on
//! the same directory is refused, SIGTERM stops it within 5 seconds, and an OSD crashed and
//! started again through `basalt osd stop --crash` / `start` costs fio nothing.
//!
//! The rig scripts live in `../shared/rig` next to the repository (`BASALT_RIG_DIR` overrides);
//! their Debian packages are installed by `scripts/test.sh`.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use testkit::{wait_until, Proc, Scratch};

const BASALT: &str = env!("CARGO_BIN_EXE_basalt");
const NBD: &str = "127.0.0.1:10809";

fn rig() -> PathBuf {
    let dir = std::env::var_os("BASALT_RIG_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/rig"));
    assert!(dir.join("interop.sh").is_file(), "the rig scripts are not in {} (set BASALT_RIG_DIR)", dir.display());
    dir
}

fn start_dev(dir: &Path, log_dir: &Path, name: &str) -> Proc {
    let mut command = Command::new(BASALT);
    command.args(["dev", "--data"]).arg(dir).args(["--volume", "it=256M", "--volume", "pg=1G", "--volume", "map=64M"]);
    let mut dev = Proc::spawn(name, log_dir, &mut command);
    let log = log_dir.join(format!("{name}.log"));
    wait_until(Duration::from_secs(60), "basalt dev to print ready", || {
        dev.assert_running();
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.lines().any(|line| line.contains("ready") && line.contains(&format!("nbd://{NBD}/"))).then_some(())
    });
    dev
}

fn rig_script(script: &str, uri: &str, env: &[(&str, &str)], log_dir: &Path) {
    let path = rig().join(script);
    // Run in the log directory: fio-verify.sh leaves fio's verify state files in the working one.
    let output = Command::new("bash")
        .arg(&path)
        .arg(uri)
        .envs(env.iter().copied())
        .current_dir(log_dir)
        .output()
        .expect("run a rig script");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    std::fs::write(log_dir.join(format!("{script}.log")), &text).expect("keep the script's output");
    assert!(output.status.success(), "{script} {uri} {env:?} failed ({}):\n{text}", output.status);
}

#[test]
fn dev_cluster_passes_the_rig_and_survives_sigkill() {
    std::thread::spawn(|| {
        testkit::netns::enter_new();
        let scratch = Scratch::new("dev-rig");
        let data = scratch.join("cluster");
        let logs = scratch.path();
        let mut dev = start_dev(&data, logs, "dev-1");
        // Each OSD also serves on a Unix socket in the data directory (ADR 0013).
        let sockets: Vec<PathBuf> = (0..3).map(|index| data.join(format!("osd{index}.sock"))).collect();
        for socket in &sockets {
            let kind = std::fs::metadata(socket).map(|metadata| metadata.file_type().is_socket());
            assert!(matches!(kind, Ok(true)), "{} is not a socket: {kind:?}", socket.display());
        }

        // One instance per directory.
        let second = Command::new(BASALT)
            .args(["dev", "--data"])
            .arg(&data)
            .args(["--nbd", "127.0.0.1:10810", "--api", "127.0.0.1:8081", "--meta-listen", "127.0.0.1:2391"])
            .output()
            .expect("run a second basalt dev");
        let stderr = String::from_utf8_lossy(&second.stderr);
        assert!(!second.status.success(), "a second basalt dev on the same directory started");
        assert!(stderr.contains("another basalt dev"), "unclear refusal: {stderr}");

        // Block status: never-written objects are holes, a written one is data.
        let map_uri = format!("nbd://{NBD}/map");
        let written = Command::new("qemu-io")
            .args(["-f", "raw", "-c", "write -P 0x55 1M 4k"])
            .arg(&map_uri)
            .output()
            .expect("run qemu-io");
        assert!(written.status.success(), "qemu-io write failed: {}", String::from_utf8_lossy(&written.stderr));
        let map = Command::new("nbdinfo").args(["--map", &map_uri]).output().expect("run nbdinfo --map");
        let map = String::from_utf8_lossy(&map.stdout).into_owned();
        let extents: Vec<Vec<&str>> = map.lines().map(|line| line.split_whitespace().collect()).collect();
        let expected = [
            ["0", "1048576", "3", "hole,zero"],
            ["1048576", "131072", "0", "data"],
            ["1179648", "65929216", "3", "hole,zero"],
        ];
        assert_eq!(extents, expected.iter().map(|row| row.to_vec()).collect::<Vec<_>>(), "block status:\n{map}");

        let it = format!("nbd://{NBD}/it");
        rig_script("interop.sh", &it, &[("INTEROP_MAX_SIZE", "1G")], logs);
        let verify_env = [("VERIFY_SIZE", "128M"), ("VERIFY_SEED", "4242"), ("VERIFY_JOBS", "2")];
        rig_script("fio-verify.sh", &it, &[verify_env.as_slice(), &[("VERIFY_PHASE", "write")]].concat(), logs);
        // A power cut of the whole cluster: every acknowledged write must come back.
        dev.kill();
        let mut dev = start_dev(&data, logs, "dev-2");
        rig_script("fio-verify.sh", &it, &[verify_env.as_slice(), &[("VERIFY_PHASE", "verify")]].concat(), logs);

        // Failover on one machine: an OSD crashed through the API while fio writes, then started
        // again; nothing fails, everything verifies, every PG ends clean.
        let failover_env = [("VERIFY_SIZE", "64M"), ("VERIFY_SEED", "4343"), ("VERIFY_JOBS", "1")];
        let mut writer = Command::new("bash")
            .arg(rig().join("fio-verify.sh"))
            .arg(&it)
            .envs([failover_env.as_slice(), &[("VERIFY_PHASE", "write")]].concat())
            .current_dir(logs)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("start fio-verify.sh");
        std::thread::sleep(Duration::from_secs(2));
        assert!(testkit::run_ok(BASALT, &["osd", "stop", "1", "--crash"]).contains("stopped osd.1"));
        let refused = Command::new(BASALT).args(["osd", "stop", "1"]).output().expect("run basalt osd stop");
        assert!(String::from_utf8_lossy(&refused.stderr).contains("osd.1 is already stopped"), "{refused:?}");
        let unknown = Command::new(BASALT).args(["osd", "start", "99"]).output().expect("run basalt osd start");
        assert!(
            String::from_utf8_lossy(&unknown.stderr).contains("osd.99 does not run in this process"),
            "{unknown:?}"
        );
        std::thread::sleep(Duration::from_secs(2));
        assert!(testkit::run_ok(BASALT, &["osd", "start", "1"]).contains("started osd.1"));
        assert!(writer.wait().expect("fio-verify.sh").success(), "fio failed across the crash of osd.1");
        wait_until(Duration::from_secs(60), "every PG clean", || {
            let listing: serde_json::Value =
                serde_json::from_str(&testkit::run_ok(BASALT, &["pg", "ls", "--json"])).expect("json");
            listing["pgs"].as_array()?.iter().all(|pg| pg["state"] == "clean").then_some(())
        });
        rig_script("fio-verify.sh", &it, &[failover_env.as_slice(), &[("VERIFY_PHASE", "verify")]].concat(), logs);

        rig_script(
            "pgbench-on-nbd.sh",
            &format!("nbd://{NBD}/pg"),
            &[("PGBENCH_SCALE", "5"), ("PGBENCH_TIME", "5"), ("PGBENCH_CLIENTS", "4")],
            logs,
        );

        let (status, took) = dev.stop(libc::SIGTERM, Duration::from_secs(10));
        assert!(status.success(), "basalt dev exited with {status} on SIGTERM");
        assert!(took < Duration::from_secs(5), "basalt dev took {took:?} to stop on SIGTERM");
        // The killed run left its sockets behind and the restart replaced them; a clean stop
        // removes them.
        for socket in &sockets {
            assert!(!socket.exists(), "{} outlived a clean stop", socket.display());
        }
    })
    .join()
    .expect("dev test thread");
}
