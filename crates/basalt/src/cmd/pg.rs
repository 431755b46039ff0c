//! `basalt pg ls`: every PG with its members, primary, epoch and state, through the mon's API.

use mon::views::PgList;

use crate::api_client::{decode, print_json, print_table, segment, ApiArgs};
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
    /// List PGs: members (acting, then target), primary, epoch, state, objects left to copy,
    /// and what their last scrub found.
    Ls {
        /// Only this pool's PGs.
        #[arg(long)]
        pool: Option<String>,
        /// Only PGs in this state: active, clean, degraded, recovering, peering, inactive,
        /// unknown, undersized (fewer acting members than target ones, serving or not),
        /// misplaced, or stuck (their primary failed at peering or recovery 5 times in a row).
        #[arg(long)]
        state: Option<String>,
    },
}

pub fn run(_global: Global, args: Args) -> anyhow::Result<()> {
    let client = args.api.client();
    match args.command {
        Command::Ls { pool, state } => {
            let mut query = Vec::new();
            if let Some(pool) = &pool {
                query.push(format!("pool={}", segment(pool)));
            }
            if let Some(state) = &state {
                query.push(format!("state={}", segment(state)));
            }
            let path = if query.is_empty() { "/pgs".to_string() } else { format!("/pgs?{}", query.join("&")) };
            let answer = client.get(&path)?;
            if args.api.json {
                print_json(&answer);
                return Ok(());
            }
            let list: PgList = decode(answer)?;
            let members = |osds: &[u32]| {
                if osds.is_empty() {
                    "-".to_string()
                } else {
                    osds.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
                }
            };
            let rows: Vec<Vec<String>> = list
                .pgs
                .iter()
                .map(|pg| {
                    vec![
                        format!("{}.{}", pg.pool, pg.pg),
                        pg.state.clone(),
                        pg.epoch.to_string(),
                        pg.primary.map_or("-".into(), |osd| osd.to_string()),
                        members(&pg.acting),
                        members(&pg.target),
                        pg.objects_left.to_string(),
                        pg.scrub.as_ref().map_or("-".into(), |scrub| {
                            format!(
                                "{} found, {} repaired, {} unrepairable",
                                scrub.found, scrub.repaired, scrub.unrepairable
                            )
                        }),
                        pg.reason.clone().unwrap_or_else(|| "-".into()),
                    ]
                })
                .collect();
            let headers =
                ["PG", "STATE", "EPOCH", "PRIMARY", "ACTING", "TARGET", "OBJECTS_LEFT", "LAST_SCRUB", "REASON"];
            print_table(&headers, &rows);
        }
    }
    Ok(())
}
