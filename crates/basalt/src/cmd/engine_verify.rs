//! `basalt engine verify` (hidden): after `engine torture` was killed, opens the engine (which
//! replays its journal) and checks every object against the torture log.
//!
//! Per object, the log gives the acknowledged state and at most one operation in flight at the
//! kill. The engine must hold exactly the acknowledged state, or that state with the in-flight
//! operation applied whole; listing and read versions must agree. On success the outcome of each
//! in-flight operation is appended to the log (`R` lines), so the next torture cycle and the
//! next verify start from a known state.

use std::collections::BTreeSet;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context};
use engine::{ObjectId, Reply, Request};
use platform_linux::UringOptions;

use crate::cmd::engine_torture::first_different_page;
use crate::device;
use crate::torture::{Line, ObjectState, Replay, TORTURE_INODE};
use crate::Global;

/// Mismatches listed in the error before the rest are only counted.
const REPORTED_FAILURES_MAX: usize = 20;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The engine's file or block device.
    #[arg(long = "data", value_name = "PATH")]
    pub data_path: PathBuf,
    /// The torture log to check against.
    #[arg(long = "log", value_name = "PATH")]
    pub log_path: PathBuf,
    /// Objects torture writes: inode 1, stripes 0..N (all are checked, written or not).
    #[arg(long = "objects", value_name = "N", default_value_t = 200)]
    pub object_count: u64,
}

pub fn run(_global: Global, args: Args) -> anyhow::Result<()> {
    let mut engine = device::open_engine(&args.data_path, UringOptions::default())?;
    let object_size_bytes = engine.object_size_bytes();
    let pages_per_object = usize::try_from(object_size_bytes / engine::PAGE_SIZE_BYTES).expect("fits");
    let log_text =
        std::fs::read_to_string(&args.log_path).with_context(|| format!("cannot read {}", args.log_path.display()))?;
    let replay = Replay::from_log(&log_text, pages_per_object)?;

    let mut listed = BTreeSet::new();
    let mut failures = Vec::new();
    for (object, _version) in engine.list_objects() {
        if object.inode == TORTURE_INODE {
            listed.insert(object.stripe);
        } else {
            failures.push(format!("object {object} exists but torture never wrote it"));
        }
    }
    let stripes: BTreeSet<u64> = (0..args.object_count)
        .chain(replay.objects.keys().copied())
        .chain(replay.in_flight.keys().copied())
        .chain(listed.iter().copied())
        .collect();

    let mut resolutions = Vec::new();
    let mut landed_count = 0;
    for &stripe in &stripes {
        let object = ObjectId { inode: TORTURE_INODE, stripe };
        let acked = replay.objects.get(&stripe).cloned().unwrap_or_else(|| ObjectState::new(pages_per_object));
        let in_flight = replay.in_flight.get(&stripe).copied();
        let reply = engine
            .execute(Request::Read { object, offset_bytes: 0, length_bytes: object_size_bytes })
            .with_context(|| format!("reading object {object} of {} failed", args.data_path.display()))?;
        let Reply::Read { version, data, .. } = reply else { bail!("engine replied {reply:?} to a read") };
        let exists = listed.contains(&stripe);
        let matches =
            |state: &ObjectState| first_different_page(&state.bytes(), &data).is_none() && state.exists == exists;

        // Which of the allowed states the engine holds; ties (say, deleting a missing object)
        // are settled by the version, which moves only if the operation landed.
        let landed = match in_flight {
            None => matches(&acked).then_some(false),
            Some((_, op)) => {
                let after = acked.apply(&op);
                match (matches(&acked), matches(&after)) {
                    (true, true) => Some(exists && version > acked.version),
                    (true, false) => Some(false),
                    (false, true) => Some(true),
                    (false, false) => None,
                }
            }
        };
        let Some(landed) = landed else {
            let page = first_different_page(&acked.bytes(), &data).unwrap_or(0);
            let in_flight_text = match in_flight {
                Some((op_id, op)) => format!("; operation {op_id} ({op:?}) was in flight"),
                None => String::new(),
            };
            failures.push(format!(
                "object {object}: engine holds exists={exists} version={version}, first difference from the \
                 acknowledged state (exists={} version={}) at page {page}: expected {}, found {}{in_flight_text}",
                acked.exists,
                acked.version,
                describe_expected(acked.pages[page]),
                describe_found(&data, page),
            ));
            continue;
        };
        if exists {
            let version_ok = if landed { version > acked.version } else { version >= acked.version };
            if !version_ok {
                failures.push(format!(
                    "object {object}: read version {version} is below the acknowledged version {}",
                    acked.version
                ));
            }
        }
        if let Some((op_id, _)) = in_flight {
            resolutions.push(Line::Resolve { op_id, landed });
            landed_count += usize::from(landed);
        }
    }

    if !failures.is_empty() {
        let count = failures.len();
        failures.truncate(REPORTED_FAILURES_MAX);
        bail!(
            "{count} objects of {} do not match {} ({} acknowledged operations):\n  {}",
            args.data_path.display(),
            args.log_path.display(),
            replay.acked_count,
            failures.join("\n  ")
        );
    }
    let mut log = OpenOptions::new()
        .append(true)
        .open(&args.log_path)
        .with_context(|| format!("cannot open {}", args.log_path.display()))?;
    let mut text = String::new();
    if !log_text.is_empty() && !log_text.ends_with('\n') {
        text.push('\n');
    }
    for resolution in &resolutions {
        text.push_str(&resolution.encode());
    }
    log.write_all(text.as_bytes())
        .and_then(|()| log.sync_data())
        .with_context(|| format!("cannot write {}", args.log_path.display()))?;
    println!(
        "verified {} objects against {} acknowledged operations: {} in flight at the crash, {landed_count} of them landed",
        stripes.len(),
        replay.acked_count,
        resolutions.len()
    );
    Ok(())
}

fn describe_expected(page: Option<u64>) -> String {
    match page {
        Some(pattern) => format!("pattern {pattern}"),
        None => "zeros".to_string(),
    }
}

fn describe_found(data: &[u8], page: usize) -> String {
    let page_size = engine::PAGE_SIZE_BYTES as usize;
    let bytes = data.get(page * page_size..(page + 1) * page_size).unwrap_or(&[]);
    if bytes.iter().all(|&byte| byte == 0) {
        "zeros".to_string()
    } else {
        format!("other bytes (first 8: {:02x?})", &bytes[..bytes.len().min(8)])
    }
}
