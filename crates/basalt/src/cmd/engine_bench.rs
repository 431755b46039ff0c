//! `basalt engine bench`: the engine under the workloads of `../shared/rig/fio-suite.sh`, on the
//! same file or device fio's `raw-baseline.sh` measures, so the two tables compare directly.
//!
//! The command is destructive by definition: it formats PATH. An existing Basalt engine at PATH
//! is reformatted without `--force` (that is what a previous bench left there); anything else
//! that is not empty (a filesystem, a partition table, non-zero bytes) needs `--force`, as with
//! `basalt osd init`.
//!
//! Steps, only the last one timed:
//! 1. Lay a file out: write zeros over all of it, as fio does before its first run, so no
//!    write pays for converting unwritten extents (a block device has none and is skipped).
//! 2. Format, open, and precondition: write every object of the region whole, at queue depth
//!    16, so reads hit real data. The region is 90% of the data blocks, mapped to inode 1 with
//!    stripe = offset / object size; the other 10% keep whole-object (redirect) writes supplied
//!    with free blocks.
//! 3. Each workload: keep its queue depth of I/Os in flight from one thread (resubmitting from
//!    the completion loop, each request handed to the kernel as it is issued, as fio does) for
//!    a 1 s ramp plus `--runtime` seconds; only I/Os issued after the
//!    ramp and completed before the end count. A 1 MiB I/O is 1 MiB / object size whole-object
//!    requests issued together, complete when all are. The journal is written back, untimed,
//!    after each workload so the next starts clean.
//!
//! A write completes only when it is durable (the engine's contract), so the engine's
//! `randwrite-4k-qd1` does what fio's `randwrite-4k-qd1-fsync` does on a plain file.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context};
use engine::{AlignedBuffer, Engine, ObjectId, Request, OBJECT_SIZE_DEFAULT_BYTES};

use platform_linux::{UringDisk, UringOptions};
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use serde::Serialize;
use stdx::SlotTable;

use crate::device;
use crate::pipeline;
use crate::size::{format_bytes, parse_bytes};
use crate::stats::{mean_us, percentile_ns, round_to};
use crate::Global;

const MIB: u64 = 1 << 20;
/// The inode whose stripes make up the benchmark region.
const BENCH_INODE: u64 = 1;
/// Share of the data blocks the region uses, in percent.
const REGION_PERCENT: u64 = 90;
const PRECONDITION_QUEUE_DEPTH: usize = 16;
/// Ring entries: room for the deepest workload's requests plus write-back's.
const RING_QUEUE_DEPTH: u32 = 512;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Read,
    Write,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    Random,
    Sequential,
}

#[derive(Debug, Clone, Copy)]
struct Workload {
    name: &'static str,
    direction: Direction,
    access: Access,
    io_size_bytes: u64,
    queue_depth: usize,
}

/// The `FIO_SUITE` rows of `../shared/rig/common.sh` that apply to the engine, in the suite's
/// order (reads first, writes last). `randwrite-4k-qd1-fsync` has no row of its own: every
/// engine write is durable, so `randwrite-4k-qd1` is its counterpart.
const WORKLOADS: [Workload; 6] = [
    Workload {
        name: "randread-4k-qd1",
        direction: Direction::Read,
        access: Access::Random,
        io_size_bytes: 4096,
        queue_depth: 1,
    },
    Workload {
        name: "randread-4k-qd32",
        direction: Direction::Read,
        access: Access::Random,
        io_size_bytes: 4096,
        queue_depth: 32,
    },
    Workload {
        name: "read-1m-qd16",
        direction: Direction::Read,
        access: Access::Sequential,
        io_size_bytes: MIB,
        queue_depth: 16,
    },
    Workload {
        name: "randwrite-4k-qd1",
        direction: Direction::Write,
        access: Access::Random,
        io_size_bytes: 4096,
        queue_depth: 1,
    },
    Workload {
        name: "randwrite-4k-qd32",
        direction: Direction::Write,
        access: Access::Random,
        io_size_bytes: 4096,
        queue_depth: 32,
    },
    Workload {
        name: "write-1m-qd16",
        direction: Direction::Write,
        access: Access::Sequential,
        io_size_bytes: MIB,
        queue_depth: 16,
    },
];

