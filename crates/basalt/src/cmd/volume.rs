//! `basalt volume create|ls|info|du|resize|clone|rollback|flatten|rm`: volumes through the mon's API.

use mon::trash_views::TrashView;
use mon::usage_views::{UsageList, VolumeUsageView};
use mon::views::{VolumeList, VolumeView};
use serde_json::json;

use crate::api_client::{decode, print_json, print_table, segment, ApiArgs};
use crate::size::{format_bytes, parse_bytes};
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
    /// Create a volume.
    Create {
        /// The volume name: letters, digits, '.', '_' and '-', at most 128.
        name: String,
        /// Size in bytes or with K, M, G, T; a multiple of 4K.
        #[arg(long = "size", value_name = "SIZE", value_parser = parse_bytes)]
        size_bytes: u64,
        /// The pool [default: "default" if it exists, else the only pool].
        #[arg(long, value_name = "NAME")]
        pool: Option<String>,
    },
    /// List volumes.
    Ls,
    /// Show one volume.
    Info { name: String },
    /// Space per volume and snapshot: provisioned, taken by its own objects, and freed by
    /// deleting it (per copy; counted by the OSDs when asked).
    Du {
        /// One volume [default: every volume].
        name: Option<String>,
    },
    /// Grow a volume (shrinking is not supported).
    Resize {
        name: String,
        /// The new size in bytes or with K, M, G, T; a multiple of 4K.
        #[arg(long = "size", value_name = "SIZE", value_parser = parse_bytes)]
        size_bytes: u64,
    },
    /// Create a volume that reads through a snapshot: nothing is copied, it costs only what is
    /// written to it.
    Clone {
        /// The snapshot, VOLUME@SNAPSHOT.
        snapshot: String,
        /// The new volume's name.
        name: String,
        /// The pool [default: the snapshot's, the only one a clone can be in].
        #[arg(long, value_name = "NAME")]
        pool: Option<String>,
    },
    /// Roll a volume back to one of its snapshots, online: writes after the call see the
    /// snapshot's data (and its size); the volume's data since is deleted in the background.
    Rollback {
        /// The snapshot, VOLUME@SNAPSHOT.
        snapshot: String,
    },
    /// Copy into a volume (a clone) everything it reads through its parent snapshot, online and
    /// paced against client I/O, then cut it from the parent; progress and time left show in
    /// `basalt volume info` and `basalt status`. No snapshot or rollback of it meanwhile.
    Flatten {
        name: String,
        /// Return once the flatten has started.
        #[arg(long)]
        no_wait: bool,
    },
    /// Move a volume and its snapshots to the trash, its name free again: `basalt trash restore`
    /// brings it back until the trash's retention (`trash_retention_s`) ends it. With --now,
    /// delete it at once: its data is removed in the background, with progress shown until it is
    /// gone (unless --no-wait).
    Rm {
        name: String,
        /// Skip the trash: delete the volume and its data now.
        #[arg(long)]
        now: bool,
        /// With --now, return once the deletion has started.
        #[arg(long, requires = "now")]
        no_wait: bool,
    },
}

