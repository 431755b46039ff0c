//! The JSON HTTP API under `/api/v1` (`docs/design/api.md`), served by every mon.
//!
//! Handlers decode the request, call `admin` for writes or read the store for views, and
//! answer JSON. Every error is `{"error": "..."}` with a 4xx status for the caller's mistakes
//! (including bodies that are not the expected JSON, unknown paths and methods) and a 5xx only
//! when the metadata store failed. Reads go to the store on each request, so a read after a
//! write on any mon sees the write.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, Path, Query, Request, State};
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use cluster::records::decode;
use cluster::{keys, ClusterMap, LeaderRecord};
use meta::MetaStore;
use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::admin::{self, AdminError, CreatePool, CreateVolume, ResizeVolume};
use crate::down_report::{self, DownReport};
use crate::snapshot_views::{self, GroupView, SnapshotList, SnapshotView};
use crate::snapshots::{self, CreateClone, CreateGroup, CreateSnapshot};
use crate::trash_views::{self, TrashList, TrashView};
use crate::usage_views::{self, UsageList, VolumeUsageView};
use crate::views::{self, ClusterView, ErrorView, LeaderView, OsdList, OsdTree, PoolList, PoolView, StatusView};
use crate::views::{DownReportView, LocalOsdView, PgList, VolumeList, VolumeView};
use crate::{osd_admin, scrub, seal, trash};
use crate::{LocalOsdError, LocalOsds, Shared, StopRequest};

/// The API's routes on top of `shared`'s store.
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    let api = Router::new()
        .route("/cluster", get(get_cluster))
        .route("/status", get(get_status))
        .route("/pools", get(list_pools).post(create_pool))
        .route("/pools/{name}", get(get_pool).delete(delete_pool))
        .route("/volumes", get(list_volumes).post(create_volume))
        .route("/volumes/{name}", get(get_volume).patch(resize_volume).delete(delete_volume))
        .route("/volumes/{name}/rollback", post(rollback_volume))
        .route("/volumes/{name}/flatten", post(flatten_volume))
        .route("/volumes/{name}/du", get(volume_usage))
        .route("/du", get(usage))
        .route("/trash", get(list_trash).delete(purge_expired_trash))
        .route("/trash/{which}", delete(purge_trash))
        .route("/trash/{which}/restore", post(restore_trash))
        .route("/snapshots", get(list_snapshots).post(create_snapshot))
        .route("/snapshots/{name}", get(get_snapshot).delete(delete_snapshot))
        .route("/snapshots/{name}/clones", post(clone_snapshot))
        .route("/snapshot-groups", post(create_group))
        .route("/snapshot-groups/{name}", get(get_group).delete(delete_group))
        .route("/pgs", get(list_pgs))
        .route("/osds", get(list_osds))
        .route("/osds/tree", get(osd_tree))
        .route("/osds/{id}", delete(remove_osd))
        .route("/osds/{id}/out", post(out_osd))
        .route("/osds/{id}/in", post(in_osd))
        .route("/osds/{id}/reweight", post(reweight_osd))
        .route("/config", get(get_settings).patch(change_settings))
        .route("/scrub", post(request_scrub))
        .route("/scrub/{id}", get(scrub_progress))
        .route("/osds/{id}/down-report", post(report_down))
        .route("/osds/{id}/stop", post(stop_osd))
        .route("/osds/{id}/start", post(start_osd));
    Router::new()
        .nest("/api/v1", api)
        .fallback(unknown_path)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(shared)
}

/// An error answer: the status and one sentence.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into() }
    }
}

impl From<AdminError> for ApiError {
    fn from(error: AdminError) -> ApiError {
        let status = StatusCode::from_u16(error.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if status.is_server_error() {
            tracing::warn!(%error, "API request failed");
        }
        ApiError::new(status, error.to_string())
    }
}

impl From<meta::MetaError> for ApiError {
    fn from(error: meta::MetaError) -> ApiError {
        AdminError::from(error).into()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(ErrorView { error: self.message })).into_response()
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// A JSON request body whose rejections are API errors (`{"error": ...}`, 400 or 415).
struct Body<T>(T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(request, state).await {
            Ok(Json(value)) => Ok(Body(value)),
            Err(rejection) => Err(body_error(rejection)),
        }
    }
}

fn body_error(rejection: JsonRejection) -> ApiError {
    // axum answers 422 for well-formed JSON of the wrong shape; to the caller it is a bad request.
    let status = match rejection.status() {
        StatusCode::UNPROCESSABLE_ENTITY => StatusCode::BAD_REQUEST,
        status => status,
    };
    let message = match &rejection {
        JsonRejection::MissingJsonContentType(_) => {
            "the request body must be JSON (Content-Type: application/json)".into()
        }
        JsonRejection::JsonDataError(error) => format!("the request body is not valid: {}", innermost(error)),
        JsonRejection::JsonSyntaxError(error) => format!("the request body is not JSON: {}", innermost(error)),
        other => format!("the request body could not be read: {}", other.body_text().to_lowercase()),
    };
    ApiError::new(status, message)
}

/// The message of the deepest cause: serde's, without axum's preamble.
fn innermost(error: &(dyn std::error::Error + 'static)) -> String {
    let mut current = error;
    while let Some(source) = current.source() {
        current = source;
    }
    current.to_string()
}

async fn unknown_path(method: Method, uri: Uri) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, format!("there is no API endpoint {method} {}", uri.path()))
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, format!("{} does not accept {method}", uri.path()))
}

