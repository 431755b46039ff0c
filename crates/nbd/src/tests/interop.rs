//! Protocol conformance with real, unmodified NBD clients: libnbd's `nbdinfo`, `nbdcopy` and
//! `nbdsh`, QEMU's `qemu-img` and `qemu-io`, and fio's `nbd` engine, run as processes against
//! the server serving the in-memory fixture over TCP and a unix socket.
//!
//! What is under test is the protocol as real clients speak it (their handshakes, flags, block
//! sizes, structured replies, block status, multi-conn, unaligned I/O), not the storage behind
//! it. Needs the Debian packages `libnbd-bin`, `python3-libnbd`, `qemu-utils` and `fio`; the
//! test fails, naming them, when a tool is missing.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::*;

const EXPORT_SIZE_BYTES: u64 = 64 << 20;
const TOOLS: [&str; 6] = ["nbdinfo", "nbdcopy", "nbdsh", "qemu-img", "qemu-io", "fio"];
const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs a command to completion (killing it after [`COMMAND_TIMEOUT`]) and returns its
/// standard output; panics with both outputs if it fails.
fn run(program: &str, arguments: &[&str]) -> String {
    let output = run_status(program, arguments);
    assert!(output.0, "`{program} {}` failed\n--- stdout\n{}\n--- stderr\n{}", arguments.join(" "), output.1, output.2);
    output.1
}

/// Runs a command; returns whether it succeeded, its standard output and its standard error.
fn run_status(program: &str, arguments: &[&str]) -> (bool, String, String) {
    let directory = tempfile::tempdir().unwrap();
    let stdout_path = directory.path().join("stdout");
    let stderr_path = directory.path().join("stderr");
    let mut command = Command::new(program);
    if program == "nbdsh" {
        // nbdsh runs `python3 -m nbd`: the distribution's python3 has the libnbd module, one
        // earlier in PATH (pyenv, a venv) may not.
        let path = std::env::var("PATH").unwrap_or_default();
        command.env("PATH", format!("/usr/bin:{path}"));
    }
    // Tools that leave files behind (fio's state files) leave them in the temporary directory.
    let mut child = command
        .current_dir(directory.path())
        .args(arguments)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_path).unwrap())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .unwrap_or_else(|error| panic!("cannot run {program}: {error}"));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > COMMAND_TIMEOUT {
            child.kill().ok();
            child.wait().ok();
            panic!("`{program} {}` did not finish within {COMMAND_TIMEOUT:?}", arguments.join(" "));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = std::fs::read_to_string(stdout_path).unwrap();
    let stderr = std::fs::read_to_string(stderr_path).unwrap();
    (status.success(), stdout, stderr)
}

fn require_tools() {
    let missing: Vec<&str> = TOOLS
        .iter()
        .copied()
        .filter(|tool| {
            Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .map_or(true, |output| !output.status.success())
        })
        .collect();
    assert!(
        missing.is_empty(),
        "missing NBD clients {missing:?}: install the Debian packages libnbd-bin python3-libnbd qemu-utils fio"
    );
}

/// A sparse image of the export's size with data at the start, at odd 4 KiB and 512-byte
/// boundaries, in the middle and at the very end.
fn sparse_image(path: &Path, seed: u8) {
    use std::io::{Seek, SeekFrom, Write};
    let mut file = std::fs::File::create(path).unwrap();
    file.set_len(EXPORT_SIZE_BYTES).unwrap();
    let extents = [
        (0, 1 << 20),
        (3 * (1 << 20) + 4096 * 3, 300_000),
        (EXPORT_SIZE_BYTES / 2 + 512, 70_000),
        (EXPORT_SIZE_BYTES - 65536, 65536),
    ];
    for (offset, length) in extents {
        file.seek(SeekFrom::Start(offset)).unwrap();
        file.write_all(&pattern(offset, length, seed)).unwrap();
    }
}

