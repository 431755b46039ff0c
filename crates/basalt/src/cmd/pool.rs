//! `basalt pool create|ls|rm`: pools through the mon's API.

use mon::views::{PoolList, PoolView};
use serde_json::json;

use crate::api_client::{decode, list_cell, print_json, print_table, segment, ApiArgs};
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
    /// Create a replicated pool.
    Create(CreateArgs),
    /// List pools with their PG states.
    Ls,
    /// Delete a pool that holds no volume.
    Rm {
        /// The pool to delete.
        name: String,
    },
}

#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// The pool name: letters, digits, '.', '_' and '-', at most 64.
    pub name: String,
    /// Copies of every object.
    #[arg(long, default_value_t = 3)]
    pub replicas: u64,
    /// Copies that must be up for I/O [default: replicas - 1, at least 1].
    #[arg(long = "min-size", value_name = "N")]
    pub min_size: Option<u64>,
    /// Number of PGs [default: 32 per eligible OSD, rounded up to a power of two, 32 to 4096].
    #[arg(long = "pgs", value_name = "N")]
    pub pg_count: Option<u64>,
    /// No two copies share one of these: osd, host or rack.
    #[arg(long = "failure-domain", value_name = "DOMAIN", default_value = "host")]
    pub failure_domain: String,
    /// Use only OSDs with every one of these tags (comma-separated, e.g. ssd).
    #[arg(long, value_name = "TAGS", value_delimiter = ',')]
    pub tags: Vec<String>,
}

pub fn run(_global: Global, args: Args) -> anyhow::Result<()> {
    let client = args.api.client();
    match args.command {
        Command::Create(create) => {
            let mut body = json!({
                "name": create.name,
                "replicas": create.replicas,
                "failure_domain": create.failure_domain,
                "tags": create.tags,
            });
            if let Some(min_size) = create.min_size {
                body["min_size"] = json!(min_size);
            }
            if let Some(pg_count) = create.pg_count {
                body["pg_count"] = json!(pg_count);
            }
            let answer = client.post("/pools", &body)?;
            if args.api.json {
                print_json(&answer);
                return Ok(());
            }
            let pool: PoolView = decode(answer)?;
            println!(
                "created pool {} (id {}): {} replicas, min_size {}, {} PGs, failure domain {}{}",
                pool.name,
                pool.id,
                pool.replicas,
                pool.min_size,
                pool.pg_count,
                pool.failure_domain,
                if pool.tags.is_empty() { String::new() } else { format!(", tags {}", pool.tags.join(",")) },
            );
        }
        Command::Ls => {
            let answer = client.get("/pools")?;
            if args.api.json {
                print_json(&answer);
                return Ok(());
            }
            let list: PoolList = decode(answer)?;
            let rows: Vec<Vec<String>> = list
                .pools
                .iter()
                .map(|pool| {
                    vec![
                        pool.id.to_string(),
                        pool.name.clone(),
                        pool.replicas.to_string(),
                        pool.min_size.to_string(),
                        pool.pg_count.to_string(),
                        pool.failure_domain.clone(),
                        list_cell(&pool.tags),
                        pool.pgs.active.to_string(),
                        pool.pgs.clean.to_string(),
                        pool.pgs.degraded.to_string(),
                        pool.pgs.inactive.to_string(),
                    ]
                })
                .collect();
            print_table(
                &[
                    "ID", "NAME", "REPLICAS", "MIN_SIZE", "PGS", "DOMAIN", "TAGS", "ACTIVE", "CLEAN", "DEGRADED",
                    "INACTIVE",
                ],
                &rows,
            );
        }
        Command::Rm { name } => {
            let answer = client.delete(&format!("/pools/{}", segment(&name)))?;
            if args.api.json {
                print_json(&answer);
                return Ok(());
            }
            println!("deleted pool {name}");
        }
    }
    Ok(())
}
