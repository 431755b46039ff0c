//! `basalt engine torture` (hidden): random writes, whole-object writes, deletes and checked
//! reads at queue depth 16 until killed, logging each operation before it is submitted and,
//! fsynced, after it is acknowledged.
//!
//! It exists for `tests/kill9.rs`: the test kills it with SIGKILL and `basalt engine verify`
//! checks that every acknowledged operation survived. Operations on one object never overlap in
//! time, which is what lets the verifier know the two states an object may be in after a crash
//! (see `torture.rs`). Reads are checked against the model as they complete, so torture also
//! fails on its own if the running engine returns wrong data.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, ensure, Context};
use engine::{AlignedBuffer, ObjectId, Reply, Request};
use platform_linux::UringOptions;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::device;
use crate::torture::{fill_page, Line, ObjectState, Op, Replay, TORTURE_INODE};
use crate::Global;

/// The largest partial write, in pages (64 KiB).
const PARTIAL_WRITE_PAGES_MAX: u32 = 16;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The engine's file or block device (formatted with `basalt osd init`).
    #[arg(long = "data", value_name = "PATH")]
    pub data_path: PathBuf,
    /// Seed of the random operation sequence.
    #[arg(long)]
    pub seed: u64,
    /// The torture log; appended to, and replayed first to learn what the objects hold.
    #[arg(long = "log", value_name = "PATH")]
    pub log_path: PathBuf,
    /// Objects written: inode 1, stripes 0..N.
    #[arg(long = "objects", value_name = "N", default_value_t = 200)]
    pub object_count: u64,
    /// Operations kept in flight.
    #[arg(long = "queue-depth", value_name = "N", default_value_t = 16)]
    pub queue_depth: usize,
    /// Stop after this many operations instead of running until killed.
    #[arg(long = "ops", value_name = "N")]
    pub op_count_max: Option<u64>,
}

enum InFlight {
    Change { op_id: u64, op: Op },
    Read { stripe: u64 },
}

