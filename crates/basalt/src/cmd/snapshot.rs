//! `basalt snapshot create|ls|info|rm`: snapshots through the mon's API, one at a time or a
//! group of several volumes' at one cut; `basalt snapshot diff` (`snapshot_diff.rs`) asks the
//! OSDs what changed between two.

use mon::snapshot_views::{GroupView, SnapshotList, SnapshotView};
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
    /// Freeze a volume's current data as a snapshot; the volume goes on writable. With --group,
    /// snapshot several volumes (in any pools) at one crash-consistent cut, each as VOLUME@NAME.
    Create {
        /// VOLUME@SNAPSHOT; the snapshot name: letters, digits, '.', '_' and '-', at most 64.
        /// With --group: the volumes.
        #[arg(required = true, num_args = 1..)]
        names: Vec<String>,
        /// The group's name, which each volume's snapshot takes.
        #[arg(long, value_name = "NAME")]
        group: Option<String>,
    },
    /// List snapshots, of every volume or of one.
    Ls { volume: Option<String> },
    /// Show one snapshot.
    Info {
        /// VOLUME@SNAPSHOT.
        name: String,
    },
    /// Remove a snapshot; it stays hidden while its volume or clones read through it. With
    /// --group, every snapshot of a group (one of a group alone is refused).
    Rm {
        /// VOLUME@SNAPSHOT, or with --group the group's name.
        name: String,
        /// NAME is a group snapshot's.
        #[arg(long)]
        group: bool,
    },
    /// List the extents of NEWER that may differ from OLD (what an incremental backup copies;
    /// the NBD export of NEWER reports the same as its qemu:dirty-bitmap:SNAPSHOT context).
    Diff {
        /// VOLUME@SNAPSHOT: the earlier snapshot.
        from: String,
        /// VOLUME@SNAPSHOT, a later snapshot of the same volume, or VOLUME itself.
        to: String,
    },
}

pub fn run(_global: Global, args: Args) -> anyhow::Result<()> {
    if let Command::Diff { from, to } = &args.command {
        return super::snapshot_diff::run(&args.api, from, to);
    }
    let client = args.api.client();
    let answer = match &args.command {
        Command::Diff { .. } => unreachable!("answered above"),
        Command::Create { names, group: None } => match names.as_slice() {
            [name] => client.post("/snapshots", &json!({ "name": name }))?,
            _ => anyhow::bail!("name one snapshot, VOLUME@SNAPSHOT, or several volumes with --group NAME"),
        },
        Command::Create { names, group: Some(group) } => {
            client.post("/snapshot-groups", &json!({ "name": group, "volumes": names }))?
        }
        Command::Ls { volume: None } => client.get("/snapshots")?,
        Command::Ls { volume: Some(volume) } => client.get(&format!("/snapshots?volume={}", segment(volume)))?,
        Command::Info { name } => client.get(&format!("/snapshots/{}", segment(name)))?,
        Command::Rm { name, group: false } => client.delete(&format!("/snapshots/{}", segment(name)))?,
        Command::Rm { name, group: true } => client.delete(&format!("/snapshot-groups/{}", segment(name)))?,
    };
    if args.api.json {
        print_json(&answer);
        return Ok(());
    }
    match args.command {
        Command::Create { group: Some(group), .. } => {
            let view: GroupView = decode(answer)?;
            let names: Vec<&str> = view.snapshots.iter().map(|snapshot| snapshot.name.as_str()).collect();
            println!("created group snapshot {group} at one cut: {}", names.join(", "));
        }
        Command::Create { group: None, .. } => {
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
                        if snapshot.grouped { snapshot.snapshot.clone() } else { "-".to_string() },
                        format!("{:#x}", snapshot.id),
                    ]
                })
                .collect();
            print_table(&["NAME", "SIZE", "CLONES", "GROUP", "ID"], &rows);
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
            if snapshot.grouped {
                println!("group        {} (removed only with the group)", snapshot.snapshot);
            }
        }
        Command::Diff { .. } => unreachable!("answered above"),
        Command::Rm { name, group: false } => println!("snapshot {name} removed"),
        Command::Rm { name, group: true } => {
            let view: GroupView = decode(answer)?;
            let names: Vec<&str> = view.snapshots.iter().map(|snapshot| snapshot.name.as_str()).collect();
            println!("group snapshot {name} removed: {}", names.join(", "));
        }
    }
    Ok(())
}
