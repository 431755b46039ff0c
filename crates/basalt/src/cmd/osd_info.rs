//! `basalt osd info`: opens an engine the way an OSD does (index rebuild and journal replay),
//! times the open, and prints the superblock, space accounting and the index's RAM.
//!
//! This is how the per-object RAM budget (ADR 0003) and the open time are measured on a real
//! drive: fill an engine with `basalt engine fill`, then run this.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};
use platform_linux::UringOptions;
use serde_json::json;

use crate::device::{self, Contents};
use crate::size::format_bytes;
use crate::Global;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The engine's file or block device.
    #[arg(long = "data", value_name = "PATH")]
    pub data_path: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(_global: Global, args: Args) -> anyhow::Result<()> {
    let path = &args.data_path;
    match device::inspect(path)? {
        Contents::Missing => bail!("{} does not exist", path.display()),
        Contents::Basalt(_) => {}
        Contents::BasaltUnreadable(error) => {
            return Err(error).with_context(|| format!("cannot open the Basalt engine at {}", path.display()))
        }
        _ => bail!("{} does not hold a Basalt engine (no Basalt superblock)", path.display()),
    }
    let rss_before_bytes = process_memory_bytes("VmRSS:");
    let started = Instant::now();
    let engine = device::open_engine(path, UringOptions::default())?;
    let open_time_s = started.elapsed().as_secs_f64();
    let rss_after_bytes = process_memory_bytes("VmRSS:");

    let superblock = engine.superblock();
    let g = engine.geometry();
    let space = engine.space();
    let index_memory_bytes = engine.index_memory_bytes() as u64;
    let object_count = space.object_count;
    let index_bytes_per_object = (object_count > 0).then(|| index_memory_bytes as f64 / object_count as f64);
    let rss_growth_bytes = rss_after_bytes.zip(rss_before_bytes).map(|(after, before)| after.saturating_sub(before));

    if args.json {
        let info = json!({
            "path": path.display().to_string(),
            "format_version": engine::layout::FORMAT_VERSION,
            "generation": superblock.generation,
            "nonce": superblock.nonce,
            "osd_id": superblock.osd_id,
            "device_size_bytes": g.device_size_bytes,
            "object_size_bytes": g.object_size_bytes,
            "block_count": g.block_count,
            "journal_offset_bytes": g.journal_offset_bytes,
            "journal_size_bytes": g.journal_size_bytes,
            "journal_tail_offset_bytes": superblock.journal_tail_offset_bytes,
            "journal_tail_seq": superblock.journal_tail_seq,
            "meta_offset_bytes": g.meta_offset_bytes,
            "meta_entry_size_bytes": g.meta_entry_size_bytes,
            "data_offset_bytes": g.data_offset_bytes,
            "total_bytes": space.total_bytes,
            "used_bytes": space.used_bytes,
            "free_bytes": space.free_bytes,
            "journal_used_bytes": space.journal_used_bytes,
            "object_count": object_count,
            "index_memory_bytes": index_memory_bytes,
            "index_bytes_per_object": index_bytes_per_object,
            "rss_bytes": rss_after_bytes,
            "rss_growth_during_open_bytes": rss_growth_bytes,
            "open_time_s": open_time_s,
        });
        println!("{}", serde_json::to_string_pretty(&info).expect("json values serialise"));
        return Ok(());
    }
    println!("{}: Basalt engine, format version {}", path.display(), engine::layout::FORMAT_VERSION);
    println!("  generation        {}", superblock.generation);
    println!("  nonce             {:#018x}", superblock.nonce);
    println!("  osd id            {}", superblock.osd_id);
    println!("  device size       {} ({} bytes)", format_bytes(g.device_size_bytes), g.device_size_bytes);
    println!("  object size       {}", format_bytes(u64::from(g.object_size_bytes)));
    println!("  blocks            {}", g.block_count);
    println!("  journal           {} at offset_bytes={}", format_bytes(g.journal_size_bytes), g.journal_offset_bytes);
    println!(
        "  journal tail      offset_bytes={} seq={}",
        superblock.journal_tail_offset_bytes, superblock.journal_tail_seq
    );
    println!(
        "  metadata          {} at offset_bytes={} ({} bytes per entry)",
        format_bytes(g.meta_size_bytes()),
        g.meta_offset_bytes,
        g.meta_entry_size_bytes
    );
    println!("  data              offset_bytes={}", g.data_offset_bytes);
    println!("space");
    println!("  total             {}", format_bytes(space.total_bytes));
    println!("  used              {}", format_bytes(space.used_bytes));
    println!("  free              {}", format_bytes(space.free_bytes));
    println!(
        "  journal used      {} of {}",
        format_bytes(space.journal_used_bytes),
        format_bytes(space.journal_total_bytes)
    );
    println!("  objects           {object_count}");
    println!("memory");
    match index_bytes_per_object {
        Some(per_object) => {
            println!("  index             {index_memory_bytes} bytes ({per_object:.1} bytes per object)")
        }
        None => println!("  index             {index_memory_bytes} bytes"),
    }
    if let (Some(rss), Some(growth)) = (rss_after_bytes, rss_growth_bytes) {
        println!("  process rss       {} ({} during open)", format_bytes(rss), format_bytes(growth));
    }
    println!("open time           {:.3} s (index rebuild and journal replay)", open_time_s);
    Ok(())
}

/// A `kB` field of /proc/self/status, such as `VmRSS:`, in bytes.
fn process_memory_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with(field))?;
    let kib: u64 = line[field.len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}
