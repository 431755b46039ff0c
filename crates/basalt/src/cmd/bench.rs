//! `basalt bench`: I/O against one volume through the client library, as `rados bench` does for
//! Ceph, reported with the workload names and figures of `../shared/rig/fio-suite.sh` so its
//! rows compare with fio's through the NBD gateway.
//!
//! `--jobs` tasks each keep `--iodepth` calls in flight, over the first `--size-limit` bytes of
//! the volume (all of it by default): random or sequential offsets, `--bs` bytes per call. Only
//! calls issued after a ramp of `--ramp` seconds and completed within the next `--runtime`
//! seconds count. A write counts once the client returns, which is when every replica has it
//! durable, so `randwrite-4k-qd1` here compares with fio's `randwrite-4k-qd1-fsync`.
//!
//! Reads of ranges never written return zeros without touching a drive: run a write pass
//! first, or pass `--prefill` to write the region (1 MiB writes, untimed) before measuring.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use bytes::Bytes;
use client::{Client, ClientError, Volume};
use futures_util::stream::{FuturesUnordered, StreamExt};
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use serde::Serialize;

use crate::size::{format_bytes, parse_bytes};
use crate::stats::{mean_us, percentile_ns, round_to};
use crate::Global;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
/// The largest `--bs`: reads carry their length in 32 bits, and 64 MiB is far past any use.
const BLOCK_SIZE_MAX_BYTES: u64 = 64 * MIB;
const PREFILL_WRITE_BYTES: u64 = MIB;
const PREFILL_QUEUE_DEPTH: usize = 16;
const SEED: u64 = 0xba5a_17be_2c11;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Rw {
    Randread,
    Randwrite,
    Read,
    Write,
}

impl Rw {
    fn name(self) -> &'static str {
        match self {
            Rw::Randread => "randread",
            Rw::Randwrite => "randwrite",
            Rw::Read => "read",
            Rw::Write => "write",
        }
    }

    fn is_write(self) -> bool {
        matches!(self, Rw::Randwrite | Rw::Write)
    }

    fn is_random(self) -> bool {
        matches!(self, Rw::Randread | Rw::Randwrite)
    }
}

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub cluster: crate::api_client::ClusterArgs,
    #[command(flatten)]
    pub client: crate::api_client::ClientArgs,
    /// The volume to run on. Writes destroy its data in the region.
    #[arg(long = "volume", value_name = "NAME")]
    pub volume: String,
    /// Access pattern: random or sequential reads or writes.
    #[arg(long = "rw", value_enum, default_value = "randwrite")]
    pub rw: Rw,
    /// Bytes per call (K/M suffixes), a multiple of 4096.
    #[arg(long = "bs", value_name = "SIZE", value_parser = parse_bytes, default_value = "4k")]
    pub block_size_bytes: u64,
    /// Calls each job keeps in flight.
    #[arg(long = "iodepth", value_name = "N", default_value_t = 1)]
    pub iodepth: usize,
    /// Concurrent jobs (tasks).
    #[arg(long = "jobs", value_name = "N", default_value_t = 1)]
    pub jobs: usize,
    /// Measured seconds, after the ramp.
    #[arg(long = "runtime", value_name = "SECS", default_value_t = 30)]
    pub runtime_s: u64,
    /// Unmeasured seconds at the start.
    #[arg(long = "ramp", value_name = "SECS", default_value_t = 1)]
    pub ramp_s: u64,
    /// Use only the first BYTES of the volume (K/M/G/T suffixes).
    #[arg(long = "size-limit", value_name = "BYTES", value_parser = parse_bytes)]
    pub size_limit_bytes: Option<u64>,
    /// Write the whole region once (untimed) before measuring, so reads hit written data.
    #[arg(long)]
    pub prefill: bool,
    /// Print only one JSON object: workload, iops, lat_mean_us, lat_p99_us, mib_s.
    #[arg(long)]
    pub json: bool,
    /// Runtime worker threads; 1 runs the client and every job on this thread, with the fewest
    /// thread wake-ups per call.
    #[arg(long = "threads", value_name = "N", default_value_t = 1)]
    pub threads: usize,
}

/// The figures of one run. The JSON shape is what scripts read, as `basalt engine bench` writes it.
#[derive(Debug, Serialize)]
struct Outcome {
    workload: String,
    iops: f64,
    lat_mean_us: f64,
    lat_p99_us: f64,
    mib_s: f64,
}

