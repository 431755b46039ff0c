//! `EtcdMetaStore`: the `MetaStore` trait on an etcd v3 cluster, through the `etcd-client` crate.
//!
//! This is the production backend: etcd provides the consensus, so the metadata of a real
//! cluster survives the loss of a minority of etcd members. The trait's model is etcd's, so the
//! mapping is direct; what this file adds is error mapping (gRPC statuses to `MetaError`),
//! bounded waits on every unary call, paginated listings at one revision, watch streams that
//! end with an explicit error when the connection breaks, and one lease keep-alive stream per
//! lease, reused across `lease_keep_alive` calls.
//!
//! A broken watch is not resumed inside this crate, although etcd could resume it from the last
//! revision: the caller re-lists and watches from the listing's revision on every watch error,
//! whatever the backend, so the recovery path is one path and it is exercised.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{
    Client, ConnectOptions, DeleteOptions, EventType, GetOptions, LeaseKeepAliveStream, LeaseKeeper, PutOptions,
    WatchOptions, WatchResponseStream,
};
use meta::{
    watch_channel, Compare, CompareOp, CompareTarget, KeyValue, LeaseId, Listing, MetaError, MetaStore, Txn, TxnOp,
    TxnOpResult, TxnResponse, WatchEvent, WatchEventKind, WatchSender, WatchStream,
};
use tokio::time::timeout;

/// How long a unary call may take before it fails with `MetaError::Unavailable`.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long connecting to an endpoint may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// HTTP/2 keep-alive: a silent connection is declared dead after about twice this.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(3);
/// Keys per page of a listing; pages are read at one revision.
const LIST_PAGE_KEYS: i64 = 1000;

// The gRPC status codes that mean "no answer" rather than "refused" (the gRPC specification's
// numbers; `etcd-client` does not re-export tonic's `Code`).
const GRPC_CANCELLED: i32 = 1;
const GRPC_UNKNOWN: i32 = 2;
const GRPC_DEADLINE_EXCEEDED: i32 = 4;
const GRPC_UNAVAILABLE: i32 = 14;

/// A client of an etcd cluster.
pub struct EtcdMetaStore {
    client: Client,
    endpoint: String,
    /// One keep-alive stream per lease, created on the first keep-alive.
    keepers: Mutex<HashMap<LeaseId, Arc<tokio::sync::Mutex<Option<Keeper>>>>>,
}

struct Keeper {
    keeper: LeaseKeeper,
    responses: LeaseKeepAliveStream,
}

impl EtcdMetaStore {
    /// Connects to the etcd cluster at `endpoints` (`http://host:port` or `host:port`) and
    /// checks that it answers.
    pub async fn connect(endpoints: &[String]) -> Result<EtcdMetaStore, MetaError> {
        let endpoint = endpoints.join(",");
        let options = ConnectOptions::new()
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_keep_alive(KEEP_ALIVE_INTERVAL, KEEP_ALIVE_INTERVAL)
            .with_keep_alive_while_idle(true)
            // A member that lost its leader cancels watches instead of leaving them silent.
            .with_require_leader(true);
        let client = Client::connect(endpoints, Some(options))
            .await
            .map_err(|error| MetaError::unavailable(endpoint.clone(), error.to_string()))?;
        let store = EtcdMetaStore { client, endpoint, keepers: Mutex::new(HashMap::new()) };
        store.current_revision().await?;
        Ok(store)
    }

