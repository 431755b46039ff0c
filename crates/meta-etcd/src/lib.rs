//! `EtcdMetaStore`: the `MetaStore` trait on an etcd v3 cluster, over etcd's gRPC API.
//!
//! This is the production backend: etcd provides the consensus, so the metadata of a real
//! cluster survives the loss of a minority of etcd members. The trait's model is etcd's, so the
//! mapping is direct; what this crate adds is error mapping (gRPC statuses to `MetaError`),
//! failover between the members it was given (`meta::members`: a request that meets a dead, hung
//! or cut-off member is retried on the next within [`REQUEST_TIMEOUT`], and that member is
//! passed over for a while), bounded waits on every unary call, paginated listings at one
//! revision, watch streams that end with an explicit error when the connection breaks, and one
//! lease keep-alive stream per lease, reused across `lease_keep_alive` calls.
//!
//! Every request is retried on another member after a failure to answer, writes too: a
//! transaction a silent member applied before it hung is then seen by the retry's compares,
//! which fail, and every caller of `txn` compares and re-reads on a failed compare; a put or a
//! delete applied twice leaves the same state.
//!
//! The gRPC stubs (`etcdserverpb.rs`) are generated from `proto/etcd.proto`, the part of etcd's
//! API Basalt uses, and checked in, so that building needs no protobuf compiler (ADR 0014);
//! `tests/generated.rs` fails when they no longer match the `.proto` file.
//!
//! A broken watch is not resumed inside this crate, although etcd could resume it from the last
//! revision: the caller re-lists and watches from the listing's revision on every watch error,
//! whatever the backend, so the recovery path is one path and it is exercised.

mod convert;
mod leaderless;
mod watch;

/// The generated messages and clients of `proto/etcd.proto`.
#[allow(clippy::all, clippy::pedantic, missing_docs, unreachable_pub)]
mod etcdserverpb {
    include!("etcdserverpb.rs");
}

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use meta::members::Members;
use meta::{LeaseId, Listing, MetaError, MetaStore, Txn, TxnOp, TxnResponse, WatchStream};
use tokio::sync::mpsc;
use tokio::time::{timeout, Instant};
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::InterceptedService;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

use etcdserverpb as pb;
use etcdserverpb::cluster_client::ClusterClient;
use etcdserverpb::kv_client::KvClient;
use etcdserverpb::lease_client::LeaseClient;
use etcdserverpb::maintenance_client::MaintenanceClient;
use etcdserverpb::watch_client::WatchClient;

pub use meta::members::{ATTEMPT_TIMEOUT, REQUEST_TIMEOUT};
/// How long connecting to an endpoint may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// HTTP/2 keep-alive: a silent connection is declared dead after about twice this.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(3);
/// Keys per page of a listing; pages are read at one revision.
const LIST_PAGE_KEYS: i64 = 1000;

/// Every request passes through `require_leader`.
type Transport = InterceptedService<Channel, fn(tonic::Request<()>) -> Result<tonic::Request<()>, Status>>;

/// Asks etcd to refuse a request, and to cancel a watch, when the member has lost its leader,
/// instead of leaving the caller waiting on a member that cannot commit (etcd's `hasleader`).
fn require_leader(mut request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
    request.metadata_mut().insert("hasleader", MetadataValue::from_static("true"));
    Ok(request)
}

/// For [`EtcdMetaStore::call`]: a call of `method` on a member's `client` with a copy of
/// `request`, once per attempt.
macro_rules! on_member {
    ($client:ident . $method:ident ($request:expr)) => {
        |clients: Clients| {
            let request = $request.clone();
            let mut client = clients.$client;
            async move { client.$method(request).await }
        }
    };
}

/// A client of an etcd cluster.
pub struct EtcdMetaStore {
    /// One connection per member, in the order given.
    clients: Vec<Clients>,
    members: Members,
    endpoint: String,
    /// One keep-alive stream per lease, created on the first keep-alive.
    keepers: Mutex<HashMap<LeaseId, Arc<tokio::sync::Mutex<Option<Keeper>>>>>,
}

/// The gRPC clients of one member.
#[derive(Clone)]
struct Clients {
    url: String,
    kv: KvClient<Transport>,
    watch: WatchClient<Transport>,
    lease: LeaseClient<Transport>,
    /// Without `hasleader`: they ask a member what it knows when it may have no leader.
    maintenance: MaintenanceClient<Channel>,
    cluster: ClusterClient<Channel>,
}