/// What one job does.
#[derive(Debug, Clone, Copy)]
struct Job {
    index: usize,
    job_count: usize,
    rw: Rw,
    block_size_bytes: u64,
    iodepth: usize,
    region_bytes: u64,
    measure_from: Instant,
    stop_at: Instant,
}

pub fn run(global: Global, args: Args) -> anyhow::Result<()> {
    let block_size_bytes = args.block_size_bytes;
    ensure!(
        block_size_bytes > 0 && block_size_bytes % 4096 == 0 && block_size_bytes <= BLOCK_SIZE_MAX_BYTES,
        "--bs must be a multiple of 4096 bytes from 4K to {}",
        format_bytes(BLOCK_SIZE_MAX_BYTES)
    );
    ensure!(args.iodepth > 0 && args.jobs > 0, "--iodepth and --jobs must be at least 1");
    ensure!(args.runtime_s > 0, "--runtime must be at least 1 second");
    ensure!(args.threads > 0, "--threads must be at least 1");
    let meta_url = args.cluster.meta_url()?;
    let runtime = if args.threads == 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread().worker_threads(args.threads).enable_all().build()
    }
    .context("cannot start the async runtime")?;
    let outcome = runtime.block_on(run_workload(global, &args, &meta_url))?;
    if args.json {
        println!("{}", serde_json::to_string(&outcome).expect("outcomes serialise"));
        return Ok(());
    }
    println!("{:<24} {:>9} {:>9} {:>10} {:>9}", "workload", "IOPS", "MiB/s", "mean_us", "p99_us");
    println!(
        "{:<24} {:>9.0} {:>9.1} {:>10.1} {:>9.0}",
        outcome.workload, outcome.iops, outcome.mib_s, outcome.lat_mean_us, outcome.lat_p99_us
    );
    println!(
        "# {} job(s) x iodepth {} on volume {} for {} s; every write is durable when counted",
        args.jobs, args.iodepth, args.volume, args.runtime_s
    );
    Ok(())
}

/// The workload's name in the fio suite's scheme: `randwrite-4k-qd1`, `read-1m-qd16`.
fn workload_name(rw: Rw, block_size_bytes: u64, queue_depth: usize) -> String {
    let size = if block_size_bytes % MIB == 0 {
        format!("{}m", block_size_bytes / MIB)
    } else if block_size_bytes % KIB == 0 {
        format!("{}k", block_size_bytes / KIB)
    } else {
        block_size_bytes.to_string()
    };
    format!("{}-{size}-qd{queue_depth}", rw.name())
}

async fn run_workload(global: Global, args: &Args, meta_url: &str) -> anyhow::Result<Outcome> {
    let client = Client::connect_with(meta_url, args.client.options(&args.cluster.api()))
        .await
        .with_context(|| format!("cannot reach the metadata store at {meta_url}"))?;
    let volume = client.open_volume(&args.volume).await?;
    let block_size_bytes = args.block_size_bytes;
    let size_bytes = volume.size_bytes();
    let region_bytes =
        args.size_limit_bytes.unwrap_or(size_bytes).min(size_bytes) / block_size_bytes * block_size_bytes;
    ensure!(
        region_bytes >= block_size_bytes,
        "the region of volume {} ({}) is smaller than one {} call",
        args.volume,
        format_bytes(region_bytes),
        format_bytes(block_size_bytes)
    );
    let mut rng = SmallRng::seed_from_u64(SEED);
    if args.prefill {
        let started = Instant::now();
        prefill(&volume, region_bytes, &mut rng).await?;
        global.say(format_args!(
            "prefilled {} of volume {} in {:.1} s (untimed)",
            format_bytes(region_bytes),
            args.volume,
            started.elapsed().as_secs_f64()
        ));
    } else if !args.rw.is_write() {
        global.say("reads of never written ranges return zeros at once: write the region first or pass --prefill");
    }
    let mut template = vec![0u8; usize::try_from(block_size_bytes).expect("at most 64 MiB")];
    rng.fill_bytes(&mut template);
    let template = Bytes::from(template);

    let queue_depth = args.iodepth * args.jobs;
    let name = workload_name(args.rw, block_size_bytes, queue_depth);
    global.say(format_args!(
        "running {name} on volume {} ({} region, {}s + {}s ramp)",
        args.volume,
        format_bytes(region_bytes),
        args.runtime_s,
        args.ramp_s
    ));
    let runtime = Duration::from_secs(args.runtime_s);
    let measure_from = Instant::now() + Duration::from_secs(args.ramp_s);
    let stop_at = measure_from + runtime;
    let jobs: Vec<_> = (0..args.jobs)
        .map(|index| {
            let job = Job {
                index,
                job_count: args.jobs,
                rw: args.rw,
                block_size_bytes,
                iodepth: args.iodepth,
                region_bytes,
                measure_from,
                stop_at,
            };
            tokio::spawn(run_job(volume.clone(), job, template.clone()))
        })
        .collect();
    let mut latencies_ns = Vec::new();
    for job in jobs {
        latencies_ns.extend(job.await.context("a job panicked")??);
    }
    let iops = latencies_ns.len() as f64 / runtime.as_secs_f64();
    let lat_mean_us = mean_us(&latencies_ns);
    let lat_p99_us = percentile_ns(&mut latencies_ns, 0.99) as f64 / 1000.0;
    Ok(Outcome {
        workload: name,
        iops: round_to(iops, 1),
        lat_mean_us: round_to(lat_mean_us, 1),
        lat_p99_us: round_to(lat_p99_us, 1),
        mib_s: round_to(iops * block_size_bytes as f64 / MIB as f64, 1),
    })
}

