//! `basalt scrub`: asks the PGs' primaries to compare every object's copies and repair the
//! bad ones, through the mon's API, and with `--wait` follows the request until every PG it
//! covers answered.

use std::time::Duration;

use mon::views::ScrubProgressView;
use serde_json::json;

use crate::api_client::{decode, print_json, print_table, ApiArgs};
use crate::Global;

/// How often `--wait` asks how far the scrub got.
const POLL_INTERVAL: Duration = Duration::from_millis(500);

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub api: ApiArgs,
    /// Only this pool's PGs.
    #[arg(long, conflicts_with_all = ["pg", "volume"])]
    pub pool: Option<String>,
    /// Only this PG (POOL_ID.PG, as basalt pg ls shows it).
    #[arg(long, conflicts_with = "volume")]
    pub pg: Option<String>,
    /// Only this volume's objects.
    #[arg(long)]
    pub volume: Option<String>,
    /// Wait until every PG the scrub covers answered, and print what was found.
    #[arg(long)]
    pub wait: bool,
}

pub fn run(global: Global, args: Args) -> anyhow::Result<()> {
    let client = args.api.client();
    let body = json!({ "pool": args.pool, "pg": args.pg, "volume": args.volume });
    let mut answer = client.post("/scrub", &body)?;
    let mut progress: ScrubProgressView = decode(answer.clone())?;
    if args.wait {
        let mut said = u64::MAX;
        while progress.pgs_done < progress.pgs_total {
            if progress.pgs_done != said {
                global.say(format!("scrub {}: {} of {} PGs done", progress.id, progress.pgs_done, progress.pgs_total));
                said = progress.pgs_done;
            }
            std::thread::sleep(POLL_INTERVAL);
            answer = client.get(&format!("/scrub/{}", progress.id))?;
            progress = decode(answer.clone())?;
        }
    }
    if args.api.json {
        print_json(&answer);
        return Ok(());
    }
    if !args.wait {
        println!("scrub {} requested for {} PGs (basalt scrub --wait follows one)", progress.id, progress.pgs_total);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = progress
        .pgs
        .iter()
        .filter(|pg| pg.found > 0)
        .map(|pg| {
            vec![
                format!("{}.{}", pg.pool, pg.pg),
                pg.objects.to_string(),
                pg.found.to_string(),
                pg.repaired.to_string(),
                pg.unrepairable.to_string(),
                pg.errors.first().cloned().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    if !rows.is_empty() {
        print_table(&["PG", "OBJECTS", "FOUND", "REPAIRED", "UNREPAIRABLE", "FIRST_ERROR"], &rows);
    }
    println!(
        "scrub {}: {} PGs, {} objects: {} found damaged, {} repaired, {} unrepairable",
        progress.id, progress.pgs_total, progress.objects, progress.found, progress.repaired, progress.unrepairable
    );
    if progress.unrepairable > 0 {
        anyhow::bail!("{} objects could not be repaired", progress.unrepairable);
    }
    Ok(())
}
