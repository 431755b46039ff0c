//! The NBD gateway on a thread of its own: `basalt dev` and `basalt nbd` both run it this way.
//!
//! One `current_thread` runtime holds the NBD connections and the client library's connections
//! to the OSDs, so a request's trip through the gateway never hands off between threads: the
//! thread that read the NBD request sends it to the primary, reads the reply and answers,
//! waking only when a socket has something for it. On that runtime the client's calls at depth
//! also coalesce their sends (see `net::Connection::call`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// How long a stopping gateway waits for its connections to finish their requests.
const STOP_WAIT: Duration = Duration::from_secs(2);

/// How the gateway reaches the cluster.
pub enum Cluster {
    /// A metadata URL (`http://` etcd or `basalt://` embedded store).
    Url(String),
    /// A store in this process (`basalt dev`).
    Store(Arc<dyn meta::MetaStore>),
}

/// A running gateway.
pub struct Gateway {
    address: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Gateway {
    /// Starts the gateway thread, connects the client and binds `listen` (and `unix`, if
    /// given); returns once it serves, or with the reason it cannot. `options.spin_limit` bounds
    /// the adaptive polling of the client's calls and of idle NBD connections (zero: none).
    pub fn start(
        cluster: Cluster,
        options: client::ClientOptions,
        listen: String,
        unix: Option<PathBuf>,
    ) -> anyhow::Result<Gateway> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<anyhow::Result<SocketAddr>>();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("nbd".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(runtime) => runtime,
                    Err(error) => {
                        let _ = ready_tx.send(Err(anyhow!(error).context("cannot start the gateway's runtime")));
                        return;
                    }
                };
                runtime.block_on(serve(cluster, options, listen, unix, ready_tx, stop_rx));
            })
            .context("cannot start the gateway thread")?;
        let address = match ready_rx.recv() {
            Ok(Ok(address)) => address,
            Ok(Err(error)) => {
                let _ = thread.join();
                return Err(error);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(anyhow!("the gateway thread stopped while starting"));
            }
        };
        Ok(Gateway { address, stop: Some(stop_tx), thread: Some(thread) })
    }

    /// The TCP address it serves NBD on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Stops accepting, lets connections finish their requests (up to two seconds) and joins
    /// the thread. Blocks: call it from a blocking context.
    pub fn stop(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

async fn serve(
    cluster: Cluster,
    options: client::ClientOptions,
    listen: String,
    unix: Option<PathBuf>,
    ready: std::sync::mpsc::Sender<anyhow::Result<SocketAddr>>,
    stop: oneshot::Receiver<()>,
) {
    let started = async {
        let spin_limit = options.spin_limit;
        let client = match cluster {
            Cluster::Url(url) => client::Client::connect_with(&url, options)
                .await
                .with_context(|| format!("cannot reach the metadata store at {url}"))?,
            Cluster::Store(store) => client::Client::with_store_and_options(store, options)
                .await
                .context("cannot start the client library")?,
        };
        let server = nbd::Server::with_idle_poll(Arc::new(nbd::ClusterExports::new(client)), spin_limit);
        let listener =
            TcpListener::bind(&listen).await.with_context(|| format!("cannot listen on {listen} for NBD"))?;
        let address = listener.local_addr()?;
        let mut serving = tokio::task::JoinSet::new();
        {
            let server = server.clone();
            serving.spawn(async move { server.serve_tcp(listener).await });
        }
        if let Some(path) = &unix {
            let listener = net::bind_unix(path).with_context(|| format!("cannot listen on {}", path.display()))?;
            let server = server.clone();
            serving.spawn(async move { server.serve_unix(listener).await });
        }
        anyhow::Ok((server, serving, address))
    };
    let (server, mut serving, address) = match started.await {
        Ok(started) => started,
        Err(error) => {
            let _ = ready.send(Err(error));
            return;
        }
    };
    let _ = ready.send(Ok(address));
    // A dropped sender (the owner went away) stops the gateway too.
    let _ = stop.await;
    server.shutdown();
    let _ = tokio::time::timeout(STOP_WAIT, async { while serving.join_next().await.is_some() {} }).await;
}