pub fn run(global: Global, args: Args) -> anyhow::Result<()> {
    let client = args.api.client();
    let json = args.api.json;
    let answer = match &args.command {
        Command::Create { name, size_bytes, pool } => {
            let mut body = json!({"name": name, "size_bytes": size_bytes});
            if let Some(pool) = pool {
                body["pool"] = json!(pool);
            }
            client.post("/volumes", &body)?
        }
        Command::Ls => client.get("/volumes")?,
        Command::Info { name } => client.get(&format!("/volumes/{}", segment(name)))?,
        Command::Du { name: Some(name) } => client.get(&format!("/volumes/{}/du", segment(name)))?,
        Command::Du { name: None } => client.get("/du")?,
        Command::Resize { name, size_bytes } => {
            client.patch(&format!("/volumes/{}", segment(name)), &json!({"size_bytes": size_bytes}))?
        }
        Command::Clone { snapshot, name, pool } => {
            let mut body = json!({ "name": name });
            if let Some(pool) = pool {
                body["pool"] = json!(pool);
            }
            client.post(&format!("/snapshots/{}/clones", segment(snapshot)), &body)?
        }
        Command::Rollback { snapshot } => {
            let volume = snapshot.split_once('@').map_or(snapshot.as_str(), |(volume, _)| volume);
            client.post(&format!("/volumes/{}/rollback", segment(volume)), &json!({ "snapshot": snapshot }))?
        }
        Command::Flatten { name, .. } => client.post(&format!("/volumes/{}/flatten", segment(name)), &json!({}))?,
        Command::Rm { name, now: false, .. } => client.delete(&format!("/volumes/{}", segment(name)))?,
        Command::Rm { name, now: true, .. } => client.delete(&format!("/volumes/{}?now=true", segment(name)))?,
    };
    if json {
        print_json(&answer);
        return Ok(());
    }
    match args.command {
        Command::Create { .. } => {
            let volume: VolumeView = decode(answer)?;
            println!(
                "created volume {} ({}) in pool {}, id {:#x}",
                volume.name,
                format_bytes(volume.size_bytes),
                volume.pool.as_deref().unwrap_or("?"),
                volume.id
            );
        }
        Command::Ls => {
            let list: VolumeList = decode(answer)?;
            let rows: Vec<Vec<String>> = list
                .volumes
                .iter()
                .map(|volume| {
                    vec![
                        volume.name.clone(),
                        volume.pool.clone().unwrap_or_else(|| format!("#{}", volume.pool_id)),
                        format_bytes(volume.size_bytes),
                        volume.state.clone(),
                        format!("{:#x}", volume.id),
                    ]
                })
                .collect();
            print_table(&["NAME", "POOL", "SIZE", "STATE", "ID"], &rows);
        }
        Command::Info { .. } => {
            let volume: VolumeView = decode(answer)?;
            println!("name         {}", volume.name);
            println!("id           {:#x} ({})", volume.id, volume.id);
            println!("pool         {} (id {})", volume.pool.as_deref().unwrap_or("?"), volume.pool_id);
            println!("size         {} ({} bytes)", format_bytes(volume.size_bytes), volume.size_bytes);
            println!("object size  {}", format_bytes(u64::from(volume.object_size_bytes)));
            println!("parent       {}", volume.parent.as_deref().unwrap_or("-"));
            for (depth, layer) in volume.chain.iter().enumerate() {
                println!(
                    "  {:>3}        {} (layer {:#x}, {} shows through)",
                    depth + 1,
                    layer.name,
                    layer.id,
                    format_bytes(layer.visible_bytes)
                );
            }
            println!("state        {}", volume.state);
            if let Some(deletion) = volume.deletion {
                println!("deleted      {} of {} objects", deletion.objects_done, deletion.objects_total);
            }
            if let Some(flatten) = &volume.flatten {
                println!("flatten      {}", flatten_line(flatten));
            }
            if let Some(redundancy) = volume.redundancy {
                let meaning = match redundancy.state.as_str() {
                    "intact" => "every object has all its copies",
                    "unavailable" => "some of its PGs do not serve",
                    _ => "some objects have fewer copies than the pool keeps",
                };
                println!("redundancy   {} ({meaning})", redundancy.state);
                println!(
                    "             {} of {} objects with fewer copies; {} of {} PGs clean{}",
                    redundancy.degraded_objects,
                    redundancy.objects,
                    redundancy.pgs_clean,
                    redundancy.pgs_total,
                    if redundancy.osds_not_answering > 0 {
                        format!("; {} OSDs did not answer", redundancy.osds_not_answering)
                    } else {
                        String::new()
                    }
                );
            }
        }
        Command::Du { name } => {
            let volumes = match name {
                Some(_) => vec![decode::<VolumeUsageView>(answer)?],
                None => decode::<UsageList>(answer)?.volumes,
            };
            print_usage(&volumes);
        }
        Command::Clone { snapshot, .. } => {
            let volume: VolumeView = decode(answer)?;
            println!("created volume {} ({}) as a clone of {snapshot}", volume.name, format_bytes(volume.size_bytes));
        }
        Command::Rollback { snapshot } => {
            let volume: VolumeView = decode(answer)?;
            println!("volume {} rolled back to {snapshot} ({})", volume.name, format_bytes(volume.size_bytes));
        }
        Command::Resize { .. } => {
            let volume: VolumeView = decode(answer)?;
            println!("volume {} is now {} ({} bytes)", volume.name, format_bytes(volume.size_bytes), volume.size_bytes);
        }
        Command::Flatten { name, no_wait: true } => {
            println!("volume {name} is being flattened; `basalt volume info {name}` shows its progress");
        }
        Command::Flatten { name, no_wait: false } => {
            wait_for_flatten(&client, &name, global)?;
            println!("volume {name} flattened: it reads through no snapshot");
        }
        Command::Rm { name, now: false, .. } => {
            let entry: TrashView = decode(answer)?;
            println!(
                "volume {name} moved to the trash (id {}); `basalt trash restore {name}` brings it back until it expires {}",
                entry.id,
                crate::cmd::trash::expiry(entry.expires_unix_ms)
            );
        }
        Command::Rm { name, now: true, no_wait: true } => {
            println!("volume {name} is being deleted; its data is removed in the background");
        }
        Command::Rm { name, now: true, no_wait: false } => {
            wait_for_removal(&client, &name, global)?;
            println!("volume {name} deleted");
        }
    }
    Ok(())
}

