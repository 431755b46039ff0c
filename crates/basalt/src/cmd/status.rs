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
        None if status.store_error.is_some() => "unknown (the store cannot be read)".into(),
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
    if let Some(error) = &status.store_error {
        println!("store     UNAVAILABLE: {error}");
        println!("          (what follows is this mon's last view; I/O goes on, changes wait for the store)");
    }
    println!("leader    {leader}");
    println!("osds      {} up of {}", status.osds.up, status.osds.total);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |now| now.as_secs());
    for down in &status.osds_down {
        let fate = match (&down.kept_in, down.out_in_s) {
            _ if down.out => "out: its PGs are rebuilt on other OSDs".to_string(),
            (Some(reason), _) => format!("kept in: {reason}"),
            (None, Some(seconds)) => format!("marked out in {seconds} s unless it returns"),
            (None, None) => String::new(),
        };
        let why = if down.marked_down { " (running, but marked down: its peers cannot reach it)" } else { "" };
        println!("          osd.{} down for {} s{why}; {fate}", down.id, now.saturating_sub(down.since_unix_s));
    }
    for full in &status.osds_full {
        let what = match full.state.as_str() {
            "full" => "full: it takes no new objects (writes that need space fail with no space)",
            _ => "near full",
        };
        println!("          osd.{} {}% used, {what}", full.id, full.used_percent);
    }
    println!("pools     {}", status.pools);
    println!("volumes   {}", status.volumes);
    if status.trash.volumes > 0 {
        println!(
            "trash     {} ({} provisioned), restorable until purged: `basalt trash ls`",
            if status.trash.volumes == 1 {
                "1 volume".to_string()
            } else {
                format!("{} volumes", status.trash.volumes)
            },
            crate::size::format_bytes(status.trash.provisioned_bytes)
        );
    }
    for flattening in &status.flattening {
        let progress = match &flattening.progress {
            Some(progress) => crate::cmd::volume::flatten_line(progress),
            None => "progress known to the leader mon".to_string(),
        };
        println!("flatten   {}: {progress}", flattening.volume);
    }
    let pgs = &status.pgs;
    println!(
        "pgs       {} total: {} active ({} clean, {} degraded, {} recovering), {} peering, {} inactive{}",
        pgs.total,
        pgs.active,
        pgs.clean,
        pgs.degraded,
        pgs.recovering,
        pgs.peering,
        pgs.inactive,
        if pgs.unknown > 0 {
            format!(", {} unknown (their primaries did not answer)", pgs.unknown)
        } else {
            String::new()
        }
    );
    if pgs.stuck > 0 {
        println!(
            "          {} stuck (their primaries keep failing at peering or recovery: `basalt pg ls --state stuck` says why)",
            pgs.stuck
        );
    }
    if pgs.misplaced > 0 {
        println!("          {} misplaced (moving to their new OSDs; old members serve until done)", pgs.misplaced);
    }
    let recovery = &status.recovery;
    if recovery.objects_left > 0 {
        let rate = match (recovery.bytes_per_s, recovery.seconds_left) {
            (Some(rate), Some(left)) => format!(", {}/s, about {left:.0} s left", format_bytes(rate as u64)),
            _ => String::new(),
        };
        println!("recovery  {} objects, {} left{rate}", recovery.objects_left, format_bytes(recovery.bytes_left));
    }
    let scrub = &status.scrub;
    if scrub.pgs_scrubbed > 0 {
        println!(
            "scrub     {} of {} PGs scrubbed: {} objects found damaged, {} repaired, {} unrepairable",
            scrub.pgs_scrubbed, pgs.total, scrub.found, scrub.repaired, scrub.unrepairable
        );
    }
    println!("capacity  {} (used: {used})", format_bytes(status.capacity.total_bytes));
    Ok(())
}
