//! `basalt osd out`, `in`, `reweight` and `rm`: which OSDs hold PGs, through the mon's API.
//! The mon's next table moves the PGs; `basalt status` and `basalt pg ls` show them moving.

use mon::views::OsdView;
use serde_json::json;

use crate::api_client::{decode, print_json, ApiArgs};
use crate::Global;

#[derive(Debug, clap::Args)]
pub struct IdArgs {
    #[command(flatten)]
    pub api: ApiArgs,
    /// The OSD.
    pub id: u32,
}

#[derive(Debug, clap::Args)]
pub struct ReweightArgs {
    #[command(flatten)]
    pub api: ApiArgs,
    /// The OSD.
    pub id: u32,
    /// Its share of PGs relative to its capacity: 1 by default, 0 drains it.
    pub weight: f64,
}

#[derive(Debug, clap::Args)]
pub struct RmArgs {
    #[command(flatten)]
    pub api: ApiArgs,
    /// The OSD.
    pub id: u32,
    /// Remove it even if it is up, still a member of PGs, or may hold the only up-to-date copy
    /// of some: what only it holds is lost.
    #[arg(long)]
    pub force: bool,
}

fn report(api: &ApiArgs, answer: serde_json::Value, what: &str) -> anyhow::Result<()> {
    if api.json {
        print_json(&answer);
        return Ok(());
    }
    let view: OsdView = decode(answer)?;
    println!("osd.{} {what} (weight {}, {} PGs now)", view.id, view.weight, view.pgs);
    Ok(())
}

/// `basalt osd out N`: its PGs move to other OSDs; it serves them until they are clean without it.
pub fn run_out(_global: Global, args: IdArgs) -> anyhow::Result<()> {
    let answer = args.api.client().post(&format!("/osds/{}/out", args.id), &json!({}))?;
    report(&args.api, answer, "is out: its PGs move to other OSDs")
}

/// `basalt osd in N`: it takes its share of PGs again.
pub fn run_in(_global: Global, args: IdArgs) -> anyhow::Result<()> {
    let answer = args.api.client().post(&format!("/osds/{}/in", args.id), &json!({}))?;
    report(&args.api, answer, "is in: it takes its share of PGs")
}

pub fn run_reweight(_global: Global, args: ReweightArgs) -> anyhow::Result<()> {
    let answer = args.api.client().post(&format!("/osds/{}/reweight", args.id), &json!({ "weight": args.weight }))?;
    report(&args.api, answer, "reweighted")
}

pub fn run_rm(_global: Global, args: RmArgs) -> anyhow::Result<()> {
    let force = if args.force { "?force=true" } else { "" };
    let answer = args.api.client().delete(&format!("/osds/{}{force}", args.id))?;
    if args.api.json {
        print_json(&answer);
        return Ok(());
    }
    println!("removed osd.{}", args.id);
    Ok(())
}