/// The leader record, if a leader holds the key and its value decodes.
async fn leader(store: &dyn MetaStore) -> ApiResult<Option<LeaderView>> {
    let Some(kv) = store.get(keys::MON_LEADER).await? else { return Ok(None) };
    match decode::<LeaderRecord>(keys::MON_LEADER, &kv.value) {
        Ok(record) => Ok(Some(LeaderView { mon: record.mon, address: record.address })),
        Err(error) => {
            tracing::warn!(%error, "the leader key holds a value this build does not read");
            Ok(None)
        }
    }
}

async fn get_cluster(State(shared): State<Arc<Shared>>) -> ApiResult<Json<ClusterView>> {
    let store = shared.store.as_ref();
    let cluster = admin::cluster_record(store).await?;
    Ok(Json(ClusterView {
        cluster_id: cluster.cluster_id,
        object_size_bytes: cluster.object_size_bytes,
        meta_url: shared.config.meta_url.clone(),
        mon: shared.config.mon_id.clone(),
        leader: leader(store).await?,
    }))
}

/// How long `GET /status` waits for the store before it answers from the last map it watched.
const STATUS_STORE_WAIT: Duration = Duration::from_secs(3);

async fn get_status(State(shared): State<Arc<Shared>>) -> ApiResult<Json<StatusView>> {
    let store_error = match tokio::time::timeout(STATUS_STORE_WAIT, status_from_store(&shared)).await {
        Ok(Ok(view)) => return Ok(Json(view)),
        Ok(Err(error)) if error.status == StatusCode::SERVICE_UNAVAILABLE => error.message,
        Ok(Err(error)) => return Err(error),
        Err(_) => format!("the metadata store did not answer within {} s", STATUS_STORE_WAIT.as_secs()),
    };
    // The store cannot be read (lost its quorum, or this mon is cut off from it): what the OSDs
    // serve does not depend on it, so the status is still worth telling, from the last map.
    let map = shared.watcher.current();
    let mut view = status_of(&shared, &map, None, None).await;
    view.store_error = Some(store_error);
    Ok(Json(view))
}

async fn status_from_store(shared: &Shared) -> ApiResult<StatusView> {
    let store = shared.store.as_ref();
    let map = cluster_watch::load(store).await?;
    let scrubs = scrub::results(store).await?;
    let leader = leader(store).await?;
    Ok(status_of(shared, &map, leader, Some(&scrubs)).await)
}

/// The status of `map` as the OSDs answer for it now, with the scrub results when they could
/// be read.
async fn status_of(
    shared: &Shared,
    map: &ClusterMap,
    leader: Option<LeaderView>,
    scrubs: Option<&BTreeMap<(u32, u32), cluster::PgScrubRecord>>,
) -> StatusView {
    let answers = ask_osds(map).await;
    let mut pgs = views::all_pg_views(map, &answers);
    if let Some(scrubs) = scrubs {
        attach(scrubs, &mut pgs);
    }
    let osds_down = shared.down_since(map);
    let recovery = shared.recovery(&pgs, shared.cluster.object_size_bytes);
    let mut status =
        views::status_view(shared.cluster.cluster_id.clone(), leader, map, &answers, &pgs, osds_down, recovery);
    let flattens = shared.flattens.lock().expect("flatten table");
    for flattening in &mut status.flattening {
        flattening.progress = flattens.get(&flattening.volume).cloned();
    }
    status
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PgFilter {
    pool: Option<String>,
    state: Option<String>,
}

async fn list_pgs(
    State(shared): State<Arc<Shared>>,
    filter: Result<Query<PgFilter>, QueryRejection>,
) -> ApiResult<Json<PgList>> {
    let filter = query_of(filter)?;
    let map = cluster_watch::load(shared.store.as_ref()).await?;
    let pools: Vec<&cluster::PoolRecord> = match &filter.pool {
        None => map.pools.values().collect(),
        Some(name) => vec![map
            .pool_by_name(name)
            .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("no pool named {name:?}")))?],
    };
    if let Some(state) = &filter.state {
        if !PG_STATES.contains(&state.as_str()) {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("unknown pg state {state:?}; states are {}", PG_STATES.join(", ")),
            ));
        }
    }
    let answers = ask_osds(&map).await;
    let mut pgs: Vec<views::PgView> = pools
        .into_iter()
        .flat_map(|pool| views::pg_views(pool, &map, &answers))
        .filter(|pg| filter.state.as_ref().is_none_or(|state| matches_state(pg, state)))
        .collect();
    attach_scrubs(shared.store.as_ref(), &mut pgs).await?;
    Ok(Json(PgList { pgs }))
}