#[derive(Debug, clap::Args)]
pub struct Args {
    /// File or block device to benchmark on. Formatted: everything on it is destroyed.
    #[arg(long = "data", value_name = "PATH")]
    pub data_path: PathBuf,
    /// Size to create or grow the file to (K/M/G/T); on a block device, how much of it to use.
    /// Required if PATH does not exist.
    #[arg(long = "size", value_name = "SIZE", value_parser = parse_bytes)]
    pub size_bytes: Option<u64>,
    /// Measured seconds per workload, after a ramp that is not measured.
    #[arg(long = "runtime", value_name = "SECS", default_value_t = 30)]
    pub runtime_s: u64,
    /// Unmeasured seconds at the start of each workload.
    #[arg(long = "ramp", value_name = "SECS", default_value_t = 1)]
    pub ramp_s: u64,
    /// Print only a JSON array, one object per workload.
    #[arg(long)]
    pub json: bool,
    /// Comma-separated workloads to run [default: all].
    #[arg(long = "workloads", value_name = "A,B", value_delimiter = ',')]
    pub workload_names: Vec<String>,
    /// Object size to format with: a power of two from 4K to 256K.
    #[arg(long = "object-size", value_name = "SIZE", value_parser = parse_bytes, default_value_t = u64::from(OBJECT_SIZE_DEFAULT_BYTES))]
    pub object_size_bytes: u64,
    /// Journal size to format with [default: 1/16 of the device, between 16M and 256M]. The
    /// region stays 90% of the data blocks, so grow --size by what the journal grows. A
    /// journal that holds a whole run's writes keeps write-back idle during it: the run then
    /// measures the journal path alone, not the sustained rate.
    #[arg(long = "journal-size", value_name = "SIZE", value_parser = parse_bytes)]
    pub journal_size_bytes: Option<u64>,
    /// Microseconds to poll the completion ring before blocking (io_uring wake-up latency
    /// against CPU).
    #[arg(long = "spin-us", value_name = "N", default_value_t = 0)]
    pub spin_before_wait_us: u32,
    /// Benchmark even if PATH holds a filesystem or other data (a Basalt engine needs no
    /// --force).
    #[arg(long)]
    pub force: bool,
}

/// One workload's figures. The JSON shape is what scripts read: keep these five fields.
#[derive(Debug, Serialize)]
struct Outcome {
    workload: &'static str,
    iops: f64,
    lat_mean_us: f64,
    lat_p99_us: f64,
    mib_s: f64,
    #[serde(skip)]
    cpu_s: f64,
}

/// The objects the workloads address.
#[derive(Debug, Clone, Copy)]
struct Region {
    object_size_bytes: u64,
    object_count: u64,
}

impl Region {
    fn size_bytes(&self) -> u64 {
        self.object_count * self.object_size_bytes
    }

    /// The object holding byte `offset_bytes` of the region, and the offset inside it.
    fn locate(&self, offset_bytes: u64) -> (ObjectId, u32) {
        assert!(offset_bytes < self.size_bytes());
        let object = ObjectId { inode: BENCH_INODE, stripe: offset_bytes / self.object_size_bytes };
        let offset_in_object = u32::try_from(offset_bytes % self.object_size_bytes).expect("below the object size");
        (object, offset_in_object)
    }
}

