//! The listener: accepts connections from clients and from primary peers and serves each with
//! `net::serve_connection` on the OSD's thread, handing every request to `Osd::handle`.
//!
//! A malformed frame closes only its own connection (`net` logs the peer and the reason).

use std::future::Future;
use std::rc::Rc;
use std::time::Duration;

use net::{Listener, Stream};
use tokio::task::JoinSet;

use crate::limits::CONNECTIONS_MAX;
use crate::ops::{ConnectionState, Osd};

/// Accepts connections until `stop` resolves; returns the connections still being served (the
/// caller lets their ops finish, then drops them).
/// Listens on `listener` and, if given, on `local` too (the Unix socket, ADR 0013).
pub(crate) async fn accept_until(
    osd: Rc<Osd>,
    listener: Listener,
    local: Option<Listener>,
    stop: impl Future<Output = ()>,
) -> JoinSet<()> {
    let mut connections = JoinSet::new();
    tokio::pin!(stop);
    loop {
        let accepted: std::io::Result<Stream> = tokio::select! {
            biased;
            () = &mut stop => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = listener.accept() => accepted,
            accepted = accept_local(local.as_ref()) => accepted,
        };
        match accepted {
            Ok(stream) => {
                if connections.len() >= CONNECTIONS_MAX {
                    let peer = stream.peer_name();
                    tracing::warn!(%peer, "refusing a connection: {CONNECTIONS_MAX} connections already open");
                    continue;
                }
                connections.spawn_local(serve(osd.clone(), stream));
            }
            Err(error) => {
                // Usually out of file descriptors: wait instead of spinning.
                tracing::warn!(%error, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    connections
}

/// The next connection on the local socket; never, without one.
async fn accept_local(local: Option<&Listener>) -> std::io::Result<Stream> {
    match local {
        Some(listener) => listener.accept().await,
        None => std::future::pending().await,
    }
}

async fn serve(osd: Rc<Osd>, stream: Stream) {
    let peer = stream.peer_name();
    tracing::debug!(osd = osd.id, %peer, "connection accepted");
    let state = ConnectionState::default();
    let (osd, state) = (&osd, &state);
    let result = net::serve_connection(stream, move |frame| {
        // Taken as the request is read, so a Flush knows exactly which writes came before it.
        let ticket = state.ticket(&frame);
        async move { osd.handle(frame, state, ticket).await }
    })
    .await;
    match result {
        Ok(()) => tracing::debug!(osd = osd.id, %peer, "connection closed by the peer"),
        Err(error) => tracing::debug!(osd = osd.id, %peer, %error, "connection ended"),
    }
}
