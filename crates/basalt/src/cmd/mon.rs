//! `basalt mon`: runs a monitor on etcd, on a store served by another mon, or on an embedded
//! store it opens and serves itself.
//!
//! With `--embedded DIR --meta-listen ADDR` the process is the whole metadata service of a
//! cluster without etcd: OSDs, gateways and other mons use `--meta basalt://ADDR`.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use meta::MetaStore;
use mon::stderr_log::{self, Level};
use mon::MonConfig;
use tokio::net::TcpListener;

use crate::Global;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The metadata store: http://HOST:PORT[,...] (etcd) or basalt://HOST:PORT (a store served
    /// by `basalt mon --embedded`).
    #[arg(
        long = "etcd",
        visible_alias = "meta",
        value_name = "URL",
        required_unless_present = "embedded",
        conflicts_with = "embedded"
    )]
    pub meta_url: Option<String>,
    /// Open (or create) an embedded metadata store in DIR and serve it on --meta-listen.
    #[arg(long, value_name = "DIR", requires = "meta_listen")]
    pub embedded: Option<PathBuf>,
    /// Where to serve the embedded store; OSDs then use --meta basalt://ADDR.
    #[arg(long = "meta-listen", value_name = "ADDR", requires = "embedded")]
    pub meta_listen: Option<String>,
    /// Where to serve the JSON HTTP API.
    #[arg(long = "api", value_name = "ADDR", default_value = crate::api_client::API_ADDRESS_DEFAULT)]
    pub api: String,
    /// The mon's name in the leader record and logs [default: the host name].
    #[arg(long = "id", value_name = "NAME")]
    pub id: Option<String>,
    /// Revoke the lease of a reported OSD whose address refuses the mon's own connect (ADR 0015);
    /// `off` where the network may answer for a living OSD with resets (firewall REJECT rules).
    #[arg(long = "fast-down", value_name = "on|off", default_value = "on", value_parser = parse_on_off)]
    pub fast_down: bool,
}

fn parse_on_off(text: &str) -> Result<bool, String> {
    match text {
        "on" => Ok(true),
        "off" => Ok(false),
        other => Err(format!("{other:?} is neither on nor off")),
    }
}

pub fn run(global: Global, args: Args) -> anyhow::Result<()> {
    stderr_log::install(if global.quiet { Level::WARN } else { Level::INFO });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("basalt-mon")
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(serve(args))
}

async fn serve(args: Args) -> anyhow::Result<()> {
    let (store, meta_url): (Arc<dyn MetaStore>, String) = match (&args.embedded, &args.meta_listen, &args.meta_url) {
        (Some(dir), Some(meta_listen), _) => {
            let store = meta_embedded::EmbeddedMetaStore::open(dir)
                .await
                .with_context(|| format!("cannot open the embedded metadata store in {}", dir.display()))?;
            let store: Arc<dyn MetaStore> = Arc::new(store);
            let listener = TcpListener::bind(meta_listen)
                .await
                .with_context(|| format!("cannot listen on {meta_listen} for the metadata store"))?;
            let address = listener.local_addr().context("the metadata store listener has no address")?;
            tokio::spawn(meta_embedded::serve(store.clone(), listener));
            (store, format!("basalt://{address}"))
        }
        (_, _, Some(url)) => {
            let store = cluster_watch::connect(url)
                .await
                .with_context(|| format!("cannot connect to the metadata store {url}"))?;
            (store, url.clone())
        }
        _ => anyhow::bail!("give --etcd URL, or --embedded DIR with --meta-listen ADDR"),
    };
    let listener =
        TcpListener::bind(&args.api).await.with_context(|| format!("cannot listen on {} for the API", args.api))?;
    let mut config = MonConfig::new(args.id.unwrap_or_else(host_name), meta_url);
    config.fast_down = args.fast_down;
    // The leader removes deleted volumes' objects through the data path.
    let client = client::Client::with_store(store.clone()).await.context("cannot start the client library")?;
    let reaper: Arc<dyn mon::VolumeReaper> = Arc::new(crate::reaper::ClientReaper::new(client));
    mon::run(store, config, listener, Some(reaper), crate::signals::shutdown_requested())
        .await
        .context("the mon failed")?;
    Ok(())
}

/// The kernel's host name, or "mon" if it cannot be read.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "mon".into())
}