pub fn run(global: Global, args: Args) -> anyhow::Result<()> {
    let workloads = select_workloads(&args.workload_names)?;
    ensure!(args.runtime_s > 0, "--runtime must be at least 1 second");
    let path = &args.data_path;
    let contents = device::inspect(path)?;
    if !args.force {
        if let Some(refusal) = contents.refusal(path, true) {
            bail!(refusal);
        }
    }
    if let Some(size_bytes) = args.size_bytes {
        device::check_geometry(size_bytes, args.object_size_bytes, args.journal_size_bytes)?;
    }
    let prepared = device::prepare(path, args.size_bytes, false)?;
    let size_bytes = prepared.format_size_bytes / 4096 * 4096;

    if !prepared.is_block_device {
        let started = Instant::now();
        device::write_zeros(path, 0..size_bytes)?;
        global.say(format_args!(
            "laid out {} of {} in {:.1} s (untimed)",
            format_bytes(size_bytes),
            path.display(),
            started.elapsed().as_secs_f64()
        ));
    }
    device::format(path, size_bytes, args.object_size_bytes, args.journal_size_bytes)?;
    let uring_options = UringOptions { queue_depth: RING_QUEUE_DEPTH, spin_before_wait_us: args.spin_before_wait_us };
    let mut engine = device::open_engine(path, uring_options)?;

    let object_size_bytes = u64::from(engine.object_size_bytes());
    let objects_per_mib = (MIB / object_size_bytes).max(1);
    let block_count = u64::from(engine.geometry().block_count);
    let object_count = block_count * REGION_PERCENT / 100 / objects_per_mib * objects_per_mib;
    ensure!(object_count > 0, "{} is too small to benchmark: {block_count} blocks", path.display());
    let region = Region { object_size_bytes, object_count };
    global.say(format_args!(
        "engine: object size {}, {block_count} blocks, journal {}; region {} objects ({}), spin {} us",
        format_bytes(object_size_bytes),
        format_bytes(engine.geometry().journal_size_bytes),
        region.object_count,
        format_bytes(region.size_bytes()),
        args.spin_before_wait_us
    ));

    let mut rng = SmallRng::seed_from_u64(0xba5a_17be_0c4f);
    let mut template = vec![0u8; usize::try_from(object_size_bytes.max(MIB)).expect("fits")];
    rng.fill_bytes(&mut template);

    let started = Instant::now();
    let object_size = usize::try_from(object_size_bytes).expect("fits");
    pipeline::run(
        &mut engine,
        region.object_count,
        PRECONDITION_QUEUE_DEPTH,
        |stripe| Request::Write {
            object: ObjectId { inode: BENCH_INODE, stripe },
            offset_bytes: 0,
            data: AlignedBuffer::from_slice(&template[..object_size]),
        },
        |_, _| Ok(()),
    )
    .with_context(|| format!("preconditioning {} failed", path.display()))?;
    write_back_journal(&mut engine, path)?;
    global.say(format_args!(
        "preconditioned {} in {:.1} s (untimed)",
        format_bytes(region.size_bytes()),
        started.elapsed().as_secs_f64()
    ));

    let runtime = Duration::from_secs(args.runtime_s);
    let ramp = Duration::from_secs(args.ramp_s);
    let mut outcomes = Vec::new();
    for workload in workloads {
        global.say(format_args!("running {} ({}s + {}s ramp)", workload.name, args.runtime_s, args.ramp_s));
        let before = engine.stats();
        let outcome = run_workload(&mut engine, &workload, region, ramp, runtime, &mut rng, &template)
            .with_context(|| format!("workload {} on {} failed", workload.name, path.display()))?;
        write_back_journal(&mut engine, path)?;
        let after = engine.stats();
        // What the engine did for the workload (ramp and final journal write-back included).
        global.say(format_args!(
            "{}: {} records of {:.1} entries, {} out of order, {} journal-full waits; write-back: {} jobs, \
             {} pages in {} writes, {} metadata pages in {} writes, {} MiB read back, {} flushes",
            workload.name,
            after.records_written - before.records_written,
            (after.record_entries_written - before.record_entries_written) as f64
                / (after.records_written - before.records_written).max(1) as f64,
            after.records_completed_out_of_order - before.records_completed_out_of_order,
            after.journal_full_waits - before.journal_full_waits,
            after.writeback_jobs - before.writeback_jobs,
            after.writeback_pages_copied - before.writeback_pages_copied,
            after.writeback_copy_writes - before.writeback_copy_writes,
            after.writeback_meta_pages_written - before.writeback_meta_pages_written,
            after.writeback_meta_writes - before.writeback_meta_writes,
            (after.writeback_journal_read_bytes - before.writeback_journal_read_bytes) >> 20,
            after.writeback_barriers - before.writeback_barriers,
        ));
        if args.json {
            global.say(format_args!("{}: cpu {:.2} s", workload.name, outcome.cpu_s));
        }
        outcomes.push(outcome);
    }

    if args.json {
        println!("{}", serde_json::to_string_pretty(&outcomes).expect("outcomes serialise"));
        return Ok(());
    }
    println!();
    println!("{:<24} {:>9} {:>9} {:>10} {:>9} {:>8}", "workload", "IOPS", "MiB/s", "mean_us", "p99_us", "cpu_s");
    for outcome in &outcomes {
        println!(
            "{:<24} {:>9.0} {:>9.1} {:>10.1} {:>9.0} {:>8.2}",
            outcome.workload, outcome.iops, outcome.mib_s, outcome.lat_mean_us, outcome.lat_p99_us, outcome.cpu_s
        );
    }
    println!(
        "# cpu_s: process CPU seconds (user + system, /proc/self/stat) in each {} s window; \
         every write is durable on completion (compare randwrite-4k-qd1 with fio's randwrite-4k-qd1-fsync)",
        args.runtime_s
    );
    Ok(())
}

