//! Watches: one etcd watch stream per `MetaStore::watch`, forwarded to its consumer until
//! either side ends it.

use meta::{watch_channel, MetaError, WatchSender, WatchStream};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use crate::etcdserverpb::{self as pb, watch_request};
use crate::{convert, EtcdMetaStore};

/// Creates a watch of every key under `prefix` from `start_revision` and waits for etcd to
/// confirm it.
pub(crate) async fn start(store: &EtcdMetaStore, prefix: &str, start_revision: i64) -> Result<WatchStream, MetaError> {
    // etcd reads an empty key as "no key"; `\0` with the range end `\0` is every key.
    let key = if prefix.is_empty() { vec![0] } else { prefix.as_bytes().to_vec() };
    let create =
        pb::WatchCreateRequest { key, range_end: convert::prefix_range_end(prefix.as_bytes()), start_revision };
    let request = pb::WatchRequest { request_union: Some(watch_request::RequestUnion::CreateRequest(create)) };
    // Opened on one member after another until one confirms it (`EtcdMetaStore::call`).
    let (created, responses, requests) = store
        .call(prefix, None, |mut clients| {
            let request = request.clone();
            async move {
                let (requests, receiver) = mpsc::channel(1);
                requests.try_send(request).expect("a new channel has room for one request");
                let mut responses = clients.watch.watch(ReceiverStream::new(receiver)).await?.into_inner();
                let created =
                    responses.message().await?.ok_or_else(|| Status::unavailable("etcd closed the new watch"))?;
                Ok((created, responses, requests))
            }
        })
        .await?;
    if created.canceled {
        if created.compact_revision > 0 {
            return Err(MetaError::Compacted {
                prefix: prefix.to_string(),
                revision: start_revision,
                reason: format!("etcd compacted its history up to revision {}", created.compact_revision),
            });
        }
        return Err(MetaError::other(prefix, format!("etcd refused the watch: {}", created.cancel_reason)));
    }
    let (sender, stream) = watch_channel(&store.endpoint, prefix);
    // The creation response carries no events; the rest of the stream is forwarded.
    tokio::spawn(forward(store.endpoint.clone(), prefix.to_string(), responses, requests, sender, start_revision));
    Ok(stream)
}

/// Forwards one etcd watch to its consumer until either side ends it.
async fn forward(
    endpoint: String,
    prefix: String,
    mut responses: tonic::Streaming<pb::WatchResponse>,
    requests: mpsc::Sender<pb::WatchRequest>,
    sender: WatchSender,
    mut next_revision: i64,
) {
    // Dropping the request side would end the gRPC stream; it lives as long as the watch.
    let _requests = requests;
    loop {
        let message = tokio::select! {
            message = responses.message() => message,
            _ = sender.closed() => return,
        };
        let response = match message {
            Ok(Some(response)) => response,
            Ok(None) => {
                let reason = format!("etcd closed the watch stream on prefix {prefix:?}");
                return sender.fail(MetaError::unavailable(endpoint, reason));
            }
            Err(status) => {
                let reason = format!("the watch stream on prefix {prefix:?} broke: {status}");
                return sender.fail(MetaError::unavailable(endpoint, reason));
            }
        };
        for event in response.events {
            match convert::watch_event(event) {
                Ok(event) => {
                    next_revision = event.revision + 1;
                    if sender.send(event).await.is_err() {
                        return;
                    }
                }
                Err(error) => return sender.fail(error),
            }
        }
        if response.canceled {
            let error = if response.compact_revision > 0 {
                MetaError::Compacted {
                    prefix,
                    revision: next_revision,
                    reason: format!("etcd compacted its history up to revision {}", response.compact_revision),
                }
            } else {
                let reason = format!("etcd canceled the watch on prefix {prefix:?}: {}", response.cancel_reason);
                MetaError::unavailable(endpoint, reason)
            };
            return sender.fail(error);
        }
    }
}