/// The states `GET /pgs?state=` filters by: `active` and `degraded` as the summary counts them.
const PG_STATES: [&str; 10] =
    ["active", "clean", "degraded", "recovering", "peering", "inactive", "unknown", "undersized", "misplaced", "stuck"];

fn matches_state(pg: &views::PgView, state: &str) -> bool {
    match state {
        "active" => pg.is_active(),
        "degraded" => pg.is_active() && pg.is_undersized(),
        "undersized" => pg.is_undersized(),
        "misplaced" => pg.is_misplaced(),
        "stuck" => pg.stuck,
        other => pg.state == other,
    }
}

/// How long the mon waits for an OSD's answers about its usage and PGs.
const OSD_ANSWER_TIMEOUT: Duration = Duration::from_secs(1);

/// Asks every up OSD for its space usage and the states of the PGs it leads, all at once, over
/// the wire protocol: statistics stay out of the metadata store. An OSD that does not answer in
/// time is left out (its PGs show as `unknown`; the status says how many answered).
async fn ask_osds(map: &ClusterMap) -> views::OsdAnswers {
    let mut asks = tokio::task::JoinSet::new();
    for &osd in map.live.keys() {
        let Some(address) = map.address(osd).map(str::to_string) else { continue };
        asks.spawn(async move {
            let ask = async {
                let connection = net::connect(&address).await.map_err(|error| error.to_string())?;
                let space = connection.call(0, wire::Request::Space);
                let pgs = connection.call(0, wire::Request::PgStates);
                let (space, pgs) = futures_util::future::join(space, pgs).await;
                let used_bytes = match space.map_err(|error| error.to_string())?.response {
                    wire::Response::Space { used_bytes, total_bytes, .. } => (used_bytes, total_bytes),
                    other => return Err(format!("answered {:?}", other.opcode())),
                };
                match pgs.map_err(|error| error.to_string())?.response {
                    wire::Response::PgStates { history_writes, copied_bytes, pgs } => {
                        Ok((used_bytes, (history_writes, copied_bytes), pgs))
                    }
                    other => Err(format!("answered {:?}", other.opcode())),
                }
            };
            let answer =
                tokio::time::timeout(OSD_ANSWER_TIMEOUT, ask).await.unwrap_or_else(|_| Err("no answer in time".into()));
            (osd, address, answer)
        });
    }
    let mut answers = views::OsdAnswers::default();
    while let Some(joined) = asks.join_next().await {
        match joined {
            Ok((osd, _, Ok(((used_bytes, total_bytes), (history_writes, copied_bytes), pgs)))) => {
                answers.used_bytes.insert(osd, used_bytes);
                answers.total_bytes.insert(osd, total_bytes);
                answers.history_writes.insert(osd, history_writes);
                answers.copied_bytes.insert(osd, copied_bytes);
                for report in pgs {
                    answers.pgs.insert((report.pg.pool, report.pg.pg), (osd, report));
                }
            }
            Ok((osd, address, Err(reason))) => tracing::debug!(osd, %address, %reason, "no answer from an osd"),
            Err(error) => tracing::warn!(%error, "asking an osd for its usage failed"),
        }
    }
    answers
}

async fn list_pools(State(shared): State<Arc<Shared>>) -> ApiResult<Json<PoolList>> {
    let map = cluster_watch::load(shared.store.as_ref()).await?;
    let answers = ask_osds(&map).await;
    Ok(Json(PoolList { pools: map.pools.values().map(|pool| views::pool_view(pool, &map, &answers)).collect() }))
}

