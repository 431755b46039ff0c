//! `basalt osd ls` and `basalt osd tree`: the registered OSDs through the mon's API;
//! `basalt osd stop` and `basalt osd start`: the OSDs of a `basalt dev`, to try failover.

use mon::views::{LocalOsdView, OsdList, OsdTree, OsdView};
use serde_json::json;

use crate::api_client::{decode, list_cell, print_json, print_table, ApiArgs};
use crate::size::format_bytes;
use crate::Global;

#[derive(Debug, clap::Args)]
pub struct LsArgs {
    #[command(flatten)]
    pub api: ApiArgs,
}

#[derive(Debug, clap::Args)]
pub struct TreeArgs {
    #[command(flatten)]
    pub api: ApiArgs,
}

#[derive(Debug, clap::Args)]
pub struct StopArgs {
    #[command(flatten)]
    pub api: ApiArgs,
    /// The OSD to stop.
    pub id: u32,
    /// Stop it at once, as a crash would (its liveness key stays until it is reported or its
    /// lease runs out), instead of finishing its ops and handing its lease back.
    #[arg(long)]
    pub crash: bool,
}

#[derive(Debug, clap::Args)]
pub struct StartArgs {
    #[command(flatten)]
    pub api: ApiArgs,
    /// The OSD to start again.
    pub id: u32,
}

pub fn run_stop(_global: Global, args: StopArgs) -> anyhow::Result<()> {
    let mode = if args.crash { "crash" } else { "graceful" };
    let answer = args.api.client().post(&format!("/osds/{}/stop", args.id), &json!({ "mode": mode }))?;
    if args.api.json {
        print_json(&answer);
        return Ok(());
    }
    let view: LocalOsdView = decode(answer)?;
    println!("stopped osd.{}{}", view.osd, if args.crash { " (as a crash)" } else { "" });
    Ok(())
}

pub fn run_start(_global: Global, args: StartArgs) -> anyhow::Result<()> {
    let answer = args.api.client().post(&format!("/osds/{}/start", args.id), &json!({}))?;
    if args.api.json {
        print_json(&answer);
        return Ok(());
    }
    let view: LocalOsdView = decode(answer)?;
    println!("started osd.{}", view.osd);
    Ok(())
}

fn state(osd: &OsdView) -> &'static str {
    if osd.up {
        "up"
    } else {
        "down"
    }
}

pub fn run_ls(_global: Global, args: LsArgs) -> anyhow::Result<()> {
    let answer = args.api.client().get("/osds")?;
    if args.api.json {
        print_json(&answer);
        return Ok(());
    }
    let list: OsdList = decode(answer)?;
    let rows: Vec<Vec<String>> = list
        .osds
        .iter()
        .map(|osd| {
            vec![
                osd.id.to_string(),
                state(osd).to_string(),
                osd.address.clone().unwrap_or_else(|| "-".into()),
                osd.host.clone(),
                osd.rack.clone(),
                list_cell(&osd.tags),
                format!("{}", osd.weight),
                format_bytes(osd.capacity_bytes),
                osd.primary_pgs.to_string(),
                osd.pgs.to_string(),
            ]
        })
        .collect();
    print_table(&["ID", "STATE", "ADDRESS", "HOST", "RACK", "TAGS", "WEIGHT", "CAPACITY", "PRIMARY", "PGS"], &rows);
    Ok(())
}

pub fn run_tree(_global: Global, args: TreeArgs) -> anyhow::Result<()> {
    let answer = args.api.client().get("/osds/tree")?;
    if args.api.json {
        print_json(&answer);
        return Ok(());
    }
    let tree: OsdTree = decode(answer)?;
    let mut rows = Vec::new();
    for rack in &tree.racks {
        rows.push(vec![format!("rack {}", rack.name), String::new(), String::new(), String::new(), String::new()]);
        for host in &rack.hosts {
            rows.push(vec![
                format!("  host {}", host.name),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
            ]);
            for osd in &host.osds {
                rows.push(vec![
                    format!("    osd.{}", osd.id),
                    state(osd).to_string(),
                    format_bytes(osd.capacity_bytes),
                    osd.primary_pgs.to_string(),
                    osd.pgs.to_string(),
                ]);
            }
        }
    }
    print_table(&["NAME", "STATE", "CAPACITY", "PRIMARY", "PGS"], &rows);
    Ok(())
}