fn select_workloads(names: &[String]) -> anyhow::Result<Vec<Workload>> {
    if names.is_empty() {
        return Ok(WORKLOADS.to_vec());
    }
    let known = || WORKLOADS.iter().map(|workload| workload.name).collect::<Vec<_>>().join(", ");
    let mut selected = Vec::new();
    for name in names {
        let name = name.trim();
        let workload = WORKLOADS
            .iter()
            .find(|workload| workload.name == name)
            .ok_or_else(|| anyhow!("unknown workload '{name}' (known: {})", known()))?;
        selected.push(*workload);
    }
    // Run in the suite's order whatever order they were named in.
    selected.sort_by_key(|selected| WORKLOADS.iter().position(|workload| workload.name == selected.name));
    selected.dedup_by_key(|workload| workload.name);
    Ok(selected)
}

fn write_back_journal(engine: &mut Engine<UringDisk>, path: &Path) -> anyhow::Result<()> {
    engine.write_back_journal();
    match engine.poisoned() {
        Some(reason) => bail!("the engine at {} stopped after a failed write: {reason}", path.display()),
        None => Ok(()),
    }
}

/// An I/O of the workload in flight: its engine requests share its id in the table as user data.
#[derive(Debug, Clone, Copy)]
struct Io {
    started: Instant,
    requests_remaining: u64,
}

fn run_workload(
    engine: &mut Engine<UringDisk>,
    workload: &Workload,
    region: Region,
    ramp: Duration,
    runtime: Duration,
    rng: &mut SmallRng,
    template: &[u8],
) -> anyhow::Result<Outcome> {
    let io_size_bytes = workload.io_size_bytes;
    let chunk_size_bytes = io_size_bytes.min(region.object_size_bytes);
    let chunk_size = usize::try_from(chunk_size_bytes).expect("at most the object size");
    let chunks_per_io = io_size_bytes / chunk_size_bytes;
    assert_eq!(io_size_bytes % chunk_size_bytes, 0);
    assert_eq!(region.size_bytes() % io_size_bytes, 0);
    let io_slots_in_region = region.size_bytes() / io_size_bytes;
    let mut sequential_offset_bytes = 0u64;

    let started = Instant::now();
    let measure_from = started + ramp;
    let stop_at = measure_from + runtime;
    let mut ios = SlotTable::new(workload.queue_depth);
    let mut latencies_ns: Vec<u64> = Vec::with_capacity(1 << 20);
    let mut cpu_start_s: Option<f64> = None;
    let mut cpu_end_s: Option<f64> = None;

    let mut issue = |engine: &mut Engine<UringDisk>, ios: &mut SlotTable<Io>| {
        let offset_bytes = match workload.access {
            Access::Random => rng.gen_range(0..io_slots_in_region) * io_size_bytes,
            Access::Sequential => {
                let offset_bytes = sequential_offset_bytes;
                sequential_offset_bytes = (sequential_offset_bytes + io_size_bytes) % region.size_bytes();
                offset_bytes
            }
        };
        let io = Io { started: Instant::now(), requests_remaining: chunks_per_io };
        let id = ios.insert(io).expect("one I/O per completed one, up to the queue depth");
        for chunk in 0..chunks_per_io {
            let (object, offset_in_object) = region.locate(offset_bytes + chunk * chunk_size_bytes);
            let request = match workload.direction {
                Direction::Read => Request::Read {
                    object,
                    offset_bytes: offset_in_object,
                    length_bytes: u32::try_from(chunk_size).expect("at most the object size"),
                },
                Direction::Write => Request::Write {
                    object,
                    offset_bytes: offset_in_object,
                    data: AlignedBuffer::from_slice(&template[..chunk_size]),
                },
            };
            engine.submit(id, request);
        }
    };

    for _ in 0..workload.queue_depth {
        issue(engine, &mut ios);
    }
    let mut completions = Vec::new();
    while !ios.is_empty() {
        engine.poll(&mut completions);
        if completions.is_empty() {
            engine.wait();
            continue;
        }
        let now = Instant::now();
        if cpu_start_s.is_none() && now >= measure_from {
            cpu_start_s = Some(process_cpu_seconds()?);
        }
        if cpu_end_s.is_none() && now >= stop_at {
            cpu_end_s = Some(process_cpu_seconds()?);
        }
        for completion in completions.drain(..) {
            if let Err(error) = completion.result {
                bail!("request failed: {error}");
            }
            let io = ios.get_mut(completion.user_data).expect("a completion of an I/O in flight");
            io.requests_remaining -= 1;
            if io.requests_remaining > 0 {
                continue;
            }
            let io = ios.remove(completion.user_data).expect("found above");
            if io.started >= measure_from && now <= stop_at {
                latencies_ns.push(u64::try_from(now.duration_since(io.started).as_nanos()).unwrap_or(u64::MAX));
            }
            if now < stop_at {
                issue(engine, &mut ios);
                // Like fio (iodepth_batch_submit=1), each request goes to the kernel as it is
                // issued rather than after the whole batch of completions.
                engine.push();
            }
        }
    }
    let cpu_s = match (cpu_start_s, cpu_end_s) {
        (Some(start), Some(end)) => end - start,
        _ => 0.0,
    };
    let io_count = latencies_ns.len() as u64;
    let runtime_s = runtime.as_secs_f64();
    let iops = io_count as f64 / runtime_s;
    let lat_mean_us = mean_us(&latencies_ns);
    let lat_p99_us = percentile_ns(&mut latencies_ns, 0.99) as f64 / 1000.0;
    Ok(Outcome {
        workload: workload.name,
        iops: round_to(iops, 1),
        lat_mean_us: round_to(lat_mean_us, 1),
        lat_p99_us: round_to(lat_p99_us, 1),
        mib_s: round_to(iops * io_size_bytes as f64 / MIB as f64, 1),
        cpu_s,
    })
}