async fn get_pool(State(shared): State<Arc<Shared>>, Path(name): Path<String>) -> ApiResult<Json<PoolView>> {
    let map = cluster_watch::load(shared.store.as_ref()).await?;
    let pool = map.pool_by_name(&name).ok_or_else(|| AdminError::NotFound(format!("pool {name:?} does not exist")))?;
    let answers = ask_osds(&map).await;
    Ok(Json(views::pool_view(pool, &map, &answers)))
}

async fn create_pool(
    State(shared): State<Arc<Shared>>,
    Body(request): Body<CreatePool>,
) -> ApiResult<(StatusCode, Json<PoolView>)> {
    let store = shared.store.as_ref();
    let pool = admin::create_pool(store, &request).await?;
    let map = cluster_watch::load(store).await?;
    Ok((StatusCode::CREATED, Json(views::pool_view(&pool, &map, &views::OsdAnswers::default()))))
}

async fn delete_pool(State(shared): State<Arc<Shared>>, Path(name): Path<String>) -> ApiResult<Json<PoolView>> {
    let store = shared.store.as_ref();
    let pool = admin::delete_pool(store, &name).await?;
    let map = cluster_watch::load(store).await?;
    Ok(Json(views::pool_view(&pool, &map, &views::OsdAnswers::default())))
}

fn volume_view(shared: &Shared, volume: &cluster::VolumeRecord, map: &ClusterMap) -> VolumeView {
    let progress = shared.progress.lock().expect("progress lock").get(&volume.name).copied();
    let flatten = shared.flattens.lock().expect("flatten table").get(&volume.name).cloned();
    views::volume_view(volume, map, progress, flatten)
}

async fn list_volumes(State(shared): State<Arc<Shared>>) -> ApiResult<Json<VolumeList>> {
    let map = cluster_watch::load(shared.store.as_ref()).await?;
    let volumes = map.volumes.values().map(|volume| volume_view(&shared, volume, &map)).collect();
    Ok(Json(VolumeList { volumes }))
}

