//! The Basalt monitor: the process that turns the OSD map into PG tables and serves the
//! cluster's administrative API.
//!
//! Every mon serves the JSON HTTP API (`api`, `docs/design/api.md`) and campaigns for
//! leadership on `/basalt/mon/leader` (`leader`). Only the leader publishes PG tables
//! (`pg_tables`) and deletes volumes flagged `deleting` (`reaper`); administrative writes
//! (`admin`) are compare-and-swap transactions that any mon may run. The mon steers OSDs only
//! through the metadata store (PG tables, epochs, leases); it dials them for one thing, the live
//! figures `basalt status` shows (the wire admin op `Space`), and never to change their state.
//! `docs/adr/0006-monitor-and-api.md` records the decisions.
//!
//! [`Mon::start`] runs a mon inside the caller's tokio runtime on any [`MetaStore`], so
//! `basalt mon` and a single-process cluster share this code.

pub mod admin;
mod api;
mod down_out;
pub mod down_report;
pub mod flatten;
mod leader;
pub mod local_osds;
pub mod mark_down;
pub mod osd_admin;
pub mod pg_tables;
pub mod reaper;
mod recovery_rate;
pub mod scrub;
pub mod seal;
pub mod snapshot_views;
pub mod snapshots;
pub mod stderr_log;
#[cfg(test)]
mod test_maps;
pub mod trash;
pub mod trash_views;
pub mod usage_views;
pub mod views;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use cluster::ClusterMap;
use cluster_watch::MapWatcher;
use meta::{MetaError, MetaStore};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

pub use admin::{
    check_name, default_pg_count, AdminError, CreatePool, CreateVolume, ResizeVolume, OBJECT_SIZE_DEFAULT_BYTES,
    PGS_PER_OSD_DEFAULT, VOLUME_SIZE_ALIGNMENT_BYTES,
};
pub use local_osds::{LocalOsdError, LocalOsds, StopMode, StopRequest};
pub use reaper::{DeletionProgress, VolumeReaper};

/// The lease TTL of the leader key: a killed leader's work waits this long (plus an etcd
/// election when etcd's leader died with it, which renews every lease), so it matches an OSD's.
pub const LEASE_TTL_DEFAULT: Duration = Duration::from_secs(3);
/// How often the leader renews its lease: a third of the TTL leaves two chances before expiry.
pub const KEEP_ALIVE_INTERVAL_DEFAULT: Duration = Duration::from_secs(1);
/// How long a freshly started mon keeps the members of stored tables that have no liveness key
/// (ADR 0005): an OSD lease TTL (3 s by default, ADR 0015) and two renewals past it.
pub const LIVENESS_GRACE_DEFAULT: Duration = Duration::from_secs(5);

/// How one mon runs.
#[derive(Debug, Clone)]
pub struct MonConfig {
    /// The mon's name in the leader record and in logs.
    pub mon_id: String,
    /// The API address other parties should use for this mon; `None` uses the listener's
    /// local address.
    pub api_address: Option<String>,
    /// The metadata store URL clients and OSDs should use, reported by `GET /cluster`.
    pub meta_url: String,
    pub lease_ttl: Duration,
    pub keep_alive_interval: Duration,
    pub liveness_grace: Duration,
    /// Whether a reported OSD whose address refuses the mon's own connect loses its lease at
    /// once (ADR 0015). Off where the network may answer for a living OSD with resets.
    pub fast_down: bool,
}

impl MonConfig {
    pub fn new(mon_id: impl Into<String>, meta_url: impl Into<String>) -> MonConfig {
        MonConfig {
            mon_id: mon_id.into(),
            api_address: None,
            meta_url: meta_url.into(),
            lease_ttl: LEASE_TTL_DEFAULT,
            keep_alive_interval: KEEP_ALIVE_INTERVAL_DEFAULT,
            liveness_grace: LIVENESS_GRACE_DEFAULT,
            fast_down: true,
        }
    }
}

/// Whether this mon currently leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Candidate,
    Leader,
}

