//! What Basalt's multi-process tests share.
//!
//! - [`netns::enter_new`]: moves the calling thread into a fresh network namespace with `lo` up,
//!   so a test can run servers on 127.0.0.2, 127.0.0.3, ... on fixed ports without meeting
//!   any other test; children and threads started afterwards from that thread inherit it.
//! - [`Etcd`]: a real etcd (Debian's `etcd-server`) on a loopback address with a temporary
//!   data directory. A missing binary fails the test: a skipped test would let breakage pass.
//! - [`Scratch`]: a directory on a filesystem that supports `O_DIRECT`, kept on failure.
//! - [`Proc`]: a child process with its output in a log file, killed when dropped.

pub mod netns;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Runs `program` with `args` to completion and returns its stdout; panics with its output if
/// it fails.
pub fn run_ok(program: &str, args: &[&str]) -> String {
    let output = std::process::Command::new(program).args(args).output().expect("run the program");
    assert!(
        output.status.success(),
        "{program} {} failed: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Polls `condition` every 20 ms until it returns `Some`, or panics with `what` after `timeout`.
pub fn wait_until<T>(timeout: Duration, what: &str, mut condition: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = condition() {
            return value;
        }
        assert!(start.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A directory for a test's files under the target directory (a real filesystem, where
/// `O_DIRECT` works, unlike some tmpfs mounts). Removed when the test passed, kept otherwise.
pub struct Scratch {
    path: PathBuf,
}

impl Scratch {
    /// `name` should be unique per test; a leftover directory of that name is removed first.
    pub fn new(name: &str) -> Scratch {
        let base = std::env::var_os("CARGO_TARGET_TMPDIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| std::env::temp_dir().join("basalt-tests"));
        let path = base.join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
        Scratch { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("test files kept in {}", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// A running child process whose stdout and stderr go to `<dir>/<name>.log`; killed (SIGKILL)
/// when dropped. On a failing test the log tail is printed, so the failure explains itself.
pub struct Proc {
    name: String,
    child: Option<Child>,
    log: PathBuf,
}

impl Proc {
    pub fn spawn(name: &str, dir: &Path, command: &mut Command) -> Proc {
        let log = dir.join(format!("{name}.log"));
        let file = File::options().create(true).append(true).open(&log).expect("open the process log");
        let child = command
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log handle"))
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("start {name} ({command:?}): {e}"));
        Proc { name: name.to_string(), child: Some(child), log }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(lines).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    }

    /// Panics with the log if the process has exited.
    pub fn assert_running(&mut self) {
        if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().expect("poll child")) {
            panic!("{} exited with {status}; log:\n{}", self.name, self.log_tail(40));
        }
    }

    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().expect("poll child"))
    }

    pub fn signal(&self, signal: i32) {
        if let Some(child) = &self.child {
            // SAFETY: kill(2) on a child we spawned and have not reaped: the pid is ours.
            unsafe { libc::kill(child.id() as i32, signal) };
        }
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends `signal` and waits up to `timeout` for the exit, returning the status and the time
    /// it took; panics with the log if the process does not exit.
    pub fn stop(&mut self, signal: i32, timeout: Duration) -> (ExitStatus, Duration) {
        let start = Instant::now();
        self.signal(signal);
        let status = wait_until(timeout, &format!("{} to exit", self.name), || self.try_wait()).to_owned();
        self.child = None;
        (status, start.elapsed())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if std::thread::panicking() && self.child.is_some() {
            eprintln!("--- {} log tail ---\n{}", self.name, self.log_tail(30));
        }
        self.kill();
    }
}

/// A real etcd server on `ip:port` with its data in `dir`; killed when dropped.
pub struct Etcd {
    pub proc: Proc,
    pub endpoint: String,
}

impl Etcd {
    pub fn binary() -> PathBuf {
        if let Some(path) = std::env::var_os("BASALT_ETCD_BIN") {
            return PathBuf::from(path);
        }
        std::env::var_os("PATH")
            .into_iter()
            .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
            .map(|dir| dir.join("etcd"))
            .find(|candidate| candidate.is_file())
            .unwrap_or_else(|| {
                panic!(
                    "the etcd binary was not found in PATH: install Debian's etcd-server package \
                     (scripts/test.sh does) or set BASALT_ETCD_BIN"
                )
            })
    }

    /// Starts an etcd cluster of one member on each of `ips` (client port 2379, peer port
    /// 2380, data under `dir`) and waits until each accepts connections.
    pub fn start_cluster(ips: &[&str], dir: &Path) -> Vec<Etcd> {
        let peers: Vec<String> =
            ips.iter().enumerate().map(|(index, ip)| format!("m{index}=http://{ip}:2380")).collect();
        let mut members: Vec<Etcd> =
            (0..ips.len()).map(|index| Etcd::start_member(ips, &peers, index, dir, false)).collect();
        for (member, ip) in members.iter_mut().zip(ips) {
            member.wait_for_clients(&format!("{ip}:2379"));
        }
        members
    }

    /// Starts member `index` of the cluster [`Etcd::start_cluster`] made (again, on its data,
    /// after it was killed) and waits until it accepts connections.
    pub fn restart_member(ips: &[&str], index: usize, dir: &Path) -> Etcd {
        let peers: Vec<String> =
            ips.iter().enumerate().map(|(index, ip)| format!("m{index}=http://{ip}:2380")).collect();
        Etcd::start_member(ips, &peers, index, dir, true)
    }

    fn start_member(ips: &[&str], peers: &[String], index: usize, dir: &Path, wait: bool) -> Etcd {
        let ip = ips[index];
        let (client_url, peer_url) = (format!("http://{ip}:2379"), format!("http://{ip}:2380"));
        let member_dir = dir.join(format!("etcd-m{index}"));
        std::fs::create_dir_all(&member_dir).expect("a member's directory");
        let proc = Proc::spawn(
            &format!("etcd-m{index}"),
            &member_dir,
            Command::new(Etcd::binary())
                .args(["--name", &format!("m{index}"), "--data-dir"])
                .arg(member_dir.join("data"))
                .args(["--listen-client-urls", &client_url, "--advertise-client-urls", &client_url])
                .args(["--listen-peer-urls", &peer_url, "--initial-advertise-peer-urls", &peer_url])
                .args(["--initial-cluster", &peers.join(","), "--initial-cluster-state", "new"])
                // The timing Basalt asks of etcd (ADR 0028): a quorum loss is told within half
                // an OSD lease, and a dead leader replaced within a second.
                .args(["--heartbeat-interval", "50", "--election-timeout", "500"]),
        );
        let mut etcd = Etcd { proc, endpoint: client_url };
        if wait {
            etcd.wait_for_clients(&format!("{ip}:2379"));
        }
        etcd
    }

    /// Whether this member leads etcd now, by its own status (the v3 gateway's
    /// `/v3/maintenance/status`); false when it does not answer.
    pub fn leads(&self) -> bool {
        use std::io::{Read, Write};
        let address = self.endpoint.trim_start_matches("http://");
        let Ok(mut stream) = std::net::TcpStream::connect(address) else { return false };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let request = format!(
            "POST /v3/maintenance/status HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
             Content-Length: 2\r\nConnection: close\r\n\r\n{{}}"
        );
        let mut reply = String::new();
        if stream.write_all(request.as_bytes()).is_err() || stream.read_to_string(&mut reply).is_err() {
            return false;
        }
        // The gateway writes 64-bit ids as JSON strings: "member_id":"N" and "leader":"N".
        let field = |name: &str| {
            let start = reply.find(&format!("\"{name}\":\""))? + name.len() + 4;
            reply[start..].split('"').next().map(str::to_string)
        };
        matches!((field("member_id"), field("leader")), (Some(member), Some(leader)) if member == leader)
    }

    fn wait_for_clients(&mut self, address: &str) {
        wait_until(Duration::from_secs(30), "etcd to accept connections", || {
            self.proc.assert_running();
            std::net::TcpStream::connect(address).ok()
        });
    }

    /// Starts etcd and waits until its client port accepts connections.
    pub fn start(ip: &str, client_port: u16, peer_port: u16, dir: &Path) -> Etcd {
        let client_url = format!("http://{ip}:{client_port}");
        let peer_url = format!("http://{ip}:{peer_port}");
        let data = dir.join("etcd-data");
        let proc = Proc::spawn(
            "etcd",
            dir,
            Command::new(Etcd::binary())
                .args(["--name", "t", "--data-dir"])
                .arg(&data)
                .args(["--listen-client-urls", &client_url, "--advertise-client-urls", &client_url])
                .args(["--listen-peer-urls", &peer_url, "--initial-advertise-peer-urls", &peer_url])
                .args(["--initial-cluster", &format!("t={peer_url}")]),
        );
        let mut etcd = Etcd { proc, endpoint: client_url };
        let address = format!("{ip}:{client_port}");
        wait_until(Duration::from_secs(30), "etcd to accept connections", || {
            etcd.proc.assert_running();
            std::net::TcpStream::connect(&address).ok()
        });
        etcd
    }
}
