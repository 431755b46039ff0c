//! `basalt status`: the cluster at a glance, from the mon's API.

use mon::views::StatusView;

use crate::api_client::{decode, print_json, ApiArgs};
use crate::size::format_bytes;
use crate::Global;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub api: ApiArgs,
}

pub fn run(_global: Global, args: Args) -> anyhow::Result<()> {
    let answer = args.api.client().get("/status")?;
    if args.api.json {
        print_json(&answer);
        return Ok(());
    }
    let status: StatusView = decode(answer)?;
    let leader = match &status.leader {
        Some(leader) => format!("{} ({})", leader.mon, leader.address),
        None => "none (no mon leads: PG tables are not updated)".into(),
    };
    let used = match status.capacity.used_bytes {
        Some(used) if status.capacity.reporting_osds == status.osds.up => format_bytes(used),
        Some(used) => {
            format!("{}, from {} of {} up OSDs", format_bytes(used), status.capacity.reporting_osds, status.osds.up)
        }
        None => "not reported".into(),
    };
    println!("cluster   {}", status.cluster_id);
    println!("leader    {leader}");
    println!("osds      {} up of {}", status.osds.up, status.osds.total);
    println!("pools     {}", status.pools);
    println!("volumes   {}", status.volumes);
    println!(
        "pgs       {} total: {} active, {} degraded, {} inactive",
        status.pgs.total, status.pgs.active, status.pgs.degraded, status.pgs.inactive
    );
    println!("capacity  {} (used: {used})", format_bytes(status.capacity.total_bytes));
    Ok(())
}