async fn get_volume(State(shared): State<Arc<Shared>>, Path(name): Path<String>) -> ApiResult<Json<VolumeView>> {
    let store = shared.store.as_ref();
    let (volume, _) = admin::get_volume(store, &name).await?;
    let map = cluster_watch::load(store).await?;
    let mut view = volume_view(&shared, &volume, &map);
    view.chain = snapshot_views::chain_view(volume.id, &map);
    view.redundancy = Some(redundancy(&map, &volume).await);
    Ok(Json(view))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SnapshotFilter {
    volume: Option<String>,
}

async fn list_snapshots(
    State(shared): State<Arc<Shared>>,
    filter: Result<Query<SnapshotFilter>, QueryRejection>,
) -> ApiResult<Json<SnapshotList>> {
    let filter = query_of(filter)?;
    let store = shared.store.as_ref();
    if let Some(volume) = &filter.volume {
        admin::get_volume(store, volume).await?;
    }
    let map = cluster_watch::load(store).await?;
    let snapshots = snapshots::list(&map, filter.volume.as_deref())
        .iter()
        .map(|snapshot| snapshot_views::snapshot_view(snapshot, &map))
        .collect();
    Ok(Json(SnapshotList { snapshots }))
}

/// Freezes the volume's head as the snapshot, then seals it: the answer comes once every OSD
/// confirmed it takes no more writes to the frozen layer, and the volume's new head takes them.
async fn create_snapshot(
    State(shared): State<Arc<Shared>>,
    Body(request): Body<CreateSnapshot>,
) -> ApiResult<(StatusCode, Json<SnapshotView>)> {
    let store = shared.store.as_ref();
    let frozen = snapshots::freeze(store, &request.name, unix_ms_now()).await?;
    seal::seal(store, &frozen.volume.name, frozen.volume.id, frozen.revision).await?;
    let map = cluster_watch::load(store).await?;
    Ok((StatusCode::CREATED, Json(snapshot_views::snapshot_view(&frozen.snapshot, &map))))
}

/// A group snapshot: every volume's head frozen in one transaction, then each sealed (all at
/// once: the first Barrier round covers every head, since one map froze them all).
async fn create_group(
    State(shared): State<Arc<Shared>>,
    Body(request): Body<CreateGroup>,
) -> ApiResult<(StatusCode, Json<GroupView>)> {
    let store = shared.store.as_ref();
    let frozen = snapshots::freeze_group(store, &request, unix_ms_now()).await?;
    let seals = frozen.iter().map(|each| seal::seal(store, &each.volume.name, each.volume.id, each.revision));
    for sealed in futures_util::future::join_all(seals).await {
        sealed?;
    }
    let map = cluster_watch::load(store).await?;
    let snapshots = frozen.iter().map(|each| snapshot_views::snapshot_view(&each.snapshot, &map)).collect();
    Ok((StatusCode::CREATED, Json(GroupView { name: request.name, snapshots })))
}

async fn get_group(State(shared): State<Arc<Shared>>, Path(name): Path<String>) -> ApiResult<Json<GroupView>> {
    let map = cluster_watch::load(shared.store.as_ref()).await?;
    let members = snapshots::group_members(&map, &name);
    if members.is_empty() {
        return Err(AdminError::NotFound(format!("group snapshot {name:?} does not exist")).into());
    }
    let snapshots = members.iter().map(|snapshot| snapshot_views::snapshot_view(snapshot, &map)).collect();
    Ok(Json(GroupView { name, snapshots }))
}

async fn delete_group(State(shared): State<Arc<Shared>>, Path(name): Path<String>) -> ApiResult<Json<GroupView>> {
    let store = shared.store.as_ref();
    let removed = snapshots::remove_group(store, &name).await?;
    let map = cluster_watch::load(store).await?;
    let snapshots = removed.iter().map(|snapshot| snapshot_views::snapshot_view(snapshot, &map)).collect();
    Ok(Json(GroupView { name, snapshots }))
}

async fn get_snapshot(State(shared): State<Arc<Shared>>, Path(name): Path<String>) -> ApiResult<Json<SnapshotView>> {
    let store = shared.store.as_ref();
    let (snapshot, _) = snapshots::get_visible_snapshot(store, &name).await?;
    let map = cluster_watch::load(store).await?;
    Ok(Json(snapshot_views::snapshot_view(&snapshot, &map)))
}

async fn delete_snapshot(State(shared): State<Arc<Shared>>, Path(name): Path<String>) -> ApiResult<Json<SnapshotView>> {
    let store = shared.store.as_ref();
    let snapshot = snapshots::remove(store, &name).await?;
    let map = cluster_watch::load(store).await?;
    Ok(Json(snapshot_views::snapshot_view(&snapshot, &map)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RollbackRequest {
    /// `VOLUME@SNAP`, a snapshot of the volume in the path.
    snapshot: String,
}

/// Gives the volume a new head over the snapshot and seals it, as a snapshot does; the old
/// head's objects are deleted in the background.
async fn rollback_volume(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    Body(request): Body<RollbackRequest>,
) -> ApiResult<Json<VolumeView>> {
    let store = shared.store.as_ref();
    let frozen = snapshots::rollback(store, &name, &request.snapshot, unix_ms_now()).await?;
    seal::seal(store, &frozen.volume.name, frozen.volume.id, frozen.revision).await?;
    let (volume, _) = admin::get_volume(store, &name).await?;
    let map = cluster_watch::load(store).await?;
    Ok(Json(volume_view(&shared, &volume, &map)))
}

fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CloneRequest {
    name: String,
    #[serde(default)]
    pool: Option<String>,
}

async fn clone_snapshot(
    State(shared): State<Arc<Shared>>,
    Path(snapshot): Path<String>,
    Body(request): Body<CloneRequest>,
) -> ApiResult<(StatusCode, Json<VolumeView>)> {
    let store = shared.store.as_ref();
    let clone = CreateClone { snapshot, name: request.name, pool: request.pool };
    let volume = snapshots::clone_volume(store, &clone).await?;
    let map = cluster_watch::load(store).await?;
    Ok((StatusCode::CREATED, Json(volume_view(&shared, &volume, &map))))
}

async fn volume_usage(State(shared): State<Arc<Shared>>, Path(name): Path<String>) -> ApiResult<Json<VolumeUsageView>> {
    let store = shared.store.as_ref();
    let (volume, _) = admin::get_volume(store, &name).await?;
    let map = cluster_watch::load(store).await?;
    Ok(Json(usage_of(&map, &volume).await))
}

/// Every volume's usage, by name.
async fn usage(State(shared): State<Arc<Shared>>) -> ApiResult<Json<UsageList>> {
    let map = cluster_watch::load(shared.store.as_ref()).await?;
    let mut volumes = Vec::new();
    for volume in map.volumes.values().filter(|volume| !volume.is_deleting()) {
        volumes.push(usage_of(&map, volume).await);
    }
    Ok(Json(UsageList { volumes }))
}

/// Asks every up OSD what each of the volume's layers holds in the PGs it leads.
async fn usage_of(map: &ClusterMap, volume: &cluster::VolumeRecord) -> VolumeUsageView {
    let mut asks = tokio::task::JoinSet::new();
    for &osd in map.live.keys() {
        let address = map.address(osd).map(str::to_string);
        let inode = volume.id;
        asks.spawn(async move {
            let ask = async {
                let connection = net::connect(&address?).await.ok()?;
                match connection.call(0, wire::Request::VolumeUsage { inode }).await.ok()?.response {
                    wire::Response::VolumeUsage { layers } => Some(layers),
                    _ => None,
                }
            };
            tokio::time::timeout(OSD_ANSWER_TIMEOUT, ask).await.ok().flatten()
        });
    }
    let mut answers = Vec::new();
    while let Some(joined) = asks.join_next().await {
        answers.push(joined.ok().flatten());
    }
    usage_views::volume_usage_view(map, volume, &answers)
}

/// Asks every up OSD how many of the volume's objects in the PGs it leads lack a copy, and
/// sums that with the states of the pool's PGs.
async fn redundancy(map: &ClusterMap, volume: &cluster::VolumeRecord) -> views::RedundancyView {
    let answers = ask_osds(map).await;
    let pgs: Vec<views::PgView> =
        map.pools.get(&volume.pool).map(|pool| views::pg_views(pool, map, &answers)).unwrap_or_default();
    let mut asks = tokio::task::JoinSet::new();
    for &osd in map.live.keys() {
        let Some(address) = map.address(osd).map(str::to_string) else { continue };
        let inode = volume.id;
        asks.spawn(async move {
            let ask = async {
                let connection = net::connect(&address).await.ok()?;
                match connection.call(0, wire::Request::VolumeRedundancy { inode }).await.ok()?.response {
                    wire::Response::VolumeRedundancy { objects, degraded_objects } => Some((objects, degraded_objects)),
                    _ => None,
                }
            };
            tokio::time::timeout(OSD_ANSWER_TIMEOUT, ask).await.ok().flatten()
        });
    }
    let (mut objects, mut degraded_objects, mut silent) = (0, 0, 0);
    while let Some(joined) = asks.join_next().await {
        match joined.ok().flatten() {
            Some((held, degraded)) => {
                objects += held;
                degraded_objects += degraded;
            }
            None => silent += 1,
        }
    }
    let pgs_clean = pgs.iter().filter(|pg| pg.state == "clean" && !pg.is_misplaced()).count() as u64;
    let pgs_inactive = pgs.iter().filter(|pg| pg.state == "inactive").count() as u64;
    let state = if pgs_inactive > 0 {
        "unavailable"
    } else if pgs_clean == pgs.len() as u64 && degraded_objects == 0 && silent == 0 {
        "intact"
    } else {
        "at_risk"
    };
    views::RedundancyView {
        state: state.to_string(),
        pgs_total: pgs.len() as u64,
        pgs_clean,
        pgs_inactive,
        objects,
        degraded_objects,
        osds_not_answering: silent,
    }
}

async fn create_volume(
    State(shared): State<Arc<Shared>>,
    Body(request): Body<CreateVolume>,
) -> ApiResult<(StatusCode, Json<VolumeView>)> {
    let store = shared.store.as_ref();
    let volume = admin::create_volume(store, &request).await?;
    let map = cluster_watch::load(store).await?;
    Ok((StatusCode::CREATED, Json(volume_view(&shared, &volume, &map))))
}

/// Flags the volume for flattening; the leader fills its head and cuts its parent (ADR 0035).
async fn flatten_volume(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
) -> ApiResult<(StatusCode, Json<VolumeView>)> {
    let store = shared.store.as_ref();
    let volume = crate::flatten::start(store, &name).await?;
    let map = cluster_watch::load(store).await?;
    Ok((StatusCode::ACCEPTED, Json(volume_view(&shared, &volume, &map))))
}

async fn resize_volume(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    Body(request): Body<ResizeVolume>,
) -> ApiResult<Json<VolumeView>> {
    let store = shared.store.as_ref();
    let volume = admin::resize_volume(store, &name, request.size_bytes).await?;
    let map = cluster_watch::load(store).await?;
    Ok(Json(volume_view(&shared, &volume, &map)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VolumeRemoval {
    /// Skip the trash: delete the volume and its objects now.
    #[serde(default)]
    now: bool,
}

/// A query string decoded, or a 400 naming what is wrong with it.
fn query_of<T>(query: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    query.map(|Query(value)| value).map_err(|rejection| ApiError::new(StatusCode::BAD_REQUEST, rejection.body_text()))
}

/// Moves a volume and its snapshots to the trash (ADR 0030), or with `?now=true` flags it
/// `deleting` for the leader to remove.
async fn delete_volume(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    removal: Result<Query<VolumeRemoval>, QueryRejection>,
) -> ApiResult<Response> {
    let removal = query_of(removal)?;
    let store = shared.store.as_ref();
    if removal.now {
        let volume = admin::mark_volume_deleting(store, &name).await?;
        let map = cluster_watch::load(store).await?;
        return Ok((StatusCode::ACCEPTED, Json(volume_view(&shared, &volume, &map))).into_response());
    }
    let entry = trash::move_to_trash(store, &name, stdx::wall_clock::unix_ms()).await?;
    let map = cluster_watch::load(store).await?;
    Ok(Json(trash_views::trash_view(&map, &entry)).into_response())
}

async fn list_trash(State(shared): State<Arc<Shared>>) -> ApiResult<Json<TrashList>> {
    let map = cluster_watch::load(shared.store.as_ref()).await?;
    Ok(Json(trash_views::trash_list(&map)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TrashRestore {
    /// The name to restore it under (its own if absent).
    #[serde(rename = "as", default)]
    as_name: Option<String>,
}

async fn restore_trash(
    State(shared): State<Arc<Shared>>,
    Path(which): Path<String>,
    Body(request): Body<TrashRestore>,
) -> ApiResult<Json<VolumeView>> {
    let store = shared.store.as_ref();
    let volume = trash::restore(store, &which, request.as_name.as_deref()).await?;
    let map = cluster_watch::load(store).await?;
    Ok(Json(volume_view(&shared, &volume, &map)))
}

/// Purges one entry: its volume and snapshots go to the reaper.
async fn purge_trash(
    State(shared): State<Arc<Shared>>,
    Path(which): Path<String>,
) -> ApiResult<(StatusCode, Json<TrashView>)> {
    let store = shared.store.as_ref();
    let entry = trash::purge(store, &which).await?;
    let map = cluster_watch::load(store).await?;
    Ok((StatusCode::ACCEPTED, Json(trash_views::trash_view(&map, &entry))))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TrashPurge {
    /// Purge the entries that expired (the leader does it too, within a second).
    #[serde(default)]
    expired: bool,
}

async fn purge_expired_trash(
    State(shared): State<Arc<Shared>>,
    purge: Result<Query<TrashPurge>, QueryRejection>,
) -> ApiResult<(StatusCode, Json<TrashList>)> {
    let purge = query_of(purge)?;
    if !purge.expired {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "name the entry to purge (DELETE /trash/NAME), or purge those that expired with ?expired=true",
        ));
    }
    let store = shared.store.as_ref();
    let purged = trash::purge_expired(store, stdx::wall_clock::unix_ms(), None).await?;
    let map = cluster_watch::load(store).await?;
    let entries = purged.iter().map(|entry| trash_views::trash_view(&map, entry)).collect();
    Ok((StatusCode::ACCEPTED, Json(TrashList { entries })))
}

async fn list_osds(State(shared): State<Arc<Shared>>) -> ApiResult<Json<OsdList>> {
    let map = cluster_watch::load(shared.store.as_ref()).await?;
    Ok(Json(OsdList { osds: views::osd_views(&map) }))
}

async fn osd_tree(State(shared): State<Arc<Shared>>) -> ApiResult<Json<OsdTree>> {
    let map = cluster_watch::load(shared.store.as_ref()).await?;
    Ok(Json(views::osd_tree(&map)))
}

/// Someone saw the OSD's connection refused: check, and revoke its lease if the mon sees it too.
async fn report_down(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    Body(report): Body<DownReport>,
) -> ApiResult<Json<DownReportView>> {
    let osd = osd_id(&id)?;
    Ok(Json(down_report::handle(shared.store.as_ref(), shared.config.fast_down, osd, report).await?))
}

async fn osd_answer(shared: &Shared, id: u32) -> ApiResult<Json<views::OsdView>> {
    let map = cluster_watch::load(shared.store.as_ref()).await?;
    let view = views::osd_views(&map).into_iter().find(|osd| osd.id == id);
    view.map(Json).ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("osd.{id} does not exist")))
}

async fn out_osd(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> ApiResult<Json<views::OsdView>> {
    let osd = osd_id(&id)?;
    osd_admin::mark_out(shared.store.as_ref(), osd).await?;
    osd_answer(&shared, osd).await
}

async fn in_osd(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> ApiResult<Json<views::OsdView>> {
    let osd = osd_id(&id)?;
    osd_admin::mark_in(shared.store.as_ref(), osd).await?;
    osd_answer(&shared, osd).await
}

async fn reweight_osd(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    Body(request): Body<views::ReweightRequest>,
) -> ApiResult<Json<views::OsdView>> {
    let osd = osd_id(&id)?;
    osd_admin::reweight(shared.store.as_ref(), osd, request.weight).await?;
    osd_answer(&shared, osd).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RemoveQuery {
    #[serde(default)]
    force: bool,
}

async fn remove_osd(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    query: Result<Query<RemoveQuery>, QueryRejection>,
) -> ApiResult<Json<views::OsdView>> {
    let query = query_of(query)?;
    let osd = osd_id(&id)?;
    let map = cluster_watch::load(shared.store.as_ref()).await?;
    let view = views::osd_views(&map).into_iter().find(|view| view.id == osd);
    osd_admin::remove(shared.store.as_ref(), &map, osd, query.force).await?;
    view.map(Json).ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("osd.{osd} does not exist")))
}

async fn get_settings(State(shared): State<Arc<Shared>>) -> ApiResult<Json<cluster::SettingsRecord>> {
    Ok(Json(osd_admin::settings(shared.store.as_ref()).await?))
}

async fn change_settings(
    State(shared): State<Arc<Shared>>,
    Body(change): Body<views::SettingsChange>,
) -> ApiResult<Json<cluster::SettingsRecord>> {
    Ok(Json(osd_admin::change_settings(shared.store.as_ref(), &change).await?))
}

/// Adds each PG's last scrub to its view.
async fn attach_scrubs(store: &dyn MetaStore, pgs: &mut [views::PgView]) -> ApiResult<()> {
    attach(&scrub::results(store).await?, pgs);
    Ok(())
}

/// Each PG's last scrub, from `results`.
fn attach(results: &BTreeMap<(u32, u32), cluster::PgScrubRecord>, pgs: &mut [views::PgView]) {
    for pg in pgs {
        pg.scrub = results.get(&(pg.pool, pg.pg)).map(|record| views::PgScrubView::of(pg.pool, pg.pg, record));
    }
}

async fn request_scrub(
    State(shared): State<Arc<Shared>>,
    Body(body): Body<views::ScrubRequestBody>,
) -> ApiResult<(StatusCode, Json<views::ScrubProgressView>)> {
    let store = shared.store.as_ref();
    let map = cluster_watch::load(store).await?;
    let request = scrub::request(store, &map, &body).await?;
    let map = cluster_watch::load(store).await?;
    Ok((StatusCode::ACCEPTED, Json(scrub::progress(store, &map, request.id).await?)))
}

async fn scrub_progress(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
) -> ApiResult<Json<views::ScrubProgressView>> {
    let id: u64 =
        id.parse().map_err(|_| ApiError::new(StatusCode::BAD_REQUEST, format!("{id:?} is not a scrub request id")))?;
    let store = shared.store.as_ref();
    let map = cluster_watch::load(store).await?;
    Ok(Json(scrub::progress(store, &map, id).await?))
}

fn osd_id(id: &str) -> ApiResult<u32> {
    id.parse().map_err(|_| ApiError::new(StatusCode::BAD_REQUEST, format!("{id:?} is not an OSD id (a number)")))
}

/// The OSDs of this process, or the answer for a mon without any.
fn local_osds(shared: &Shared) -> ApiResult<&Arc<dyn LocalOsds>> {
    shared.local_osds.get().ok_or_else(|| {
        ApiError::new(StatusCode::NOT_FOUND, "this mon runs no OSDs in its process (only basalt dev does)")
    })
}

impl From<LocalOsdError> for ApiError {
    fn from(error: LocalOsdError) -> ApiError {
        let status = match error {
            LocalOsdError::Unknown(_) => StatusCode::NOT_FOUND,
            LocalOsdError::AlreadyStopped(_) | LocalOsdError::AlreadyRunning(_) => StatusCode::CONFLICT,
            LocalOsdError::Failed { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, error.to_string())
    }
}

async fn stop_osd(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult<Json<LocalOsdView>> {
    let osd = osd_id(&id)?;
    // The body may be left out: a graceful stop.
    let request: StopRequest = if body.is_empty() {
        StopRequest::default()
    } else {
        serde_json::from_slice(&body).map_err(|error| {
            ApiError::new(StatusCode::BAD_REQUEST, format!("the request body is not valid: {error}"))
        })?
    };
    local_osds(&shared)?.stop(osd, request.mode).await?;
    Ok(Json(LocalOsdView { osd, running: false }))
}

async fn start_osd(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> ApiResult<Json<LocalOsdView>> {
    let osd = osd_id(&id)?;
    local_osds(&shared)?.start(osd).await?;
    Ok(Json(LocalOsdView { osd, running: true }))
}
