//! `basalt config get` and `basalt config set`: the cluster's live-changeable settings, through
//! the mon's API. OSDs and the mon follow a change at once.

use serde_json::{json, Value};

use crate::api_client::{print_json, print_table, ApiArgs};
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
    /// Print every setting.
    Get,
    /// Change one setting: down_out_interval_s (seconds an OSD may stay down before it is
    /// marked out and its PGs are rebuilt elsewhere), nearfull_ratio_percent and
    /// full_ratio_percent (how full an OSD's drive may get before `basalt status` warns, and
    /// before it takes no new objects), trash_retention_s (seconds a removed volume stays
    /// restorable), and the recovery and scrub settings `config get` lists.
    Set { name: String, value: String },
}

pub fn run(_global: Global, args: Args) -> anyhow::Result<()> {
    let client = args.api.client();
    let answer = match args.command {
        Command::Get => client.get("/config")?,
        Command::Set { name, value } => {
            let number: u64 = value.parse().map_err(|_| anyhow::anyhow!("{value:?} is not a whole number"))?;
            client.patch("/config", &json!({ name: number }))?
        }
    };
    if args.api.json {
        print_json(&answer);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = match &answer {
        Value::Object(settings) => settings
            .iter()
            .filter(|(name, _)| name.as_str() != "version")
            .map(|(name, value)| vec![name.clone(), value.to_string()])
            .collect(),
        _ => anyhow::bail!("the mon answered {answer}, not the settings"),
    };
    print_table(&["NAME", "VALUE"], &rows);
    Ok(())
}