/// The libnbd Python script of protocol edge cases, run by `nbdsh`.
const NBDSH_SCRIPT: &str = r#"
size = h.get_size()
assert h.can_fua() and h.can_flush() and h.can_trim() and h.can_zero() and h.can_multi_conn()
assert h.can_df() and h.get_structured_replies_negotiated()
assert h.get_block_size(nbd.SIZE_MINIMUM) == 512, h.get_block_size(nbd.SIZE_MINIMUM)
assert h.get_block_size(nbd.SIZE_PREFERRED) == 4096
assert h.get_block_size(nbd.SIZE_MAXIMUM) == 32 * 1024 * 1024
data = bytes(range(256)) * 16
h.pwrite(data, 4096, nbd.CMD_FLAG_FUA)
assert h.pread(4096, 4096) == data
h.flush()
h.zero(4096, 4096)
assert h.pread(4096, 4096) == bytes(4096)
h.pwrite(data, 4096)
h.zero(4096, 4096, nbd.CMD_FLAG_NO_HOLE)
assert h.pread(4096, 4096) == bytes(4096)
h.pwrite(data[:512], 4096 + 1536)
assert h.pread(4096, 4096) == bytes(1536) + data[:512] + bytes(2048)
h.trim(1 << 20, 8192)
assert not h.can_cache()
seen = []
def extents(metacontext, offset, entries, err):
    assert metacontext == "base:allocation"
    seen.extend(entries)
h.block_status(1 << 20, 0, extents)
assert len(seen) >= 2 and sum(seen[0::2]) <= 1 << 20, seen
seen.clear()
h.block_status(1 << 20, 4096, extents, nbd.CMD_FLAG_REQ_ONE)
assert len(seen) == 2, seen
h.set_strict_mode(0)
for what, call in [("read past the end", lambda: h.pread(4096, size)),
                   ("read across the end", lambda: h.pread(8192, size - 4096)),
                   ("write past the end", lambda: h.pwrite(data, size)),
                   ("unaligned read", lambda: h.pread(100, 3))]:
    try:
        call()
    except nbd.Error as error:
        print("refused:", what, error.errno)
    else:
        raise AssertionError(what + " was not refused")
assert len(h.pread(4096, size - 4096)) == 4096
print("nbdsh edge cases passed")
"#;

