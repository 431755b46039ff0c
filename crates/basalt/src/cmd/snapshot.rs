//! `basalt snapshot create|ls|info|rm`: snapshots through the mon's API.

use mon::snapshot_views::{SnapshotList, SnapshotView};
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
    /// Freeze a volume's current data as a snapshot; the volume goes on writable.
    Create {
        /// VOLUME@SNAPSHOT; the snapshot name: letters, digits, '.', '_' and '-', at most 64.
        name: String,
    },
    /// List snapshots, of every volume or of one.
    Ls { volume: Option<String> },
    /// Show one snapshot.
    Info {
        /// VOLUME@SNAPSHOT.
        name: String,
    },
    /// Remove a snapshot (refused while clones read through it).
    Rm {
        /// VOLUME@SNAPSHOT.
        name: String,
    },
}

pub fn run(_global: Global, args: Args) -> anyhow::Result<()> {
    let client = args.api.client();
    let answer = match &args.command {
        Command::Create { name } => client.post("/snapshots", &json!({ "name": name }))?,
        Command::Ls { volume: None } => client.get("/snapshots")?,
        Command::Ls { volume: Some(volume) } => client.get(&format!("/snapshots?volume={}", segment(volume)))?,
        Command::Info { name } => client.get(&format!("/snapshots/{}", segment(name)))?,
        Command::Rm { name } => client.delete(&format!("/snapshots/{}", segment(name)))?,
    };
    if args.api.json {
        print_json(&answer);
        return Ok(());
    }
    match args.command {
        Command::Create { .. } => {
            let snapshot: SnapshotView = decode(answer)?;
            println!(
                "created snapshot {} ({}), layer {:#x}",
                snapshot.name,
                format_bytes(snapshot.size_bytes),
                snapshot.id
            );
        }
        Command::Ls { .. } => {
            let list: SnapshotList = decode(answer)?;
            let rows: Vec<Vec<String>> = list
                .snapshots
                .iter()
                .map(|snapshot| {
                    vec![
                        snapshot.name.clone(),
                        format_bytes(snapshot.size_bytes),
                        snapshot.clones.len().to_string(),
                        format!("{:#x}", snapshot.id),
                    ]
                })
                .collect();
            print_table(&["NAME", "SIZE", "CLONES", "ID"], &rows);
        }
        Command::Info { .. } => {
            let snapshot: SnapshotView = decode(answer)?;
            println!("name         {}", snapshot.name);
            println!("id           {:#x} ({})", snapshot.id, snapshot.id);
            println!("pool         {} (id {})", snapshot.pool.as_deref().unwrap_or("?"), snapshot.pool_id);
            println!("size         {} ({} bytes)", format_bytes(snapshot.size_bytes), snapshot.size_bytes);
            println!("parent       {}", snapshot.parent.as_deref().unwrap_or("-"));
            println!("created      {} ms after the epoch", snapshot.created_unix_ms);
            let clones = if snapshot.clones.is_empty() { "-".to_string() } else { snapshot.clones.join(", ") };
            println!("clones       {clones}");
        }
        Command::Rm { name } => println!("snapshot {name} removed"),
    }
    Ok(())
}
