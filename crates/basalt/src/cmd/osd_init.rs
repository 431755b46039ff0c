//! `basalt osd init`: formats a file or block device as an empty Basalt engine.
//!
//! A missing file is created (`--size` is then required); an existing file or device is
//! formatted only if it holds nothing (see `device::inspect`), unless `--force` is given.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::bail;
use engine::OBJECT_SIZE_DEFAULT_BYTES;

use crate::device;
use crate::size::{format_bytes, parse_bytes};
use crate::Global;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The file or block device to format. A missing file is created.
    #[arg(long = "data", value_name = "PATH")]
    pub data_path: PathBuf,
    /// Size to create or grow a file to (bytes, or with K/M/G/T); on a block device, how much of
    /// it to use.
    #[arg(long = "size", value_name = "SIZE", value_parser = parse_bytes)]
    pub size_bytes: Option<u64>,
    /// Object size: a power of two from 4K to 256K.
    #[arg(long = "object-size", value_name = "SIZE", value_parser = parse_bytes, default_value_t = u64::from(OBJECT_SIZE_DEFAULT_BYTES))]
    pub object_size_bytes: u64,
    /// Journal size [default: 1/16 of the device, between 16M and 256M].
    #[arg(long = "journal-size", value_name = "SIZE", value_parser = parse_bytes)]
    pub journal_size_bytes: Option<u64>,
    /// Create or grow a file with ftruncate (sparse: only the journal and written pages take
    /// space) instead of allocating and zeroing every block.
    #[arg(long)]
    pub sparse: bool,
    /// Format even if PATH holds an engine, a filesystem or other data.
    #[arg(long)]
    pub force: bool,
}

pub fn run(global: Global, args: Args) -> anyhow::Result<()> {
    let path = &args.data_path;
    let contents = device::inspect(path)?;
    if !args.force {
        if let Some(refusal) = contents.refusal(path, false) {
            bail!(refusal);
        }
    }
    if let Some(size_bytes) = args.size_bytes {
        device::check_geometry(size_bytes, args.object_size_bytes, args.journal_size_bytes)?;
    }
    let prepared = device::prepare(path, args.size_bytes, args.sparse)?;
    if prepared.created {
        global.say(format_args!("created {} ({})", path.display(), format_bytes(prepared.format_size_bytes)));
    }
    let started = Instant::now();
    let formatted = device::format(path, prepared.format_size_bytes, args.object_size_bytes, args.journal_size_bytes);
    let superblock = match formatted {
        Ok(superblock) => superblock,
        Err(error) => {
            if prepared.created {
                // Leave nothing half-made behind: the file was ours.
                let _ = std::fs::remove_file(path);
            }
            return Err(error);
        }
    };
    let format_time = started.elapsed();
    let g = superblock.geometry;
    let data_capacity_bytes = u64::from(g.block_count) * u64::from(g.object_size_bytes);
    println!("formatted {} as a Basalt engine in {:.2} s", path.display(), format_time.as_secs_f64());
    println!("  device size     {} ({} bytes)", format_bytes(g.device_size_bytes), g.device_size_bytes);
    println!("  object size     {}", format_bytes(u64::from(g.object_size_bytes)));
    println!("  blocks          {}", g.block_count);
    println!("  journal size    {}", format_bytes(g.journal_size_bytes));
    println!("  metadata size   {}", format_bytes(g.meta_size_bytes()));
    println!("  data capacity   {} ({data_capacity_bytes} bytes)", format_bytes(data_capacity_bytes));
    println!("  nonce           {:#018x}", superblock.nonce);
    Ok(())
}