pub fn run(global: Global, args: Args) -> anyhow::Result<()> {
    ensure!(args.queue_depth >= 1, "--queue-depth must be at least 1");
    ensure!(
        args.object_count >= 2 * args.queue_depth as u64,
        "--objects must be at least twice --queue-depth (operations on one object never overlap)"
    );
    let mut engine = device::open_engine(&args.data_path, UringOptions::default())?;
    let object_size_bytes = engine.object_size_bytes();
    let pages_per_object = usize::try_from(object_size_bytes / engine::PAGE_SIZE_BYTES).expect("fits");
    let log_text = match std::fs::read_to_string(&args.log_path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(error) => return Err(error).with_context(|| format!("cannot read {}", args.log_path.display())),
    };
    let replay = Replay::from_log(&log_text, pages_per_object)?;
    if let Some((stripe, (op_id, _))) = replay.in_flight.iter().next() {
        bail!(
            "{} has operation {op_id} on stripe {stripe} in flight from a crash; run `basalt engine verify` first",
            args.log_path.display()
        );
    }
    let mut model: BTreeMap<u64, ObjectState> = replay.objects;
    let mut log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&args.log_path)
        .with_context(|| format!("cannot open {}", args.log_path.display()))?;
    if !log_text.is_empty() && !log_text.ends_with('\n') {
        // Terminate the line a kill cut short, so it stays ignored and ours start fresh.
        log.write_all(b"\n").with_context(|| format!("cannot write {}", args.log_path.display()))?;
    }

    let mut rng = SmallRng::seed_from_u64(args.seed);
    let mut next_op_id = replay.largest_op_id + 1;
    let mut busy: HashSet<u64> = HashSet::new();
    let mut in_flight: HashMap<u64, InFlight> = HashMap::new();
    let mut next_user_data = 0u64;
    let mut op_count = 0u64;
    let mut read_count = 0u64;
    let mut acks = String::new();
    let mut completions = Vec::new();
    let started = Instant::now();
    global.say(format_args!(
        "torture seed {} on {}: {} objects known, first operation {next_op_id}",
        args.seed,
        args.data_path.display(),
        model.len()
    ));

    loop {
        while in_flight.len() < args.queue_depth && args.op_count_max.is_none_or(|max| op_count < max) {
            let stripe = loop {
                let stripe = rng.gen_range(0..args.object_count);
                if !busy.contains(&stripe) {
                    break stripe;
                }
            };
            busy.insert(stripe);
            op_count += 1;
            let user_data = next_user_data;
            next_user_data += 1;
            let object = ObjectId { inode: TORTURE_INODE, stripe };
            let roll = rng.gen_range(0..100);
            if roll >= 85 {
                in_flight.insert(user_data, InFlight::Read { stripe });
                engine.submit(user_data, Request::Read { object, offset_bytes: 0, length_bytes: object_size_bytes });
                continue;
            }
            let op = if roll < 10 {
                Op::Delete { stripe }
            } else if roll < 30 {
                Op::Write { stripe, offset_bytes: 0, length_bytes: object_size_bytes, pattern: rng.gen() }
            } else {
                let pages_max = PARTIAL_WRITE_PAGES_MAX.min(object_size_bytes / engine::PAGE_SIZE_BYTES);
                let length_pages = rng.gen_range(1..=pages_max);
                let offset_pages = rng.gen_range(0..=object_size_bytes / engine::PAGE_SIZE_BYTES - length_pages);
                Op::Write {
                    stripe,
                    offset_bytes: offset_pages * engine::PAGE_SIZE_BYTES,
                    length_bytes: length_pages * engine::PAGE_SIZE_BYTES,
                    pattern: rng.gen(),
                }
            };
            let op_id = next_op_id;
            next_op_id += 1;
            // Logged before it is submitted: the verifier must know every write that may land.
            log.write_all(Line::Submit { op_id, op }.encode().as_bytes())
                .with_context(|| format!("cannot write {}", args.log_path.display()))?;
            in_flight.insert(user_data, InFlight::Change { op_id, op });
            engine.submit(user_data, request_for(object, &op));
        }
        if in_flight.is_empty() {
            break;
        }
        engine.poll(&mut completions);
        if completions.is_empty() {
            engine.wait();
            continue;
        }
        for completion in completions.drain(..) {
            let entry = in_flight.remove(&completion.user_data).expect("a completion for a request in flight");
            let reply = completion.result.context("engine request failed")?;
            match (entry, reply) {
                (InFlight::Change { op_id, op }, Reply::Written { version } | Reply::Deleted { version }) => {
                    let state = model.entry(op.stripe()).or_insert_with(|| ObjectState::new(pages_per_object));
                    ensure!(
                        version > state.version,
                        "operation {op_id} on stripe {} acknowledged with version {version}, not above {}",
                        op.stripe(),
                        state.version
                    );
                    *state = state.apply(&op);
                    state.version = version;
                    busy.remove(&op.stripe());
                    acks.push_str(&Line::Ack { op_id, version }.encode());
                }
                (InFlight::Read { stripe }, Reply::Read { version, data, .. }) => {
                    let expected = model.get(&stripe).cloned().unwrap_or_else(|| ObjectState::new(pages_per_object));
                    if let Some(page) = first_different_page(&expected.bytes(), &data) {
                        bail!(
                            "read of stripe {stripe} (version {version}) differs from what was acknowledged at page {page}: \
                             expected {:?}",
                            expected.pages[page]
                        );
                    }
                    if expected.exists {
                        ensure!(
                            version >= expected.version,
                            "read of stripe {stripe} returned version {version}, below the acknowledged {}",
                            expected.version
                        );
                    }
                    busy.remove(&stripe);
                    read_count += 1;
                }
                (_, reply) => bail!("engine replied {reply:?} to the wrong kind of request"),
            }
        }
        if !acks.is_empty() {
            // Only after the engine acknowledged: a logged acknowledgment is a promise to check.
            log.write_all(acks.as_bytes())
                .and_then(|()| log.sync_data())
                .with_context(|| format!("cannot write {}", args.log_path.display()))?;
            acks.clear();
        }
    }
    println!(
        "torture seed {}: {} operations ({read_count} checked reads) in {:.1} s",
        args.seed,
        op_count,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

pub fn request_for(object: ObjectId, op: &Op) -> Request {
    match *op {
        Op::Delete { .. } => Request::Delete { object },
        Op::Write { offset_bytes, length_bytes, pattern, .. } => {
            let mut data = AlignedBuffer::zeroed(length_bytes as usize);
            let page_size = engine::PAGE_SIZE_BYTES as usize;
            let first_page = u64::from(offset_bytes / engine::PAGE_SIZE_BYTES);
            for (index, page) in data.as_mut_slice().chunks_exact_mut(page_size).enumerate() {
                fill_page(pattern, first_page + index as u64, page);
            }
            Request::Write { object, offset_bytes, data }
        }
    }
}

/// The index of the first 4 KiB page where `expected` and `actual` differ.
pub fn first_different_page(expected: &[u8], actual: &[u8]) -> Option<usize> {
    if expected.len() != actual.len() {
        return Some(0);
    }
    let page_size = engine::PAGE_SIZE_BYTES as usize;
    expected.chunks(page_size).zip(actual.chunks(page_size)).position(|(a, b)| a != b)
}