#[test]
fn real_clients_conform_to_the_protocol() {
    require_tools();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let exports =
        MemoryExports::new(vec![MemoryExport::new("vol", EXPORT_SIZE_BYTES), MemoryExport::new("other", 1 << 20)]);
    let directory = tempfile::tempdir().unwrap();
    let socket_path = directory.path().join("nbd.sock");
    let server = Server::new(exports.clone());
    let (port, serving) = runtime.block_on(async {
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let unix = tokio::net::UnixListener::bind(&socket_path).unwrap();
        let port = tcp.local_addr().unwrap().port();
        let serving = tokio::spawn({
            let server = server.clone();
            async move { tokio::join!(server.serve_tcp(tcp), server.serve_unix(unix)) }
        });
        (port, serving)
    });
    let uri = format!("nbd://127.0.0.1:{port}/vol");
    let size = EXPORT_SIZE_BYTES.to_string();

    // nbdinfo: the export list, then what one export advertises.
    let list = run("nbdinfo", &["--list", &format!("nbd://127.0.0.1:{port}")]);
    assert!(list.contains("export=\"vol\"") && list.contains("export=\"other\""), "{list}");
    let info: serde_json::Value = serde_json::from_str(&run("nbdinfo", &["--json", &uri])).unwrap();
    assert_eq!(info["protocol"], "newstyle-fixed");
    assert_eq!(info["structured"], true);
    let export = &info["exports"][0];
    assert_eq!(export["export-size"], EXPORT_SIZE_BYTES);
    assert_eq!(export["contexts"], serde_json::json!(["base:allocation"]));
    for capability in ["can_flush", "can_fua", "can_trim", "can_zero", "can_multi_conn", "can_df"] {
        assert_eq!(export[capability], true, "{capability}: {export}");
    }
    assert_eq!(export["is_read_only"], false);
    assert_eq!(export["block_size_minimum"], 512);
    assert_eq!(export["block_size_preferred"], 4096);
    assert_eq!(export["block_size_maximum"], 32 << 20);
    let (unknown, _, _) = run_status("nbdinfo", &[&format!("nbd://127.0.0.1:{port}/nope")]);
    assert!(!unknown, "nbdinfo connected to an export that does not exist");
    let unix_info = run("nbdinfo", &["--size", &format!("nbd+unix:///other?socket={}", socket_path.display())]);
    assert_eq!(unix_info.trim(), (1 << 20).to_string());

    // qemu-io: patterns, a 512-byte write inside a written page (read-modify-write), zeroes,
    // discard, flush, the tail of the export, and an out-of-range read that must fail.
    let tail = (EXPORT_SIZE_BYTES - 65536).to_string();
    let qemu_io = |commands: &[&str]| {
        let mut arguments = vec!["-f", "raw"];
        for command in commands {
            arguments.extend(["-c", command]);
        }
        arguments.push(&uri);
        let output = run("qemu-io", &arguments);
        assert!(!output.contains("Pattern verification failed") && !output.contains("failed:"), "{output}");
        output
    };
    qemu_io(&["write -P 0xab 0 1M", "read -P 0xab 0 1M", "flush"]);
    qemu_io(&["read -P 0xab 0 1M"]);
    qemu_io(&["write -P 0x5a 512 512", "read -P 0xab 0 512", "read -P 0x5a 512 512", "read -P 0xab 1024 1047552"]);
    qemu_io(&["write -P 0x11 1M 1M", "write -z 1M 1M", "read -P 0 1M 1M"]);
    qemu_io(&["write -P 0x22 2M 1M", "discard 2M 1M", "flush"]);
    qemu_io(&[&format!("write -P 0x77 {tail} 64k"), &format!("read -P 0x77 {tail} 64k")]);
    let (_, out_of_range, errors) = run_status("qemu-io", &["-f", "raw", "-c", &format!("read {size} 4096"), &uri]);
    assert!(!out_of_range.contains("read 4096/4096 bytes"), "a read past the end succeeded: {out_of_range} {errors}");
    let image_info: serde_json::Value =
        serde_json::from_str(&run("qemu-img", &["info", "-f", "raw", "--output=json", &uri])).unwrap();
    assert_eq!(image_info["virtual-size"], EXPORT_SIZE_BYTES);

    // qemu-img convert of a sparse image into the export, then compare (and detect a change).
    let source = directory.path().join("source.img");
    sparse_image(&source, 1);
    let source = source.to_str().unwrap();
    run("qemu-img", &["convert", "-n", "-f", "raw", "-O", "raw", source, &uri]);
    run("qemu-img", &["compare", "-f", "raw", "-F", "raw", source, &uri]);
    qemu_io(&["write -P 0x99 16M 4k"]);
    let (same, _, _) = run_status("qemu-img", &["compare", "-f", "raw", "-F", "raw", source, &uri]);
    assert!(!same, "qemu-img compare missed a changed block");

    // nbdcopy round trip (several connections: multi-conn), byte-compared.
    let copy_in = directory.path().join("copy-in.img");
    let copy_out = directory.path().join("copy-out.img");
    sparse_image(&copy_in, 2);
    run("nbdcopy", &["--flush", "--connections=4", copy_in.to_str().unwrap(), &uri]);
    run("nbdcopy", &["--connections=4", &uri, copy_out.to_str().unwrap()]);
    assert!(std::fs::read(&copy_in).unwrap() == std::fs::read(&copy_out).unwrap(), "nbdcopy round trip differs");

    // Block status: the map covers the export and shows data and holes.
    let map: serde_json::Value = serde_json::from_str(&run("nbdinfo", &["--map", "--json", &uri])).unwrap();
    let extents = map.as_array().unwrap();
    let total: u64 = extents.iter().map(|extent| extent["length"].as_u64().unwrap()).sum();
    assert_eq!(total, EXPORT_SIZE_BYTES);
    assert!(extents.iter().any(|extent| extent["type"] == 3), "no hole in the map: {map}");
    assert!(extents.iter().any(|extent| extent["type"] == 0), "no data in the map: {map}");

    // libnbd edge cases: flags, block sizes, FUA, DF, zeroes, trim, cache, block status,
    // unaligned writes, refused out-of-range requests on a connection that stays usable.
    let edge_cases = run("nbdsh", &["--base-allocation", "-u", &uri, "-c", NBDSH_SCRIPT]);
    assert!(edge_cases.contains("nbdsh edge cases passed"), "{edge_cases}");

    // fio's nbd engine: pipelined random writes verified on read back, 4 KiB and 512 bytes
    // (read-modify-write under concurrency).
    for (block_size, depth) in [("4k", "32"), ("512", "32")] {
        let output = run(
            "fio",
            &[
                "--name=verify",
                "--ioengine=nbd",
                &format!("--uri={uri}"),
                "--rw=randwrite",
                &format!("--bs={block_size}"),
                &format!("--iodepth={depth}"),
                "--size=8M",
                "--offset=32M",
                "--verify=crc32c",
                "--do_verify=1",
                "--verify_fatal=1",
                "--verify_state_save=0",
                "--output-format=terse",
            ],
        );
        assert!(!output.contains("verify: bad"), "{output}");
    }

    server.shutdown();
    runtime.block_on(async { tokio::time::timeout(Duration::from_secs(15), serving).await.unwrap().unwrap() });
    drop(exports);
}
