//! `basalt engine fill`: writes N distinct objects into an existing engine as fast as it takes
//! them, then writes the journal back so every object is in the metadata area.
//!
//! Followed by `basalt osd info`, this measures the index RAM per object and the open time at a
//! given object count (ADR 0003 budgets them at one million objects).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, ensure};
use engine::{AlignedBuffer, ObjectId, Request, PAGE_SIZE_BYTES};
use platform_linux::UringOptions;

use crate::device;
use crate::pipeline;
use crate::size::{format_bytes, parse_bytes};
use crate::Global;

/// The inode whose stripes `fill` writes.
const FILL_INODE: u64 = 1;
const QUEUE_DEPTH: usize = 32;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The engine's file or block device (formatted with `basalt osd init`).
    #[arg(long = "data", value_name = "PATH")]
    pub data_path: PathBuf,
    /// How many objects to write: inode 1, stripes 0..N.
    #[arg(long = "objects", value_name = "N")]
    pub object_count: u64,
    /// Bytes written at offset 0 of each object: a multiple of 4K up to the object size (the
    /// object size makes whole-object writes).
    #[arg(long = "object-bytes", value_name = "SIZE", value_parser = parse_bytes, default_value_t = 4096)]
    pub object_bytes: u64,
}

pub fn run(global: Global, args: Args) -> anyhow::Result<()> {
    let path = &args.data_path;
    let mut engine = device::open_engine(path, UringOptions::default())?;
    let object_size_bytes = u64::from(engine.object_size_bytes());
    let block_count = u64::from(engine.geometry().block_count);
    ensure!(
        args.object_bytes > 0
            && args.object_bytes.is_multiple_of(u64::from(PAGE_SIZE_BYTES))
            && args.object_bytes <= object_size_bytes,
        "--object-bytes {} must be a multiple of 4096 between 4096 and the object size {object_size_bytes}",
        args.object_bytes
    );
    if args.object_count > block_count {
        bail!(
            "{} has {block_count} blocks of {}, fewer than --objects {}; format a larger device",
            path.display(),
            format_bytes(object_size_bytes),
            args.object_count
        );
    }
    let length_bytes = usize::try_from(args.object_bytes).expect("at most the object size");
    let mut template = AlignedBuffer::zeroed(length_bytes);
    for (index, byte) in template.as_mut_slice().iter_mut().enumerate() {
        *byte = (index % 251) as u8;
    }
    global.say(format_args!(
        "writing {} objects of {} at queue depth {QUEUE_DEPTH} to {}",
        args.object_count,
        format_bytes(args.object_bytes),
        path.display()
    ));
    let started = Instant::now();
    let progress_every = (args.object_count / 10).max(1);
    pipeline::run(
        &mut engine,
        args.object_count,
        QUEUE_DEPTH,
        |stripe| {
            let mut data = AlignedBuffer::from_slice(template.as_slice());
            // Each object's data is distinct.
            data.as_mut_slice()[..8].copy_from_slice(&stripe.to_le_bytes());
            Request::Write { object: ObjectId { inode: FILL_INODE, stripe }, offset_bytes: 0, data }
        },
        |stripe, _| {
            if (stripe + 1) % progress_every == 0 {
                global.say(format_args!("  {} objects written", stripe + 1));
            }
            Ok(())
        },
    )?;
    let write_time_s = started.elapsed().as_secs_f64();
    let writeback_started = Instant::now();
    engine.write_back_journal();
    if let Some(reason) = engine.poisoned() {
        bail!("the engine at {} failed while writing its journal back: {reason}", path.display());
    }
    let writeback_time_s = writeback_started.elapsed().as_secs_f64();
    let space = engine.space();
    println!(
        "wrote {} objects of {} in {write_time_s:.2} s ({:.0} objects/s), journal written back in {writeback_time_s:.2} s",
        args.object_count,
        format_bytes(args.object_bytes),
        args.object_count as f64 / write_time_s.max(1e-9),
    );
    println!(
        "engine now holds {} objects, {} used of {}, index {} bytes",
        space.object_count,
        format_bytes(space.used_bytes),
        format_bytes(space.total_bytes),
        engine.index_memory_bytes()
    );
    Ok(())
}
