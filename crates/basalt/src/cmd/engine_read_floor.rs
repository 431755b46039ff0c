//! `basalt engine read-floor`: what a 4 KiB read at queue depth 1 costs on this machine with
//! nothing but the disk and one local round trip in its way, the floor under a read that a
//! client asks of an OSD on the same machine.
//!
//! Kinds of window alternate, so all see the same moods of a shared disk and CPU:
//! - *disk*: one thread reads 4 KiB with `O_DIRECT` at random offsets of a file in DIR (what
//!   fio's `psync` engine measures);
//! - *round trip*: a client thread sends a request over a Unix socket pair and waits for a
//!   4 KiB reply from a server thread, which waits for requests in a blocking `recv`;
//! - *disk behind a round trip*: the same, with the server reading the 4 KiB from the file
//!   before it replies.
//!
//! The last two run twice: with the threads free to run on any CPU, and with both held to one
//! CPU. Both threads block in the kernel between messages, as a client and an OSD that do not
//! poll do, so each message wakes a sleeping thread; on a virtual machine waking a thread on
//! another CPU costs an interrupt between virtual CPUs, which the scheduler avoids by placing
//! the two together when it can. No engine, runtime, protocol or copy beyond the socket's is in
//! the way, so no storage server on this machine can answer a read at queue depth 1 much faster
//! than the lower of the two *disk behind a round trip* figures; benchmarks set Basalt's QD1
//! read against it.

use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use engine::AlignedBuffer;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::floor_file::{Access, FloorFile};
use crate::size::{format_bytes, parse_bytes};
use crate::stats::median;
use crate::Global;

const READ_BYTES: usize = 4096;
/// Length of each measured window.
const WINDOW: Duration = Duration::from_secs(1);

/// What the client asks of the server thread.
#[derive(Debug, Clone, Copy)]
enum Request {
    /// Reply with 4 KiB read from the file at this offset.
    Read(u64),
    /// Reply with 4 KiB at once.
    NoRead,
    /// Run on this CPU only (`None`: on any of the process's), then reply.
    Pin(Option<usize>),
    Stop,
}

impl Request {
    fn encode(self) -> [u8; 16] {
        let (kind, argument) = match self {
            Request::Read(offset) => (0u64, offset),
            Request::NoRead => (1, 0),
            Request::Pin(None) => (2, u64::MAX),
            Request::Pin(Some(cpu)) => (2, cpu as u64),
            Request::Stop => (3, 0),
        };
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&kind.to_le_bytes());
        bytes[8..].copy_from_slice(&argument.to_le_bytes());
        bytes
    }

    fn decode(bytes: &[u8; 16]) -> Request {
        let kind = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
        let argument = u64::from_le_bytes(bytes[8..].try_into().expect("8 bytes"));
        match kind {
            0 => Request::Read(argument),
            1 => Request::NoRead,
            2 if argument == u64::MAX => Request::Pin(None),
            2 => Request::Pin(Some(argument as usize)),
            3 => Request::Stop,
            _ => unreachable!("the client sends only the kinds above"),
        }
    }
}

/// The median microseconds of each kind of window.
#[derive(Debug, Default)]
struct Windows {
    disk: Vec<f64>,
    round_trip_free: Vec<f64>,
    behind_free: Vec<f64>,
    round_trip_one_cpu: Vec<f64>,
    behind_one_cpu: Vec<f64>,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory on the disk to measure; a file is created there and removed after.
    #[arg(long = "dir", value_name = "DIR")]
    pub dir: PathBuf,
    /// Measured seconds, split evenly between the five kinds of window.
    #[arg(long = "runtime", value_name = "SECS", default_value_t = 10)]
    pub runtime_s: u64,
    /// Size of the file; reads land at random 4 KiB offsets in it.
    #[arg(long = "file-size", value_name = "SIZE", value_parser = parse_bytes, default_value = "1G")]
    pub file_size_bytes: u64,
    /// Print only a JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(global: Global, args: Args) -> anyhow::Result<()> {
    ensure!(args.runtime_s >= 5, "--runtime must be at least 5 seconds (one window of each kind)");
    ensure!(
        args.file_size_bytes >= READ_BYTES as u64 && args.file_size_bytes.is_multiple_of(READ_BYTES as u64),
        "--file-size must be a positive multiple of 4K"
    );
    let file = FloorFile::create(&args.dir.join("basalt-read-floor"), args.file_size_bytes, 0x5a, Access::Read)?;
    global.say(format_args!("laid out {} in {} (untimed)", format_bytes(args.file_size_bytes), args.dir.display()));
    let pages = args.file_size_bytes / READ_BYTES as u64;
    let mut windows = Windows::default();
    let all = affinity()?;
    let rounds = args.runtime_s / 5;
    let mut rng = SmallRng::seed_from_u64(1);
    let mut offset = || Request::Read(rng.gen_range(0..pages) * READ_BYTES as u64);
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let (mut client, server) = UnixStream::pair().context("cannot create a Unix socket pair")?;
        let server = scope.spawn(|| serve(server, &file, &all));
        for round in 0..rounds {
            windows.disk.push(disk_window_us(&file, &mut offset)?);
            windows.round_trip_free.push(round_trip_window_us(&mut client, || Request::NoRead)?);
            windows.behind_free.push(round_trip_window_us(&mut client, &mut offset)?);
            let cpu = current_cpu()?;
            pin(Some(cpu), &all)?;
            call(&mut client, Request::Pin(Some(cpu)))?;
            windows.round_trip_one_cpu.push(round_trip_window_us(&mut client, || Request::NoRead)?);
            windows.behind_one_cpu.push(round_trip_window_us(&mut client, &mut offset)?);
            pin(None, &all)?;
            call(&mut client, Request::Pin(None))?;
            global.say(format_args!(
                "round {} of {rounds}: disk {:.1} us; free: round trip {:.1} us, disk behind it {:.1} us; one CPU: round trip {:.1} us, disk behind it {:.1} us",
                round + 1,
                windows.disk[round as usize],
                windows.round_trip_free[round as usize],
                windows.behind_free[round as usize],
                windows.round_trip_one_cpu[round as usize],
                windows.behind_one_cpu[round as usize],
            ));
        }
        client.write_all(&Request::Stop.encode()).context("cannot stop the server thread")?;
        server.join().expect("server thread panicked")
    })?;
    let disk_us = median(&mut windows.disk);
    let (trip_free_us, behind_free_us) = (median(&mut windows.round_trip_free), median(&mut windows.behind_free));
    let (trip_one_us, behind_one_us) = (median(&mut windows.round_trip_one_cpu), median(&mut windows.behind_one_cpu));
    let floor_us = behind_free_us.min(behind_one_us);
    if args.json {
        let report = serde_json::json!({
            "disk_us": disk_us,
            "round_trip_free_us": trip_free_us,
            "disk_behind_round_trip_free_us": behind_free_us,
            "round_trip_one_cpu_us": trip_one_us,
            "disk_behind_round_trip_one_cpu_us": behind_one_us,
            "floor_us": floor_us,
            "rounds": rounds,
        });
        println!("{report}");
    } else {
        println!("disk: {disk_us:.1} us per 4 KiB O_DIRECT read");
        println!(
            "threads on any CPU: round trip {trip_free_us:.1} us, disk behind a round trip {behind_free_us:.1} us"
        );
        println!("threads on one CPU: round trip {trip_one_us:.1} us, disk behind a round trip {behind_one_us:.1} us");
        println!("floor: {floor_us:.1} us ({:.2}x the disk)", floor_us / disk_us);
        println!("# medians of {rounds} rounds of 5 windows of {} s each", WINDOW.as_secs());
    }
    Ok(())
}