    /// Runs one unary call with the request timeout and maps its error.
    async fn call<T>(
        &self,
        key: &str,
        lease: Option<LeaseId>,
        call: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, MetaError> {
        match timeout(REQUEST_TIMEOUT, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(self.map_error(key, lease, error)),
            Err(_) => Err(MetaError::unavailable(
                self.endpoint.clone(),
                format!("no answer within {REQUEST_TIMEOUT:?} to a request on key {key:?}"),
            )),
        }
    }

    fn map_error(&self, key: &str, lease: Option<LeaseId>, error: etcd_client::Error) -> MetaError {
        use etcd_client::Error;
        match error {
            Error::GRpcStatus(status) => {
                let message = status.message();
                if message.contains("requested lease not found") {
                    if let Some(lease) = lease {
                        return MetaError::LeaseExpired { lease };
                    }
                }
                let code: i32 = status.code().into();
                match code {
                    GRPC_CANCELLED | GRPC_UNKNOWN | GRPC_DEADLINE_EXCEEDED | GRPC_UNAVAILABLE => {
                        MetaError::unavailable(self.endpoint.clone(), message)
                    }
                    _ => MetaError::other(key, message),
                }
            }
            Error::TransportError(error) => MetaError::unavailable(self.endpoint.clone(), error.to_string()),
            Error::IoError(error) => MetaError::unavailable(self.endpoint.clone(), error.to_string()),
            Error::LeaseKeepAliveError(message) if message.contains("lease not found") => match lease {
                Some(lease) => MetaError::LeaseExpired { lease },
                None => MetaError::other(key, message),
            },
            error => MetaError::other(key, error.to_string()),
        }
    }

    /// The cluster's current revision, from a read of one key.
    async fn current_revision(&self) -> Result<i64, MetaError> {
        let mut kv = self.client.kv_client();
        let response = self.call("", None, kv.get(vec![0u8], Some(GetOptions::new().with_count_only()))).await?;
        Ok(response.header().map_or(0, |header| header.revision()))
    }

    fn keeper_slot(&self, lease: LeaseId) -> Arc<tokio::sync::Mutex<Option<Keeper>>> {
        self.keepers.lock().expect("keepers lock").entry(lease).or_default().clone()
    }

    fn forget_keeper(&self, lease: LeaseId) {
        self.keepers.lock().expect("keepers lock").remove(&lease);
    }
}

/// The end of the key range holding every key that starts with `prefix`, as etcd expects it
/// (`\0` for "every key" when the prefix is empty or all `0xff`).
fn prefix_range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

fn convert_kv(kv: &etcd_client::KeyValue) -> Result<KeyValue, MetaError> {
    let key = kv
        .key_str()
        .map_err(|_| MetaError::other(String::from_utf8_lossy(kv.key()), "etcd returned a key that is not UTF-8"))?;
    Ok(KeyValue {
        key: key.to_string(),
        value: kv.value().to_vec(),
        create_revision: kv.create_revision(),
        mod_revision: kv.mod_revision(),
        version: kv.version(),
        lease: (kv.lease() != 0).then_some(LeaseId(kv.lease())),
    })
}

fn convert_compare(compare: &Compare) -> etcd_client::Compare {
    let op = match compare.op {
        CompareOp::Equal => etcd_client::CompareOp::Equal,
        CompareOp::NotEqual => etcd_client::CompareOp::NotEqual,
        CompareOp::Greater => etcd_client::CompareOp::Greater,
        CompareOp::Less => etcd_client::CompareOp::Less,
    };
    let key = compare.key.as_bytes();
    match &compare.target {
        CompareTarget::Value(value) => etcd_client::Compare::value(key, op, value.clone()),
        CompareTarget::Version(version) => etcd_client::Compare::version(key, op, *version),
        CompareTarget::CreateRevision(revision) => etcd_client::Compare::create_revision(key, op, *revision),
        CompareTarget::ModRevision(revision) => etcd_client::Compare::mod_revision(key, op, *revision),
    }
}

fn convert_op(op: &TxnOp) -> etcd_client::TxnOp {
    match op {
        TxnOp::Put { key, value, lease } => {
            let options = lease.map(|lease| PutOptions::new().with_lease(lease.0));
            etcd_client::TxnOp::put(key.as_bytes(), value.clone(), options)
        }
        TxnOp::Delete { key } => etcd_client::TxnOp::delete(key.as_bytes(), None),
        TxnOp::Get { key } => etcd_client::TxnOp::get(key.as_bytes(), None),
    }
}

fn convert_event(event: &etcd_client::Event) -> Result<WatchEvent, MetaError> {
    let kv = event.kv().ok_or_else(|| MetaError::other("", "etcd sent a watch event without a key"))?;
    let kv = convert_kv(kv)?;
    let revision = kv.mod_revision;
    Ok(match event.event_type() {
        EventType::Put => WatchEvent { kind: WatchEventKind::Put, kv, revision },
        EventType::Delete => WatchEvent::delete(kv.key, revision),
    })
}

/// Forwards one etcd watch to its consumer until either side ends it.
async fn forward_watch(
    endpoint: String,
    prefix: String,
    mut responses: WatchResponseStream,
    request_sender: etcd_client::WatchRequestSender,
    sender: WatchSender,
    mut next_revision: i64,
) {
    // Dropping the request sender would end the gRPC stream; it lives as long as the watch.
    let _request_sender = request_sender;
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
            Err(error) => {
                let reason = format!("the watch stream on prefix {prefix:?} broke: {error}");
                return sender.fail(MetaError::unavailable(endpoint, reason));
            }
        };
        for event in response.events() {
            match convert_event(event) {
                Ok(event) => {
                    next_revision = event.revision + 1;
                    if sender.send(event).await.is_err() {
                        return;
                    }
                }
                Err(error) => return sender.fail(error),
            }
        }
        if response.canceled() {
            let error = if response.compact_revision() > 0 {
                MetaError::Compacted {
                    prefix,
                    revision: next_revision,
                    reason: format!("etcd compacted its history up to revision {}", response.compact_revision()),
                }
            } else {
                let reason = format!("etcd canceled the watch on prefix {prefix:?}: {}", response.cancel_reason());
                MetaError::unavailable(endpoint, reason)
            };
            return sender.fail(error);
        }
    }
}