/// Why a mon could not start.
#[derive(Debug, thiserror::Error)]
pub enum MonError {
    #[error("the mon cannot read or initialise the metadata store")]
    Store(#[from] MetaError),
    #[error("the mon cannot initialise the cluster record")]
    Cluster(#[from] AdminError),
    #[error("the mon API listener has no local address")]
    Listener(#[source] std::io::Error),
}

/// What the API and the leader tasks share.
pub(crate) struct Shared {
    pub store: Arc<dyn MetaStore>,
    /// With `api_address` resolved.
    pub config: ResolvedConfig,
    pub progress: reaper::ProgressTable,
    /// The flattens the leader runs, by volume.
    pub flattens: flatten::FlattenTable,
    pub role: watch::Sender<Role>,
    /// When the mon started, for the liveness grace.
    pub started: tokio::time::Instant,
    /// When this mon first saw each registered OSD without a liveness key.
    pub down: std::sync::Mutex<BTreeMap<u32, std::time::SystemTime>>,
    /// The primaries' recent backlogs, for the recovery rate and the time left.
    pub recovery_rate: std::sync::Mutex<recovery_rate::RecoveryRate>,
    /// The OSDs of this process, if it runs any (`Mon::serve_local_osds`).
    pub local_osds: std::sync::OnceLock<Arc<dyn LocalOsds>>,
    /// The cluster map as this mon last saw it, for answers when the store cannot be read.
    pub watcher: Arc<MapWatcher>,
    /// The cluster record, which never changes once created.
    pub cluster: cluster::ClusterRecord,
}

impl Shared {
    /// The registered OSDs that are not up (no liveness key, or marked down on their peers'
    /// reports), and since when this mon has seen them so.
    pub(crate) fn observe_down(&self, map: &ClusterMap) -> BTreeMap<u32, std::time::SystemTime> {
        let now = stdx::wall_clock::now();
        let mut down = self.down.lock().expect("the down table is never poisoned");
        down.retain(|osd, _| map.osds.contains_key(osd) && !map.is_up(*osd));
        for &osd in map.osds.keys().filter(|osd| !map.is_up(**osd)) {
            down.entry(osd).or_insert(now);
        }
        down.clone()
    }

    /// The down OSDs for `basalt status`: since when, whether out, and what the mon will do.
    pub(crate) fn down_since(&self, map: &ClusterMap) -> Vec<views::OsdDownView> {
        let down = self.observe_down(map);
        let verdicts = down_out::decide(map, &down, stdx::wall_clock::now());
        down.iter()
            .map(|(&osd, since)| {
                let since_unix_s = since.duration_since(std::time::UNIX_EPOCH).map_or(0, |since| since.as_secs());
                let (out_in_s, kept_in) = match verdicts.get(&osd) {
                    Some(down_out::Verdict::Waiting { left }) => (Some(left.as_secs()), None),
                    Some(down_out::Verdict::Held { reason }) => (None, Some(reason.clone())),
                    Some(down_out::Verdict::MarkOut) => (Some(0), None),
                    _ => (None, None),
                };
                let out = map.osds.get(&osd).is_some_and(|record| record.out);
                let marked_down = map.is_marked_down(osd);
                views::OsdDownView { id: osd, since_unix_s, out, out_in_s, kept_in, marked_down }
            })
            .collect()
    }

    /// The recovery backlog, its rate and the time left, from each primary's recent progress
    /// (`recovery_rate`).
    pub(crate) fn recovery(&self, pgs: &[views::PgView], object_size_bytes: u32) -> views::RecoveryView {
        let objects_left: u64 = pgs.iter().map(|pg| pg.objects_left).sum();
        let mut left_by_primary: BTreeMap<u32, u64> = BTreeMap::new();
        for pg in pgs.iter().filter(|pg| pg.objects_left > 0) {
            if let Some(primary) = pg.primary {
                *left_by_primary.entry(primary).or_default() += pg.objects_left * u64::from(object_size_bytes);
            }
        }
        let estimate = self
            .recovery_rate
            .lock()
            .expect("the recovery rate is never poisoned")
            .observe(tokio::time::Instant::now(), &left_by_primary);
        views::RecoveryView {
            objects_left,
            bytes_left: objects_left * u64::from(object_size_bytes),
            bytes_per_s: estimate.bytes_per_s,
            seconds_left: estimate.seconds_left,
        }
    }
}

pub(crate) struct ResolvedConfig {
    pub mon_id: String,
    pub api_address: String,
    pub meta_url: String,
    pub lease_ttl: Duration,
    pub keep_alive_interval: Duration,
    pub liveness_grace: Duration,
    pub fast_down: bool,
}

/// A running mon. Dropping it stops its tasks abruptly (as a crash would: the leader lease then
/// expires on its own); [`Mon::shutdown`] hands leadership over at once.
pub struct Mon {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    tasks: JoinSet<()>,
    api_address: Option<SocketAddr>,
}

impl Mon {
    /// Creates the cluster record if the store has none, then serves the API on `listener` and
    /// campaigns for leadership, in tasks of the current tokio runtime.
    ///
    /// `reaper` removes the objects of deleted volumes; `None` deletes their records at once
    /// and leaves the objects for a later scrub.
    pub async fn start(
        store: Arc<dyn MetaStore>,
        config: MonConfig,
        listener: TcpListener,
        reaper: Option<Arc<dyn VolumeReaper>>,
    ) -> Result<Mon, MonError> {
        Mon::start_with(store, config, Some(listener), reaper).await
    }

    /// A mon with no API: it leads, publishes and decides as any other (a simulated cluster
    /// runs its mons so, ADR 0020). [`api_address`](Mon::api_address) must not be asked of it.
    pub async fn start_without_api(
        store: Arc<dyn MetaStore>,
        config: MonConfig,
        reaper: Option<Arc<dyn VolumeReaper>>,
    ) -> Result<Mon, MonError> {
        Mon::start_with(store, config, None, reaper).await
    }

    async fn start_with(
        store: Arc<dyn MetaStore>,
        config: MonConfig,
        listener: Option<TcpListener>,
        reaper: Option<Arc<dyn VolumeReaper>>,
    ) -> Result<Mon, MonError> {
        let api_address = listener.as_ref().map(TcpListener::local_addr).transpose().map_err(MonError::Listener)?;
        let cluster = admin::ensure_cluster_record(store.as_ref()).await?;
        let watcher = Arc::new(MapWatcher::start(store.clone()).await?);
        let (role, _) = watch::channel(Role::Candidate);
        let shared = Arc::new(Shared {
            store,
            config: ResolvedConfig {
                api_address: config
                    .api_address
                    .or_else(|| api_address.map(|address| address.to_string()))
                    .unwrap_or_default(),
                mon_id: config.mon_id,
                meta_url: config.meta_url,
                lease_ttl: config.lease_ttl,
                keep_alive_interval: config.keep_alive_interval,
                liveness_grace: config.liveness_grace,
                fast_down: config.fast_down,
            },
            progress: Default::default(),
            flattens: Default::default(),
            role,
            started: tokio::time::Instant::now(),
            down: Default::default(),
            recovery_rate: Default::default(),
            local_osds: Default::default(),
            watcher: watcher.clone(),
            cluster,
        });
        let (stop, stopped) = watch::channel(false);
        let mut tasks = JoinSet::new();
        // On the simulated network, the leader's connections (its barriers) start from this mon's node.
        tasks.spawn(net::on_this_node(leader::run_candidate(shared.clone(), watcher, reaper, stopped.clone())));
        if let Some(listener) = listener {
            let router = api::router(shared.clone());
            let mut api_stopped = stopped;
            tasks.spawn(async move {
                let shutdown = async move {
                    let _ = api_stopped.wait_for(|stopped| *stopped).await;
                };
                if let Err(error) = axum::serve(listener, router).with_graceful_shutdown(shutdown).await {
                    tracing::error!(%error, "the mon API server stopped");
                }
            });
        }
        tracing::info!(
            mon = %shared.config.mon_id,
            api = %shared.config.api_address,
            cluster_id = %shared.cluster.cluster_id,
            meta = %shared.config.meta_url,
            "mon started"
        );
        Ok(Mon { shared, stop, tasks, api_address })
    }

    /// Lets the API stop and start the OSDs this process runs (`basalt dev`); at most once.
    pub fn serve_local_osds(&self, osds: Arc<dyn LocalOsds>) {
        if self.shared.local_osds.set(osds).is_err() {
            tracing::warn!("local OSDs were already given to this mon; keeping the first");
        }
    }

    /// The address the API listens on.
    pub fn api_address(&self) -> SocketAddr {
        self.api_address.expect("api_address of a mon started without an API")
    }

    pub fn role(&self) -> Role {
        *self.shared.role.borrow()
    }

    /// Follows this mon's role.
    pub fn subscribe_role(&self) -> watch::Receiver<Role> {
        self.shared.role.subscribe()
    }

    /// Stops leading (revoking the lease, so another mon takes over at once) and stops the API,
    /// waiting at most a few seconds for requests in flight.
    pub async fn shutdown(mut self) {
        self.stop.send_replace(true);
        let drained =
            tokio::time::timeout(Duration::from_secs(3), async { while self.tasks.join_next().await.is_some() {} })
                .await;
        if drained.is_err() {
            tracing::warn!(mon = %self.shared.config.mon_id, "mon tasks did not stop within 3 s; aborting them");
            self.tasks.abort_all();
        }
        tracing::info!(mon = %self.shared.config.mon_id, "mon stopped");
    }
}

/// Runs a mon until `shutdown` resolves, then stops it cleanly.
pub async fn run(
    store: Arc<dyn MetaStore>,
    config: MonConfig,
    listener: TcpListener,
    reaper: Option<Arc<dyn VolumeReaper>>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), MonError> {
    let mon = Mon::start(store, config, listener, reaper).await?;
    shutdown.await;
    mon.shutdown().await;
    Ok(())
}