/// Reads 4 KiB of `file` at `offset` into `buffer`.
fn read_page(file: &FloorFile, buffer: &mut AlignedBuffer, offset: u64) -> anyhow::Result<()> {
    file.file
        .read_exact_at(buffer.as_mut_slice(), offset)
        .with_context(|| format!("read of {} at {offset} failed", file.path.display()))
}

/// Mean microseconds per read of one window of reads alone.
fn disk_window_us(file: &FloorFile, mut request: impl FnMut() -> Request) -> anyhow::Result<f64> {
    let mut buffer = AlignedBuffer::zeroed(READ_BYTES);
    let started = Instant::now();
    let mut reads = 0u64;
    while started.elapsed() < WINDOW {
        let Request::Read(offset) = request() else { unreachable!("reads only") };
        read_page(file, &mut buffer, offset)?;
        reads += 1;
    }
    Ok(started.elapsed().as_secs_f64() * 1e6 / reads as f64)
}

/// Mean microseconds per round trip of one window; `request` gives each request.
fn round_trip_window_us(client: &mut UnixStream, mut request: impl FnMut() -> Request) -> anyhow::Result<f64> {
    let mut reply = vec![0u8; READ_BYTES];
    let started = Instant::now();
    let mut trips = 0u64;
    while started.elapsed() < WINDOW {
        client.write_all(&request().encode()).context("cannot send a request")?;
        client.read_exact(&mut reply).context("cannot read a reply")?;
        trips += 1;
    }
    Ok(started.elapsed().as_secs_f64() * 1e6 / trips as f64)
}

fn call(client: &mut UnixStream, request: Request) -> anyhow::Result<()> {
    let mut reply = vec![0u8; READ_BYTES];
    client.write_all(&request.encode()).context("cannot send a request")?;
    client.read_exact(&mut reply).context("cannot read a reply")
}

/// The server thread: answers each request with 4 KiB until `Stop`.
fn serve(mut socket: UnixStream, file: &FloorFile, all: &libc::cpu_set_t) -> anyhow::Result<()> {
    let mut buffer = AlignedBuffer::zeroed(READ_BYTES);
    let mut request = [0u8; 16];
    loop {
        socket.read_exact(&mut request).context("the server cannot read a request")?;
        match Request::decode(&request) {
            Request::Stop => return Ok(()),
            Request::NoRead => {}
            Request::Read(offset) => read_page(file, &mut buffer, offset)?,
            Request::Pin(cpu) => pin(cpu, all)?,
        }
        socket.write_all(buffer.as_slice()).context("the server cannot send a reply")?;
    }
}

fn current_cpu() -> anyhow::Result<usize> {
    // SAFETY: no arguments; returns the CPU the calling thread runs on, or -1.
    let cpu = unsafe { libc::sched_getcpu() };
    ensure!(cpu >= 0, "sched_getcpu failed: {}", std::io::Error::last_os_error());
    Ok(cpu as usize)
}

/// The CPUs the calling thread may run on.
fn affinity() -> anyhow::Result<libc::cpu_set_t> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set, which sched_getaffinity fills.
    let (set, result) = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let result = libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
        (set, result)
    };
    ensure!(result == 0, "sched_getaffinity failed: {}", std::io::Error::last_os_error());
    Ok(set)
}

/// Holds the calling thread to `cpu`, or to `all` (the process's CPUs) for `None`.
fn pin(cpu: Option<usize>, all: &libc::cpu_set_t) -> anyhow::Result<()> {
    let set = match cpu {
        // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes one bit of it.
        Some(cpu) => unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            set
        },
        None => *all,
    };
    // SAFETY: sched_setaffinity only reads the set passed by reference.
    let result = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    ensure!(result == 0, "sched_setaffinity failed: {}", std::io::Error::last_os_error());
    Ok(())
}