#[async_trait]
impl MetaStore for EtcdMetaStore {
    fn endpoint(&self) -> &str {
        &self.endpoint
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>, MetaError> {
        let mut kv = self.client.kv_client();
        let response = self.call(key, None, kv.get(key, None)).await?;
        response.kvs().first().map(convert_kv).transpose()
    }

    async fn put(&self, key: &str, value: Vec<u8>, lease: Option<LeaseId>) -> Result<i64, MetaError> {
        let mut kv = self.client.kv_client();
        let options = lease.map(|lease| PutOptions::new().with_lease(lease.0));
        let response = self.call(key, lease, kv.put(key, value, options)).await?;
        Ok(response.header().map_or(0, |header| header.revision()))
    }

    async fn delete(&self, key: &str) -> Result<bool, MetaError> {
        let mut kv = self.client.kv_client();
        let response = self.call(key, None, kv.delete(key, None::<DeleteOptions>)).await?;
        Ok(response.deleted() > 0)
    }

    async fn list_with_revision(&self, prefix: &str) -> Result<Listing, MetaError> {
        let mut kv = self.client.kv_client();
        let range_end = prefix_range_end(prefix.as_bytes());
        let mut start_key = if prefix.is_empty() { vec![0] } else { prefix.as_bytes().to_vec() };
        let mut kvs = Vec::new();
        let mut revision = 0;
        loop {
            let mut options = GetOptions::new().with_range(range_end.clone()).with_limit(LIST_PAGE_KEYS);
            if revision > 0 {
                options = options.with_revision(revision);
            }
            let response = self.call(prefix, None, kv.get(start_key.clone(), Some(options))).await?;
            if revision == 0 {
                revision = response.header().map_or(0, |header| header.revision());
            }
            for kv in response.kvs() {
                kvs.push(convert_kv(kv)?);
            }
            match (response.more(), response.kvs().last()) {
                (true, Some(last)) => {
                    start_key = last.key().to_vec();
                    start_key.push(0);
                }
                _ => break,
            }
        }
        Ok(Listing { kvs, revision })
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, MetaError> {
        let key = txn.compares.first().map(|compare| compare.key.clone()).unwrap_or_default();
        // A put naming a missing lease fails the whole transaction; report the first such lease.
        let lease = txn.success.iter().chain(&txn.failure).find_map(|op| match op {
            TxnOp::Put { lease, .. } => *lease,
            _ => None,
        });
        let request = etcd_client::Txn::new()
            .when(txn.compares.iter().map(convert_compare).collect::<Vec<_>>())
            .and_then(txn.success.iter().map(convert_op).collect::<Vec<_>>())
            .or_else(txn.failure.iter().map(convert_op).collect::<Vec<_>>());
        let mut kv = self.client.kv_client();
        let response = self.call(&key, lease, kv.txn(request)).await?;
        let mut results = Vec::new();
        for op in response.op_responses() {
            results.push(match op {
                etcd_client::TxnOpResponse::Put(_) => TxnOpResult::Put,
                etcd_client::TxnOpResponse::Delete(delete) => TxnOpResult::Delete { deleted: delete.deleted() > 0 },
                etcd_client::TxnOpResponse::Get(get) => {
                    TxnOpResult::Get(get.kvs().first().map(convert_kv).transpose()?)
                }
                etcd_client::TxnOpResponse::Txn(_) => return Err(MetaError::other(key, "etcd answered a nested txn")),
            });
        }
        Ok(TxnResponse {
            succeeded: response.succeeded(),
            revision: response.header().map_or(0, |header| header.revision()),
            results,
        })
    }

    async fn watch(&self, prefix: &str, start_revision: Option<i64>) -> Result<WatchStream, MetaError> {
        // An explicit start revision makes "every change after this call" exact even though
        // the watch is created asynchronously on the server.
        let start_revision = match start_revision {
            Some(revision) if revision > 0 => revision,
            _ => self.current_revision().await? + 1,
        };
        let options = WatchOptions::new().with_prefix().with_start_revision(start_revision);
        let mut client = self.client.watch_client();
        let stream = self.call(prefix, None, client.watch(prefix, Some(options))).await?;
        let (request_sender, mut responses) = stream.split();
        let created = self.call(prefix, None, responses.message()).await?.ok_or_else(|| {
            MetaError::unavailable(self.endpoint.clone(), format!("etcd closed the new watch on prefix {prefix:?}"))
        })?;
        if created.canceled() {
            if created.compact_revision() > 0 {
                return Err(MetaError::Compacted {
                    prefix: prefix.to_string(),
                    revision: start_revision,
                    reason: format!("etcd compacted its history up to revision {}", created.compact_revision()),
                });
            }
            return Err(MetaError::other(prefix, format!("etcd refused the watch: {}", created.cancel_reason())));
        }
        let (sender, stream) = watch_channel(&self.endpoint, prefix);
        // The creation response carries no events; the rest of the stream is forwarded.
        tokio::spawn(forward_watch(
            self.endpoint.clone(),
            prefix.to_string(),
            responses,
            request_sender,
            sender,
            start_revision,
        ));
        Ok(stream)
    }

    async fn compact(&self, revision: i64) -> Result<(), MetaError> {
        let mut kv = self.client.kv_client();
        match self.call("", None, kv.compact(revision, None)).await {
            Ok(_) => Ok(()),
            Err(MetaError::Other { reason, .. }) if reason.contains("required revision has been compacted") => Ok(()),
            Err(error) => Err(error),
        }
    }

    async fn lease_grant(&self, ttl_s: u64) -> Result<LeaseId, MetaError> {
        let ttl_s = i64::try_from(ttl_s.max(1)).unwrap_or(i64::MAX);
        let mut lease = self.client.lease_client();
        let response = self.call("", None, lease.grant(ttl_s, None)).await?;
        Ok(LeaseId(response.id()))
    }

    async fn lease_keep_alive(&self, lease: LeaseId) -> Result<u64, MetaError> {
        let slot = self.keeper_slot(lease);
        let mut slot = slot.lock().await;
        // A stream broken by a reconnect is replaced once.
        for attempt in 0..2 {
            if slot.is_none() {
                let mut client = self.client.lease_client();
                match self.call("", Some(lease), client.keep_alive(lease.0)).await {
                    Ok((keeper, responses)) => *slot = Some(Keeper { keeper, responses }),
                    Err(error) => {
                        self.forget_keeper(lease);
                        return Err(error);
                    }
                }
            }
            let keeper = slot.as_mut().expect("set above");
            let renewal = async {
                keeper.keeper.keep_alive().await?;
                keeper.responses.message().await
            };
            match self.call("", Some(lease), renewal).await {
                Ok(Some(response)) if response.ttl() > 0 => return Ok(u64::try_from(response.ttl()).unwrap_or(0)),
                Ok(Some(_)) => {
                    *slot = None;
                    self.forget_keeper(lease);
                    return Err(MetaError::LeaseExpired { lease });
                }
                Ok(None) | Err(MetaError::Unavailable { .. }) if attempt == 0 => *slot = None,
                Ok(None) => {
                    *slot = None;
                    return Err(MetaError::unavailable(
                        self.endpoint.clone(),
                        "etcd closed the lease keep-alive stream",
                    ));
                }
                Err(error) => {
                    *slot = None;
                    return Err(error);
                }
            }
        }
        unreachable!("the second attempt always returns")
    }

    async fn lease_revoke(&self, lease: LeaseId) -> Result<(), MetaError> {
        self.forget_keeper(lease);
        let mut client = self.client.lease_client();
        self.call("", Some(lease), client.revoke(lease.0)).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::prefix_range_end;

    #[test]
    fn prefix_range_ends() {
        assert_eq!(prefix_range_end(b"/a/"), b"/a0");
        assert_eq!(prefix_range_end(b"a\xff"), b"b");
        assert_eq!(prefix_range_end(b"\xff\xff"), [0]);
        assert_eq!(prefix_range_end(b""), [0]);
    }
}