/// One lease's keep-alive stream: a request sent on `requests` is answered on `responses`.
struct Keeper {
    /// The member it runs on.
    member: usize,
    requests: mpsc::Sender<pb::LeaseKeepAliveRequest>,
    responses: tonic::Streaming<pb::LeaseKeepAliveResponse>,
}

impl EtcdMetaStore {
    /// Connects to the etcd cluster at `endpoints` (`http://host:port` or `host:port`) and
    /// checks that one of them answers. Requests go to one member at a time (`meta::members`).
    pub async fn connect(endpoints: &[String]) -> Result<EtcdMetaStore, MetaError> {
        let endpoint = endpoints.join(",");
        if endpoints.is_empty() {
            return Err(MetaError::unavailable(endpoint, "no etcd endpoint given"));
        }
        let interceptor: fn(tonic::Request<()>) -> Result<tonic::Request<()>, Status> = require_leader;
        let mut clients = Vec::with_capacity(endpoints.len());
        for url in endpoints {
            let url = if url.contains("://") { url.clone() } else { format!("http://{url}") };
            let channel = Endpoint::from_shared(url.clone())
                .map_err(|error| MetaError::unavailable(endpoint.clone(), format!("{url:?} is not a URL: {error}")))?
                .connect_timeout(CONNECT_TIMEOUT)
                .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
                .keep_alive_timeout(KEEP_ALIVE_INTERVAL)
                .keep_alive_while_idle(true)
                .connect_lazy();
            clients.push(Clients {
                url,
                kv: KvClient::with_interceptor(channel.clone(), interceptor),
                watch: WatchClient::with_interceptor(channel.clone(), interceptor),
                lease: LeaseClient::with_interceptor(channel.clone(), interceptor),
                maintenance: MaintenanceClient::new(channel.clone()),
                cluster: ClusterClient::new(channel),
            });
        }
        let members = Members::new(clients.iter().map(|clients| clients.url.clone()).collect());
        let store = EtcdMetaStore { clients, members, endpoint, keepers: Mutex::new(HashMap::new()) };
        store.current_revision().await?;
        Ok(store)
    }

    /// Runs `call` on one member after another until one answers, each attempt bounded by
    /// [`ATTEMPT_TIMEOUT`] and all of them by [`REQUEST_TIMEOUT`]; maps the error. An answer
    /// that is a refusal (a failed compare, a missing lease) is returned as is: only a member
    /// that did not answer is passed over.
    async fn call<T, F, Fut>(&self, key: &str, lease: Option<LeaseId>, call: F) -> Result<T, MetaError>
    where
        F: Fn(Clients) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        self.members
            .call(&format!("a request on key {key:?}"), |member| {
                let attempt = call(self.clients[member].clone());
                async move { attempt.await.map_err(|status| self.map_status(member, key, lease, &status)) }
            })
            .await
    }

    /// Runs one unary call and returns its message.
    async fn unary<T, F, Fut>(&self, key: &str, lease: Option<LeaseId>, call: F) -> Result<T, MetaError>
    where
        F: Fn(Clients) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        Ok(self.call(key, lease, call).await?.into_inner())
    }

    fn map_status(&self, member: usize, key: &str, lease: Option<LeaseId>, status: &Status) -> MetaError {
        let message = status.message();
        if message.contains("requested lease not found") {
            if let Some(lease) = lease {
                return MetaError::LeaseExpired { lease };
            }
        }
        match status.code() {
            // No answer rather than a refusal; transport failures and a member without a
            // leader (`hasleader`) arrive as these too.
            Code::Cancelled | Code::Unknown | Code::DeadlineExceeded | Code::Unavailable => {
                MetaError::unavailable(self.clients[member].url.clone(), format!("{message} ({:?})", status.code()))
            }
            _ => MetaError::other(key, message),
        }
    }

    /// The cluster's current revision, from a read of one key.
    async fn current_revision(&self) -> Result<i64, MetaError> {
        let request = pb::RangeRequest { key: vec![0], count_only: true, ..Default::default() };
        let response = self.unary("", None, on_member!(kv.range(request))).await?;
        Ok(revision(response.header.as_ref()))
    }

    fn keeper_slot(&self, lease: LeaseId) -> Arc<tokio::sync::Mutex<Option<Keeper>>> {
        self.keepers.lock().expect("keepers lock").entry(lease).or_default().clone()
    }

    fn forget_keeper(&self, lease: LeaseId) {
        self.keepers.lock().expect("keepers lock").remove(&lease);
    }

    /// Opens a keep-alive stream for `lease` on `member` with its first renewal already sent:
    /// etcd answers the stream's headers only with its first response.
    async fn open_keeper(&self, member: usize, lease: LeaseId) -> Result<Keeper, Status> {
        // One renewal is outstanding at a time (the slot's lock serialises them).
        let (requests, receiver) = mpsc::channel(1);
        requests.try_send(pb::LeaseKeepAliveRequest { id: lease.0 }).expect("a new channel has room for one request");
        let mut client = self.clients[member].lease.clone();
        let responses = client.lease_keep_alive(ReceiverStream::new(receiver)).await?.into_inner();
        Ok(Keeper { member, requests, responses })
    }
}

