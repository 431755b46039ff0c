//! `basalt engine sync-floor`: what the disk alone charges for a write that needs several
//! durable copies on it at once, as a replicated write does when every replica of a
//! single-machine cluster shares one disk.
//!
//! Each of N threads owns a file in DIR (as each OSD owns its own). In lockstep rounds, every
//! thread writes 4 KiB with `O_DIRECT` at a random offset and then calls `fdatasync`, and the
//! round ends when the slowest is done: the shape of a replicated write, which is acknowledged
//! once every copy is durable, with no network and no engine in the way. Windows of one writer
//! alone alternate with windows of N in lockstep, so both see the same moods of a shared disk.
//! Benchmarks set a replicated write's time against the first figure (fio's `--fsync=1`); no
//! software on this disk can go below the second. fio cannot measure it: its jobs run
//! independently, so the flushes of one cover the writes of the others.
//!
//! A third kind of window adds the two round trips a replicated write makes: a client thread
//! sends each write's offset over a Unix socket to a primary thread, which sends it on to the
//! N-1 replica threads, makes its own copy durable, waits for theirs, and replies; every thread
//! blocks in the kernel between messages, as daemons that do not poll do. This is the simplest
//! program that makes N durable copies for a client on this machine, and so the floor under
//! Basalt's QD1 write here: the disk's, the wire's and the wake-ups' costs, and nothing else.

use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use engine::AlignedBuffer;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::floor_file::{Access, FloorFile};
use crate::size::{format_bytes, parse_bytes};
use crate::stats::median;
use crate::Global;

