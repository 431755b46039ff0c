//! `basalt trash ls|restore|purge`: volumes removed to the trash (ADR 0030), through the mon's
//! API.

use mon::trash_views::{TrashList, TrashView};
use mon::views::VolumeView;
use serde_json::json;

use crate::api_client::{decode, print_json, print_table, segment, ApiArgs};
use crate::size::format_bytes;
use crate::Global;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub api: ApiArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List the volumes in the trash, oldest first.
    Ls,
    /// Bring a volume back from the trash with its snapshots.
    Restore {
        /// The name it had, or its id (`basalt trash ls`) if several had that name.
        name: String,
        /// Restore it under this name.
        #[arg(long = "as", value_name = "NEW")]
        as_name: Option<String>,
    },
    /// Delete volumes in the trash for good: one by name or id, or every one that expired.
    Purge {
        /// The name it had, or its id.
        #[arg(required_unless_present = "expired", conflicts_with = "expired")]
        name: Option<String>,
        /// Every entry whose retention ended (the mon purges them itself within a second).
        #[arg(long)]
        expired: bool,
    },
}

pub fn run(_global: Global, args: Args) -> anyhow::Result<()> {
    let client = args.api.client();
    let answer = match &args.command {
        Command::Ls => client.get("/trash")?,
        Command::Restore { name, as_name } => {
            client.post(&format!("/trash/{}/restore", segment(name)), &json!({ "as": as_name }))?
        }
        Command::Purge { name: Some(name), .. } => client.delete(&format!("/trash/{}", segment(name)))?,
        Command::Purge { name: None, .. } => client.delete("/trash?expired=true")?,
    };
    if args.api.json {
        print_json(&answer);
        return Ok(());
    }
    match &args.command {
        Command::Ls => {
            let list: TrashList = decode(answer)?;
            let rows: Vec<Vec<String>> = list
                .entries
                .iter()
                .map(|entry| {
                    vec![
                        entry.id.clone(),
                        entry.name.clone(),
                        entry.pool.clone().unwrap_or_else(|| "-".into()),
                        format_bytes(entry.size_bytes),
                        entry.snapshots.len().to_string(),
                        expiry(entry.expires_unix_ms),
                    ]
                })
                .collect();
            print_table(&["ID", "NAME", "POOL", "SIZE", "SNAPSHOTS", "EXPIRES"], &rows);
        }
        Command::Restore { .. } => {
            let volume: VolumeView = decode(answer)?;
            println!("volume {} restored from the trash ({})", volume.name, format_bytes(volume.size_bytes));
        }
        Command::Purge { name: Some(_), .. } => {
            let entry: TrashView = decode(answer)?;
            println!("purged {} (id {}) from the trash; its data is removed in the background", entry.name, entry.id);
        }
        Command::Purge { name: None, .. } => {
            let list: TrashList = decode(answer)?;
            println!("purged {} expired entries from the trash", list.entries.len());
        }
    }
    Ok(())
}

/// When a trash entry expires, from now: `in 23 h 59 min`, or `now` once it has.
pub fn expiry(expires_unix_ms: u64) -> String {
    let left_s = expires_unix_ms.saturating_sub(stdx::wall_clock::unix_ms()) / 1000;
    match left_s {
        0 => "now".to_string(),
        1..=59 => format!("in {left_s} s"),
        60..=3599 => format!("in {} min", left_s / 60),
        _ => format!("in {} h {} min", left_s / 3600, left_s % 3600 / 60),
    }
}