/// Writes the region once, sequentially, `PREFILL_QUEUE_DEPTH` writes in flight.
async fn prefill(volume: &Volume, region_bytes: u64, rng: &mut SmallRng) -> Result<(), ClientError> {
    let mut data = vec![0u8; PREFILL_WRITE_BYTES as usize];
    rng.fill_bytes(&mut data);
    let data = Bytes::from(data);
    let mut in_flight = FuturesUnordered::new();
    let mut offset_bytes = 0;
    loop {
        while in_flight.len() < PREFILL_QUEUE_DEPTH && offset_bytes < region_bytes {
            let length_bytes = PREFILL_WRITE_BYTES.min(region_bytes - offset_bytes);
            in_flight.push(volume.write(offset_bytes, data.slice(..length_bytes as usize)));
            offset_bytes += length_bytes;
        }
        match in_flight.next().await {
            Some(result) => result?,
            None => return Ok(()),
        }
    }
}

/// Keeps `job.iodepth` calls in flight until `job.stop_at`; returns the latencies of the calls
/// issued after `job.measure_from` that completed by `job.stop_at`, in nanoseconds.
async fn run_job(volume: Volume, job: Job, data: Bytes) -> Result<Vec<u64>, ClientError> {
    let mut rng = SmallRng::seed_from_u64(SEED ^ (job.index as u64 + 1));
    let slot_count = job.region_bytes / job.block_size_bytes;
    // Sequential jobs start spread over the region, as fio's jobs with offset_increment do.
    let mut next_slot = job.index as u64 * slot_count / job.job_count as u64;
    let mut next_offset = || {
        let slot = if job.rw.is_random() {
            rng.gen_range(0..slot_count)
        } else {
            let slot = next_slot;
            next_slot = (next_slot + 1) % slot_count;
            slot
        };
        slot * job.block_size_bytes
    };
    let mut latencies_ns = Vec::with_capacity(1 << 16);
    let mut in_flight = FuturesUnordered::new();
    for _ in 0..job.iodepth {
        in_flight.push(one_call(&volume, job, next_offset(), data.clone()));
    }
    while let Some(result) = in_flight.next().await {
        let started = result?;
        let now = Instant::now();
        if started >= job.measure_from && now <= job.stop_at {
            latencies_ns.push(u64::try_from(now.duration_since(started).as_nanos()).unwrap_or(u64::MAX));
        }
        if now < job.stop_at {
            in_flight.push(one_call(&volume, job, next_offset(), data.clone()));
        }
    }
    Ok(latencies_ns)
}

/// One read or write; returns when it was issued.
async fn one_call(volume: &Volume, job: Job, offset_bytes: u64, data: Bytes) -> Result<Instant, ClientError> {
    let started = Instant::now();
    if job.rw.is_write() {
        volume.write(offset_bytes, data).await?;
    } else {
        let length_bytes = u32::try_from(job.block_size_bytes).expect("--bs is at most 64 MiB");
        volume.read(offset_bytes, length_bytes).await?;
    }
    Ok(started)
}

#[cfg(test)]
mod tests {
    use super::{workload_name, Rw};

    #[test]
    fn names_follow_the_fio_suite() {
        assert_eq!(workload_name(Rw::Randwrite, 4096, 1), "randwrite-4k-qd1");
        assert_eq!(workload_name(Rw::Randread, 4096, 32), "randread-4k-qd32");
        assert_eq!(workload_name(Rw::Read, 1 << 20, 16), "read-1m-qd16");
        assert_eq!(workload_name(Rw::Write, 128 << 10, 8), "write-128k-qd8");
    }
}
