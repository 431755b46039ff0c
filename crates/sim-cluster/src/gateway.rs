//! The NBD gateway as a node of the simulation (`SimOptions::nbd`): the real `nbd::Server`
//! serving every volume through the client library (`nbd::ClusterExports`), as `basalt nbd`
//! does, at `sim:gateway`. Its accept loop is the one thing not the gateway's own: the server's
//! loops take TCP and unix listeners, so the streams of the simulated network are accepted here
//! and each is served by `Server::serve_stream` in a task of the gateway node's `LocalSet` (its
//! connections to the OSDs then start from that node).

use std::rc::Rc;
use std::sync::Arc;

use client::{Client, ClientOptions};
use meta::MetaStore;
use net::sim::SimNet;
use tokio::task::JoinHandle;

use crate::cluster::Run;

pub(crate) const GATEWAY_NODE: &str = "gateway";
pub(crate) const GATEWAY_ADDRESS: &str = "sim:gateway";

/// Starts the gateway; it serves until its task is aborted.
pub(crate) fn start(
    network: &SimNet,
    store: Arc<dyn MetaStore>,
    options: ClientOptions,
    run: &Rc<Run>,
) -> JoinHandle<()> {
    // Listening before anything else: clients that connect at once wait in the backlog.
    let listener = network.listen(GATEWAY_NODE, GATEWAY_ADDRESS).expect("the gateway's address is free");
    let run = run.clone();
    tokio::task::spawn_local(SimNet::on_node(GATEWAY_NODE, async move {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async move {
                let client = match Client::with_store_and_options(store, options).await {
                    Ok(client) => client,
                    Err(error) => return run.violation(format!("the gateway's client could not start: {error}")),
                };
                let server = nbd::Server::new(Arc::new(nbd::ClusterExports::new(client)));
                while let Ok(stream) = listener.accept().await {
                    let server = server.clone();
                    tokio::task::spawn_local(async move {
                        let peer = stream.peer_name();
                        server.serve_stream(stream, &peer).await;
                    });
                }
            })
            .await;
    }))
}
