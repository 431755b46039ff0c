//! `basalt nbd`: the NBD gateway, serving every volume of a cluster as an export named after it.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use mon::stderr_log::{self, Level};
use tokio::net::{TcpListener, UnixListener};

use crate::Global;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub cluster: crate::api_client::ClusterArgs,
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
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("nbd")
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    runtime.block_on(async move {
        let client = client::Client::connect(&meta_url)
            .await
            .with_context(|| format!("cannot reach the metadata store at {meta_url}"))?;
        let server = nbd::Server::new(Arc::new(nbd::ClusterExports::new(client)));
        let listener =
            TcpListener::bind(&args.listen).await.with_context(|| format!("cannot listen on {}", args.listen))?;
        let address = listener.local_addr()?;
        let mut serving = tokio::task::JoinSet::new();
        {
            let server = server.clone();
            serving.spawn(async move { server.serve_tcp(listener).await });
        }
        if let Some(path) = &args.unix {
            let _ = std::fs::remove_file(path);
            let listener = UnixListener::bind(path).with_context(|| format!("cannot listen on {}", path.display()))?;
            let server = server.clone();
            serving.spawn(async move { server.serve_unix(listener).await });
        }
        println!("basalt nbd ready: nbd://{address}/ meta={meta_url}");
        crate::signals::shutdown_requested().await;
        server.shutdown();
        let wait = async { while serving.join_next().await.is_some() {} };
        let _ = tokio::time::timeout(std::time::Duration::from_secs(3), wait).await;
        Ok(())
    })
}