/// Polls the volume list until `name` is gone, printing the mon's removal progress on stderr.
fn wait_for_removal(client: &crate::api_client::ApiClient, name: &str, global: Global) -> anyhow::Result<()> {
    let mut last = None;
    loop {
        let list: VolumeList = decode(client.get("/volumes")?)?;
        let Some(volume) = list.volumes.into_iter().find(|volume| volume.name == name) else {
            return Ok(());
        };
        if let Some(deletion) = volume.deletion {
            let shown = (deletion.objects_done, deletion.objects_total);
            if last != Some(shown) && deletion.objects_total > 0 {
                let percent = deletion.objects_done * 100 / deletion.objects_total;
                global.say(format_args!(
                    "deleting {name}: {} of {} objects ({percent}%)",
                    deletion.objects_done, deletion.objects_total
                ));
                last = Some(shown);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

/// How far a flatten is: PGs walked, objects copied up, time left.
pub fn flatten_line(flatten: &mon::flatten::FlattenProgress) -> String {
    let percent = (flatten.pgs_done * 100).checked_div(flatten.pg_count).unwrap_or(0);
    let left = match flatten.time_left_ms {
        Some(ms) => format!(", about {} s left", ms.div_ceil(1000)),
        None => String::new(),
    };
    let problem = flatten.problem.as_deref().map(|problem| format!("; retrying {problem}")).unwrap_or_default();
    format!(
        "{percent}% ({} of {} PGs), {} objects copied of {} listed, {:.1} s{left}{problem}",
        flatten.pgs_done,
        flatten.pg_count,
        flatten.objects_copied,
        flatten.objects_listed,
        flatten.elapsed_ms as f64 / 1000.0
    )
}

/// Polls the volume until it has no parent, printing the leader's progress on stderr.
fn wait_for_flatten(client: &crate::api_client::ApiClient, name: &str, global: Global) -> anyhow::Result<()> {
    let mut last = None;
    loop {
        let volume: VolumeView = decode(client.get(&format!("/volumes/{}", segment(name)))?)?;
        if volume.parent.is_none() {
            return Ok(());
        }
        anyhow::ensure!(
            volume.state == "flattening",
            "volume {name} is {} and no longer being flattened",
            volume.state
        );
        if let Some(flatten) = &volume.flatten {
            let shown = (flatten.pgs_done, flatten.objects_copied);
            if last != Some(shown) {
                global.say(format_args!("flattening {name}: {}", flatten_line(flatten)));
                last = Some(shown);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

/// One row per layer, then a total per volume when it has snapshots, and a note when OSDs did
/// not answer.
fn print_usage(volumes: &[VolumeUsageView]) {
    let mut rows = Vec::new();
    for volume in volumes {
        for layer in &volume.layers {
            rows.push(vec![
                layer.name.clone(),
                format_bytes(layer.provisioned_bytes),
                format_bytes(layer.used_bytes),
                format_bytes(layer.exclusive_bytes),
            ]);
        }
        if volume.layers.len() > 1 {
            rows.push(vec![
                format!("{} (all)", volume.volume),
                String::new(),
                format_bytes(volume.used_bytes),
                String::new(),
            ]);
        }
    }
    print_table(&["NAME", "PROVISIONED", "USED", "FREED IF DELETED"], &rows);
    for volume in volumes.iter().filter(|volume| volume.osds_silent > 0) {
        println!("{}: {} OSDs did not answer; their PGs are not counted", volume.volume, volume.osds_silent);
    }
}