/// The revision a response header carries (0 when the header is missing).
fn revision(header: Option<&pb::ResponseHeader>) -> i64 {
    header.map_or(0, |header| header.revision)
}

#[async_trait]
impl MetaStore for EtcdMetaStore {
    fn endpoint(&self) -> &str {
        &self.endpoint
    }

    async fn get(&self, key: &str) -> Result<Option<meta::KeyValue>, MetaError> {
        let request = pb::RangeRequest { key: key.as_bytes().to_vec(), ..Default::default() };
        let response = self.unary(key, None, on_member!(kv.range(request))).await?;
        response.kvs.into_iter().next().map(convert::key_value).transpose()
    }

    async fn put(&self, key: &str, value: Vec<u8>, lease: Option<LeaseId>) -> Result<i64, MetaError> {
        let request = pb::PutRequest { key: key.as_bytes().to_vec(), value, lease: lease.map_or(0, |lease| lease.0) };
        let response = self.unary(key, lease, on_member!(kv.put(request))).await?;
        Ok(revision(response.header.as_ref()))
    }

    async fn delete(&self, key: &str) -> Result<bool, MetaError> {
        let request = pb::DeleteRangeRequest { key: key.as_bytes().to_vec(), range_end: Vec::new() };
        let response = self.unary(key, None, on_member!(kv.delete_range(request))).await?;
        Ok(response.deleted > 0)
    }

