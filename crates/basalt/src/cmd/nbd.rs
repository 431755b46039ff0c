//! `basalt nbd`: the NBD gateway, serving every volume of a cluster as an export named after it.

use std::path::PathBuf;

use anyhow::Context;
use mon::stderr_log::{self, Level};

use crate::gateway::{Cluster, Gateway};
use crate::Global;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub cluster: crate::api_client::ClusterArgs,
    #[command(flatten)]
    pub client: crate::api_client::ClientArgs,
    /// TCP address to serve NBD on.
    #[arg(long = "listen", value_name = "HOST:PORT", default_value = "127.0.0.1:10809")]
    pub listen: String,
    /// Also serve NBD on this unix socket.
    #[arg(long = "unix", value_name = "PATH")]
    pub unix: Option<PathBuf>,
}

pub fn run(global: Global, args: Args) -> anyhow::Result<()> {
    stderr_log::install(if global.quiet { Level::WARN } else { Level::INFO });
    let meta_url = args.cluster.meta_url()?;
    let options = args.client.options(&args.cluster.api());
    let gateway = Gateway::start(Cluster::Url(meta_url.clone()), options, args.listen, args.unix)?;
    println!("basalt nbd ready: nbd://{}/ meta={meta_url}", gateway.address());
    // The gateway has a thread of its own; this one only waits for the signal to stop.
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the runtime")?;
    runtime.block_on(crate::signals::shutdown_requested());
    gateway.stop();
    Ok(())
}