/// User plus system CPU seconds of this process, from /proc/self/stat.
fn process_cpu_seconds() -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").context("cannot read /proc/self/stat")?;
    // The command name (field 2) may contain spaces; fields after it are plain numbers.
    let after_name = stat.rsplit_once(')').map(|(_, rest)| rest).context("malformed /proc/self/stat")?;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Fields 14 (utime) and 15 (stime) are at 11 and 12 counting from field 3.
    let ticks = |index: usize| -> anyhow::Result<u64> {
        fields.get(index).and_then(|field| field.parse().ok()).context("malformed /proc/self/stat")
    };
    let total_ticks = ticks(11)? + ticks(12)?;
    // SAFETY: sysconf only reads its integer argument.
    let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    ensure!(ticks_per_second > 0, "sysconf(_SC_CLK_TCK) failed");
    Ok(total_ticks as f64 / ticks_per_second as f64)
}

#[cfg(test)]
mod tests {
    use super::{process_cpu_seconds, select_workloads, Region};

    #[test]
    fn workloads_are_chosen_by_name_in_suite_order() {
        let names = |list: &[&str]| {
            let owned: Vec<String> = list.iter().map(|name| name.to_string()).collect();
            select_workloads(&owned).map(|workloads| workloads.iter().map(|workload| workload.name).collect::<Vec<_>>())
        };
        assert_eq!(names(&["write-1m-qd16", "randread-4k-qd1"]).unwrap(), ["randread-4k-qd1", "write-1m-qd16"]);
        assert_eq!(names(&[]).unwrap().len(), 6);
        assert!(names(&["randwrite-4k-qd1-fsync"]).is_err());
    }

    #[test]
    fn region_maps_offsets_to_stripes() {
        let region = Region { object_size_bytes: 128 << 10, object_count: 16 };
        let (object, offset) = region.locate((128 << 10) * 3 + 8192);
        assert_eq!((object.inode, object.stripe, offset), (1, 3, 8192));
    }

    #[test]
    fn cpu_time_is_readable() {
        assert!(process_cpu_seconds().unwrap() >= 0.0);
    }
}