    async fn list_with_revision(&self, prefix: &str) -> Result<Listing, MetaError> {
        let range_end = convert::prefix_range_end(prefix.as_bytes());
        let mut start_key = if prefix.is_empty() { vec![0] } else { prefix.as_bytes().to_vec() };
        let mut kvs = Vec::new();
        // 0 reads the newest revision; every later page is read at the first page's.
        let mut revision = 0;
        loop {
            let request = pb::RangeRequest {
                key: start_key,
                range_end: range_end.clone(),
                limit: LIST_PAGE_KEYS,
                revision,
                ..Default::default()
            };
            let response = self.unary(prefix, None, on_member!(kv.range(request))).await?;
            if revision == 0 {
                revision = self::revision(response.header.as_ref());
            }
            let next_key = match (response.more, response.kvs.last()) {
                (true, Some(last)) => {
                    let mut key = last.key.clone();
                    key.push(0);
                    Some(key)
                }
                _ => None,
            };
            for kv in response.kvs {
                kvs.push(convert::key_value(kv)?);
            }
            match next_key {
                Some(key) => start_key = key,
                None => break,
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
        let request = pb::TxnRequest {
            compare: txn.compares.iter().map(convert::compare).collect(),
            success: txn.success.iter().map(convert::request_op).collect(),
            failure: txn.failure.iter().map(convert::request_op).collect(),
        };
        let response = self.unary(&key, lease, on_member!(kv.txn(request))).await?;
        let revision = revision(response.header.as_ref());
        let results =
            response.responses.into_iter().map(|op| convert::op_result(op, &key)).collect::<Result<Vec<_>, _>>()?;
        Ok(TxnResponse { succeeded: response.succeeded, revision, results })
    }

    async fn watch(&self, prefix: &str, start_revision: Option<i64>) -> Result<WatchStream, MetaError> {
        // An explicit start revision makes "every change after this call" exact even though
        // the watch is created asynchronously on the server.
        let start_revision = match start_revision {
            Some(revision) if revision > 0 => revision,
            _ => self.current_revision().await? + 1,
        };
        watch::start(self, prefix, start_revision).await
    }

    async fn compact(&self, revision: i64) -> Result<(), MetaError> {
        let request = pb::CompactionRequest { revision, physical: false };
        match self.unary("", None, on_member!(kv.compact(request))).await {
            Ok(_) => Ok(()),
            Err(MetaError::Other { reason, .. }) if reason.contains("required revision has been compacted") => Ok(()),
            Err(error) => Err(error),
        }
    }

    async fn lease_grant(&self, ttl_s: u64) -> Result<LeaseId, MetaError> {
        let ttl = i64::try_from(ttl_s.max(1)).unwrap_or(i64::MAX);
        let request = pb::LeaseGrantRequest { ttl, id: 0 };
        let response = self.unary("", None, on_member!(lease.lease_grant(request))).await?;
        if !response.error.is_empty() {
            return Err(MetaError::other("", format!("etcd refused a lease: {}", response.error)));
        }
        Ok(LeaseId(response.id))
    }

    async fn lease_keep_alive(&self, lease: LeaseId) -> Result<u64, MetaError> {
        let slot = self.keeper_slot(lease);
        let mut slot = slot.lock().await;
        let deadline = Instant::now() + REQUEST_TIMEOUT;
        // The stream runs on the member the client asks now, and is opened again on the next
        // one when that one stops answering. It is out of its slot while a renewal is
        // outstanding, so a renewal its caller gives up on takes the stream with it: no later
        // renewal can read that renewal's late answer as its own.
        loop {
            let attempt = self.members.attempt();
            let member = attempt.member();
            let kept = slot.take().filter(|keeper| keeper.member == member);
            let renewal = async {
                let mut keeper = match kept {
                    Some(keeper) => {
                        if keeper.requests.send(pb::LeaseKeepAliveRequest { id: lease.0 }).await.is_err() {
                            return (None, Err(Status::unavailable("the lease keep-alive stream ended")));
                        }
                        keeper
                    }
                    None => match self.open_keeper(member, lease).await {
                        Ok(keeper) => keeper,
                        Err(status) => return (None, Err(status)),
                    },
                };
                let response = keeper.responses.message().await;
                (Some(keeper), response)
            };
            let limit = ATTEMPT_TIMEOUT.min(deadline.saturating_duration_since(Instant::now()));
            let (keeper, outcome) = match timeout(limit, renewal).await {
                Ok((keeper, response)) => (keeper, Some(response)),
                Err(_) => (None, None),
            };
            let error = match outcome {
                Some(Ok(Some(response))) if response.ttl > 0 => {
                    *slot = keeper;
                    attempt.answered();
                    return Ok(u64::try_from(response.ttl).unwrap_or(0));
                }
                Some(Ok(Some(_))) => {
                    attempt.answered();
                    self.forget_keeper(lease);
                    return Err(MetaError::LeaseExpired { lease });
                }
                Some(Ok(None)) => {
                    MetaError::unavailable(self.clients[member].url.clone(), "etcd closed the lease keep-alive stream")
                }
                Some(Err(status)) => match self.map_status(member, "", Some(lease), &status) {
                    error @ MetaError::Unavailable { .. } => error,
                    refusal => {
                        attempt.answered();
                        self.forget_keeper(lease);
                        return Err(refusal);
                    }
                },
                None => MetaError::unavailable(
                    self.clients[member].url.clone(),
                    format!("no answer within {ATTEMPT_TIMEOUT:?} to a lease keep-alive"),
                ),
            };
            if let Err(error) = self.members.next_member(attempt, error, deadline).await {
                self.forget_keeper(lease);
                return Err(error);
            }
        }
    }

    async fn lease_revoke(&self, lease: LeaseId) -> Result<(), MetaError> {
        self.forget_keeper(lease);
        let request = pb::LeaseRevokeRequest { id: lease.0 };
        self.unary("", Some(lease), on_member!(lease.lease_revoke(request))).await?;
        Ok(())
    }

    async fn leaderless(&self) -> Result<bool, MetaError> {
        Ok(leaderless::leaderless(&self.clients).await)
    }
}