const WRITE_BYTES: usize = 4096;
/// More copies than any pool keeps; each writer is a thread with a file of `--file-size`.
const WRITERS_MAX: usize = 64;
/// Length of each measured window; windows of one writer, of N and of N behind round trips
/// alternate.
const WINDOW: Duration = Duration::from_secs(1);

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory on the disk to measure; one file per writer is created there and removed after.
    #[arg(long = "dir", value_name = "DIR")]
    pub dir: PathBuf,
    /// Durable copies each round makes at once, one per thread and file.
    #[arg(long = "writers", value_name = "N", default_value_t = 3)]
    pub writers: usize,
    /// Measured seconds, split evenly between one writer and N writers.
    #[arg(long = "runtime", value_name = "SECS", default_value_t = 10)]
    pub runtime_s: u64,
    /// Size of each writer's file; writes land at random 4 KiB offsets in it.
    #[arg(long = "file-size", value_name = "SIZE", value_parser = parse_bytes, default_value = "256M")]
    pub file_size_bytes: u64,
    /// Print only a JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(global: Global, args: Args) -> anyhow::Result<()> {
    ensure!(
        (1..=WRITERS_MAX).contains(&args.writers),
        "--writers must be between 1 and {WRITERS_MAX} (one thread and one file each)"
    );
    ensure!(args.runtime_s >= 3, "--runtime must be at least 3 seconds (one window of each kind)");
    ensure!(
        args.file_size_bytes >= WRITE_BYTES as u64 && args.file_size_bytes.is_multiple_of(WRITE_BYTES as u64),
        "--file-size must be a positive multiple of 4K"
    );
    let files = (0..args.writers)
        .map(|index| {
            FloorFile::create(
                &args.dir.join(format!("basalt-sync-floor.{index}")),
                args.file_size_bytes,
                0,
                Access::Write,
            )
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    global.say(format_args!(
        "laid out {} files of {} in {} (untimed)",
        files.len(),
        format_bytes(args.file_size_bytes),
        args.dir.display()
    ));
    let (mut one, mut many, mut replicated) = (Vec::new(), Vec::new(), Vec::new());
    let windows = args.runtime_s / 3;
    for window in 0..windows {
        one.push(lockstep_round_us(&files[..1], args.file_size_bytes)?);
        many.push(lockstep_round_us(&files, args.file_size_bytes)?);
        replicated.push(replicated_write_us(&files, args.file_size_bytes)?);
        global.say(format_args!(
            "window {} of {windows}: one writer {:.0} us, {} writers {:.0} us per round, behind round trips {:.0} us",
            window + 1,
            one[one.len() - 1],
            args.writers,
            many[many.len() - 1],
            replicated[replicated.len() - 1]
        ));
    }
    let one_us = median(&mut one);
    let many_us = median(&mut many);
    let replicated_us = median(&mut replicated);
    let ratio = many_us / one_us;
    if args.json {
        let report = serde_json::json!({
            "writers": args.writers,
            "one_writer_us": one_us,
            "lockstep_us": many_us,
            "ratio": ratio,
            "replicated_us": replicated_us,
            "windows": windows,
        });
        println!("{report}");
    } else {
        println!("one writer: {one_us:.0} us per 4 KiB write + fdatasync");
        println!("{} writers in lockstep: {many_us:.0} us per round ({ratio:.2}x one writer)", args.writers);
        println!(
            "{} copies behind a client's and a primary's round trips: {replicated_us:.0} us per write ({:.2}x the lockstep)",
            args.writers,
            replicated_us / many_us
        );
        println!("# medians of {windows} alternating windows of {} s each", WINDOW.as_secs());
    }
    Ok(())
}

/// Runs lockstep rounds on `files` (one thread each) for one window; returns the mean
/// microseconds per round.
fn lockstep_round_us(files: &[FloorFile], file_size_bytes: u64) -> anyhow::Result<f64> {
    let barrier = Barrier::new(files.len());
    // The round all threads stop at: the first writer sets it before entering that round's
    // barrier, so every thread reads it after the barrier and takes the same decision (a thread
    // still reading an earlier round can only see a later round there).
    let last_round = AtomicU64::new(u64::MAX);
    let failed = AtomicBool::new(false);
    let deadline = Instant::now() + WINDOW;
    let pages = file_size_bytes / WRITE_BYTES as u64;
    std::thread::scope(|scope| {
        let threads: Vec<_> = files
            .iter()
            .enumerate()
            .map(|(index, writer)| {
                let (barrier, last_round, failed) = (&barrier, &last_round, &failed);
                scope.spawn(move || -> anyhow::Result<(u64, Duration)> {
                    let data = AlignedBuffer::zeroed(WRITE_BYTES);
                    let mut rng = SmallRng::seed_from_u64(index as u64 + 1);
                    let started = Instant::now();
                    let mut round = 0u64;
                    let mut error = None;
                    loop {
                        if index == 0 && (Instant::now() >= deadline || failed.load(Ordering::Relaxed)) {
                            last_round.store(round, Ordering::Relaxed);
                        }
                        barrier.wait();
                        if round >= last_round.load(Ordering::Relaxed) {
                            break;
                        }
                        round += 1;
                        if error.is_some() {
                            continue; // Keeps meeting the others at the barrier until they stop.
                        }
                        let offset = rng.gen_range(0..pages) * WRITE_BYTES as u64;
                        let result = writer
                            .file
                            .write_all_at(data.as_slice(), offset)
                            .with_context(|| format!("write to {} failed", writer.path.display()))
                            .and_then(|()| {
                                writer
                                    .file
                                    .sync_data()
                                    .with_context(|| format!("fdatasync of {} failed", writer.path.display()))
                            });
                        if let Err(e) = result {
                            error = Some(e);
                            failed.store(true, Ordering::Relaxed);
                        }
                    }
                    if let Some(error) = error {
                        return Err(error);
                    }
                    Ok((round, started.elapsed()))
                })
            })
            .collect();
        let mut results = Vec::with_capacity(threads.len());
        for thread in threads {
            results.push(thread.join().expect("writer thread panicked"));
        }
        // Every thread ran the same rounds and left at the same barrier.
        let (rounds, elapsed) = results.into_iter().collect::<anyhow::Result<Vec<_>>>()?[0];
        ensure!(rounds > 0, "no round completed in {} s", WINDOW.as_secs());
        Ok(elapsed.as_secs_f64() * 1e6 / rounds as f64)
    })
}

/// Mean microseconds per write of one window of replicated writes: a client thread asks a
/// primary thread (on `files[0]`) for each, which has the replica threads (one per other file)
/// make their copies while it makes its own, and acknowledges once all are durable.
fn replicated_write_us(files: &[FloorFile], file_size_bytes: u64) -> anyhow::Result<f64> {
    let pages = file_size_bytes / WRITE_BYTES as u64;
    std::thread::scope(|scope| {
        let (mut client, mut primary_link) = UnixStream::pair().context("cannot create a Unix socket pair")?;
        let mut replica_links = Vec::new();
        let mut replicas = Vec::new();
        for writer in &files[1..] {
            let (primary_side, mut replica_side) = UnixStream::pair().context("cannot create a Unix socket pair")?;
            replica_links.push(primary_side);
            replicas.push(scope.spawn(move || serve_copies(&mut replica_side, writer, &mut [])));
        }
        let primary = scope.spawn(move || serve_copies(&mut primary_link, &files[0], &mut replica_links));
        let mut rng = SmallRng::seed_from_u64(files.len() as u64);
        let mut ack = [0u8; 1];
        let started = Instant::now();
        let mut writes = 0u64;
        let mut failure = None;
        while started.elapsed() < WINDOW {
            let offset = rng.gen_range(0..pages) * WRITE_BYTES as u64;
            let sent = client.write_all(&offset.to_le_bytes()).and_then(|()| client.read_exact(&mut ack));
            if let Err(error) = sent {
                failure = Some(error);
                break;
            }
            writes += 1;
        }
        let elapsed = started.elapsed();
        // Closing the client's end stops the primary, whose links' closing stops the replicas.
        drop(client);
        primary.join().expect("primary thread panicked")?;
        for replica in replicas {
            replica.join().expect("replica thread panicked")?;
        }
        if let Some(error) = failure {
            return Err(error).context("the client lost its primary");
        }
        ensure!(writes > 0, "no replicated write completed in {} s", WINDOW.as_secs());
        Ok(elapsed.as_secs_f64() * 1e6 / writes as f64)
    })
}

/// Serves writes on `link` until its peer closes it: each asks every link of `replicas` for a
/// copy, makes this thread's durable in `writer`, waits for theirs and acknowledges.
fn serve_copies(link: &mut UnixStream, writer: &FloorFile, replicas: &mut [UnixStream]) -> anyhow::Result<()> {
    let data = AlignedBuffer::zeroed(WRITE_BYTES);
    let mut request = [0u8; 8];
    let mut ack = [0u8; 1];
    loop {
        match link.read_exact(&mut request) {
            Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            result => result.context("cannot read a write request")?,
        }
        for replica in replicas.iter_mut() {
            replica.write_all(&request).context("cannot send a write to a replica")?;
        }
        let offset = u64::from_le_bytes(request);
        writer
            .file
            .write_all_at(data.as_slice(), offset)
            .and_then(|()| writer.file.sync_data())
            .with_context(|| format!("durable write to {} failed", writer.path.display()))?;
        for replica in replicas.iter_mut() {
            replica.read_exact(&mut ack).context("cannot read a replica's acknowledgement")?;
        }
        link.write_all(&[1]).context("cannot acknowledge a write")?;
    }
}
