//! The Basalt OSD daemon: one drive's engine on one thread, serving the wire protocol as the
//! primary and as a secondary of PGs, registered and kept alive in the metadata store.
//!
//! One OSD is one thread running a tokio `current_thread` runtime. The engine, the sockets and
//! the metadata client all live on it: a request runs to completion on that thread, disk
//! completions arrive through the drive's readiness (`engine_io.rs`), and nothing is handed to
//! another thread (ADR 0008). [`run`] is the whole daemon on the calling thread; [`spawn`]
//! starts one on a thread of its own, so one process can host several (`basalt dev`, tests).
//! Both take the function that opens the drive ([`OpenDrive`]): this crate knows disks only
//! through the `platform` traits, and the binary opens real ones (io_uring).
//!
//! - `registration.rs`: the OSD id and the `/basalt/osd/<id>` record.
//! - `liveness.rs`: the leased liveness key, renewal, and fencing.
//! - `ops/`: the requests, by role: `admission.rs` (may this OSD serve it: pure), `primary.rs`, `layers.rs` (reads through a chain of snapshots, writes refused to frozen layers), `secondary.rs`, `connection.rs` (Flush order); `locks.rs`: per-object queues; `barrier.rs`: client writes by the map that admitted them, for a snapshot's seal; `sealed.rs`: heads the mon said are sealed before the map does.
//! - `pg/`: the PGs' life apart from requests: `state.rs` (the PGs this OSD leads: peering, inactive, active and who is catching up), `history.rs` (their records in the store), `peering.rs`, `recovery.rs`, `scrub.rs`, `stray.rs`.
//! - `objects_by_pg.rs`: the engine's objects by PG, so a PG's listing walks only its objects.
//! - `peers.rs`: connections to the other members of a PG; `server.rs`: the listener.
//!
//! `docs/design/osd.md` describes the behaviour: ops, epochs, versions, fencing, threading.

mod barrier;
mod config;
mod engine_io;
mod error;
pub mod limits;
mod liveness;
mod locks;
mod objects_by_pg;
mod op_times;
mod ops;
mod pacer;
mod pages;
mod peer_watch;
mod peers;
mod pg;
pub mod planted;
mod registration;
mod sealed;
mod server;
mod usage;

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use cluster::LocalSocket;
use engine::layout::SuperblockError;
use engine::{Engine, OpenError};
use meta::MetaStore;
use net::Listener;
use platform::{Disk, DiskReady};
use tokio::net::TcpListener;

pub use config::{Metadata, OsdConfig, PEER_GRACE_DEFAULT};
pub use error::OsdError;

use crate::engine_io::EngineIo;
use crate::liveness::Liveness;
use crate::ops::Osd;
use crate::peers::Peers;
use crate::registration::Identity;

/// How a running OSD is told to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Stop accepting, finish the ops in flight, revoke the lease (deleting the liveness key),
    /// write the journal back.
    Graceful,
    /// Stop at once, as a crash would: the liveness key stays until its lease expires.
    Abort,
}

/// What a started OSD reports once it serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ready {
    pub osd: u32,
    /// The address published in the liveness key.
    pub address: String,
    /// The lease of this incarnation.
    pub incarnation: i64,
}

/// An opened drive: the disk and when it may have completions.
pub struct Drive {
    pub disk: Box<dyn Disk>,
    pub ready: Box<dyn DiskReady>,
}

/// Opens the drive `config.data_path` names. Called on the OSD's thread, inside its runtime
/// (a readiness may register with the runtime's reactor).
pub type OpenDrive = fn(&OsdConfig) -> Result<Drive, OsdError>;

/// Runs an OSD on the calling thread until `stop` resolves, on the drive `open_drive` opens.
/// `ready` is called once the OSD is registered and serving. `stop` is first polled inside the
/// OSD's runtime before anything else, so it can set up signal handlers there.
pub fn run(
    config: OsdConfig,
    open_drive: OpenDrive,
    ready: impl FnOnce(&Ready),
    stop: impl Future<Output = Stop>,
) -> Result<(), OsdError> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(OsdError::Runtime)?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, daemon(config, open_drive, ready, stop))
}

/// An OSD running on its own thread.
pub struct OsdHandle {
    ready: Ready,
    stop: Option<tokio::sync::oneshot::Sender<Stop>>,
    thread: Option<std::thread::JoinHandle<Result<(), OsdError>>>,
}

/// Starts an OSD on a thread of its own, on the drive `open_drive` opens, and waits until it
/// serves (or fails to start).
pub fn spawn(config: OsdConfig, open_drive: OpenDrive) -> Result<OsdHandle, OsdError> {
    let (ready_sender, ready_receiver) = std::sync::mpsc::channel();
    let (stop_sender, stop_receiver) = tokio::sync::oneshot::channel();
    // Named after the drive (Linux keeps 15 bytes), so per-thread statistics tell OSDs apart.
    let name = config.data_path.file_name().map_or("osd".into(), |name| format!("osd-{}", name.to_string_lossy()));
    let thread = std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            let ready = move |ready: &Ready| {
                let _ = ready_sender.send(ready.clone());
            };
            run(config, open_drive, ready, async move { stop_receiver.await.unwrap_or(Stop::Graceful) })
        })
        .map_err(OsdError::Runtime)?;
    match ready_receiver.recv() {
        Ok(ready) => Ok(OsdHandle { ready, stop: Some(stop_sender), thread: Some(thread) }),
        Err(_) => match thread.join() {
            Ok(Err(error)) => Err(error),
            Ok(Ok(())) => Err(OsdError::Config { reason: "the osd stopped before it was ready".into() }),
            Err(_) => Err(OsdError::Panicked),
        },
    }
}

impl OsdHandle {
    pub fn ready(&self) -> &Ready {
        &self.ready
    }

    pub fn id(&self) -> u32 {
        self.ready.osd
    }

    pub fn address(&self) -> &str {
        &self.ready.address
    }

    /// Stops the OSD (see [`Stop`]) and waits for its thread.
    pub fn stop(mut self, how: Stop) -> Result<(), OsdError> {
        self.finish(how)
    }

    fn finish(&mut self, how: Stop) -> Result<(), OsdError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(how);
        }
        match self.thread.take().map(std::thread::JoinHandle::join) {
            None => Ok(()),
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(OsdError::Panicked),
        }
    }
}

impl Drop for OsdHandle {
    fn drop(&mut self) {
        if let Err(error) = self.finish(Stop::Graceful) {
            tracing::warn!(%error, "the osd failed while stopping");
        }
    }
}

/// What an OSD runs on, opened by its caller: the drive, the sockets and the metadata store.
/// [`run`] opens them with the caller's [`OpenDrive`]; a simulation passes simulated ones (ADR
/// 0020), and everything past this point is the same code.
pub struct OsdEnv {
    /// The drive, as opened: [`serve`] reads its superblock and opens the engine on it.
    pub disk: Box<dyn Disk>,
    /// When the drive may have completions (opened before the engine reads anything).
    pub disk_ready: Box<dyn DiskReady>,
    pub listener: Listener,
    /// The address published for `listener`, where peers and clients reach it.
    pub address: String,
    /// A second listener for processes on this machine (ADR 0013), and what to publish for it.
    pub local: Option<(Listener, LocalSocket)>,
    pub store: Arc<dyn MetaStore>,
}

/// The daemon on its thread: open the drive, the sockets and the store, then serve.
async fn daemon(
    config: OsdConfig,
    open_drive: OpenDrive,
    ready: impl FnOnce(&Ready),
    stop: impl Future<Output = Stop>,
) -> Result<(), OsdError> {
    // Polled once now, so what it sets up (signal handlers) is in place before the OSD reports
    // ready: a SIGTERM right after that must stop it cleanly, not kill it.
    let mut stop = Box::pin(stop);
    let stopped_early = futures_util::FutureExt::now_or_never(stop.as_mut());
    let env = open(&config, open_drive).await?;
    serve(config, env, ready, async move {
        match stopped_early {
            Some(how) => how,
            None => stop.await,
        }
    })
    .await
}

/// Opens the drive, binds the listeners and connects to the metadata store.
async fn open(config: &OsdConfig, open_drive: OpenDrive) -> Result<OsdEnv, OsdError> {
    let Drive { disk, ready } = open_drive(config)?;
    let listener = TcpListener::bind(&config.listen_address)
        .await
        .map_err(|source| OsdError::Listen { address: config.listen_address.clone(), source })?;
    let bound =
        listener.local_addr().map_err(|source| OsdError::Listen { address: config.listen_address.clone(), source })?;
    let address = advertised(config, bound)?;
    let local = match &config.local_socket {
        Some(path) => {
            let (listener, local) = bind_local(path)?;
            Some((Listener::Unix(listener), local))
        }
        None => None,
    };
    let store: Arc<dyn MetaStore> = match &config.metadata {
        Metadata::Store(store) => store.clone(),
        Metadata::Url(url) => {
            cluster_watch::connect(url).await.map_err(OsdError::meta(format!("connecting to {url}")))?
        }
    };
    Ok(OsdEnv { disk, disk_ready: ready, listener: Listener::Tcp(listener), address, local, store })
}

/// Serves as an OSD on `env` until `stop` resolves: registers (taking an id on first start),
/// opens the engine, serves ops, peers and paces its PGs, keeps its lease. `ready` is called
/// once it serves. Runs on the current thread's `LocalSet`.
pub async fn serve(
    config: OsdConfig,
    env: OsdEnv,
    ready: impl FnOnce(&Ready),
    stop: impl Future<Output = Stop>,
) -> Result<(), OsdError> {
    if config.lease_ttl.as_secs() == 0 {
        return Err(OsdError::Config { reason: "the lease TTL must be at least one second".into() });
    }
    let OsdEnv { mut disk, disk_ready, listener, address, local, store } = env;
    let (local_listener, local) = match local {
        Some((listener, local)) => (Some(listener), Some(local)),
        None => (None, None),
    };
    let path = config.data_path.clone();
    let superblock = match Engine::probe(&mut disk) {
        Ok(superblock) => superblock,
        Err(OpenError::Superblock(SuperblockError::NotBasalt)) => return Err(OsdError::NotFormatted { path }),
        Err(source) => return Err(OsdError::OpenEngine { path, source }),
    };
    let geometry = superblock.geometry;
    let mut stop = std::pin::pin!(stop);
    let identity = Identity {
        host: config.host.clone().unwrap_or_else(registration::hostname),
        rack: config.rack.clone().unwrap_or_else(|| "default".into()),
        tags: config.tags.clone(),
        capacity_bytes: u64::from(geometry.block_count) * u64::from(geometry.object_size_bytes),
    };
    // Each step waits for a store it cannot reach (`registration::patiently`), until stopped.
    let registered = async {
        registration::check_cluster(store.as_ref(), &path, geometry.object_size_bytes).await?;
        if superblock.osd_id != 0 {
            let id = u32::try_from(superblock.osd_id)
                .map_err(|_| OsdError::InvalidOsdId { path: path.clone(), osd_id: superblock.osd_id })?;
            registration::patiently(|| registration::ensure_record(store.as_ref(), id, &identity)).await?;
            return Ok(id);
        }
        let id = registration::patiently(|| registration::allocate_id(store.as_ref(), &identity)).await?;
        Engine::set_osd_id(&mut disk, u64::from(id)).map_err(|source| OsdError::SetOsdId {
            path: path.clone(),
            osd: id,
            source,
        })?;
        Ok::<u32, OsdError>(id)
    };
    let id = tokio::select! {
        biased;
        _ = &mut stop => return Ok(()),
        registered = registered => registered?,
    };

    // Replays the journal on this thread: nothing is served yet.
    let engine = Engine::open(disk, &config.engine).map_err(|source| OsdError::OpenEngine { path, source })?;
    let engine = Rc::new(EngineIo::new(engine, disk_ready, config.spin));
    let driver = tokio::task::spawn_local(engine.clone().drive());

    let watcher = registration::patiently(|| async {
        cluster_watch::MapWatcher::start(store.clone()).await.map_err(OsdError::meta("loading the cluster map"))
    })
    .await?;
    let liveness = Rc::new(Liveness::new(
        store.clone(),
        id,
        address.clone(),
        local.clone(),
        config.lease_ttl_s(),
        config.fence_margin(),
    ));
    let osd = Rc::new(Osd::new(
        id,
        engine.clone(),
        liveness.clone(),
        Peers::new(
            config.connect_timeout,
            config.secondary_timeout,
            refusal_reporter(id, &config, watcher.subscribe()),
        ),
        store.clone(),
        watcher.subscribe(),
        config.epoch_wait,
    ));

    // Served from here on, but every op is refused until the registration below succeeds.
    let (stop_accepting, stop_signal) = tokio::sync::oneshot::channel::<()>();
    let accepting = tokio::task::spawn_local(server::accept_until(osd.clone(), listener, local_listener, async move {
        let _ = stop_signal.await;
    }));
    liveness.register().await;
    let keep_alive = tokio::task::spawn_local({
        let liveness = liveness.clone();
        async move { liveness.keep_alive().await }
    });
    // Peers the PGs this OSD leads once it may serve: members answer only a primary whose
    // lease is current.
    let following = tokio::task::spawn_local(osd.clone().follow_map());
    let removing_strays = tokio::task::spawn_local(osd.clone().remove_strays());
    let pacing = tokio::task::spawn_local(osd.clone().pace());
    let scrubbing = tokio::task::spawn_local(osd.clone().scrub_due_pgs());
    let watching_peers = tokio::task::spawn_local(osd.clone().watch_peers(config.peer_grace));
    let incarnation = liveness.lease().map_or(0, |lease| lease.0);
    let local_path = local.as_ref().map(|local| local.path.as_str()).unwrap_or("none");
    tracing::info!(osd = id, %address, local = local_path, incarnation, data = %config.data_path.display(), "osd serving");
    ready(&Ready { osd: id, address: address.clone(), incarnation });

    // A drive that fails a write stops the OSD at once (fail-stop, ADR 0021): its lease is
    // revoked so that its PGs move on without waiting for it to run out.
    let how = tokio::select! {
        how = &mut stop => how,
        reason = engine.failed() => {
            tracing::error!(osd = id, %reason, "the drive failed; stopping");
            following.abort();
            removing_strays.abort();
            pacing.abort();
            scrubbing.abort();
            watching_peers.abort();
            keep_alive.abort();
            let _ = stop_accepting.send(());
            liveness.revoke(config.shutdown_timeout).await;
            osd.peers.close_all();
            driver.abort();
            return Err(OsdError::DriveFailed { path: config.data_path.clone(), reason });
        }
    };
    following.abort();
    removing_strays.abort();
    pacing.abort();
    scrubbing.abort();
    watching_peers.abort();
    if how == Stop::Abort {
        tracing::info!(osd = id, "osd stopping at once");
        return Ok(());
    }
    tracing::info!(osd = id, "osd stopping");
    // One budget for the whole stop, so a stuck step cannot stretch it.
    let deadline = tokio::time::Instant::now() + config.shutdown_timeout;
    let remaining = || deadline.saturating_duration_since(tokio::time::Instant::now());
    let _ = stop_accepting.send(());
    let connections = accepting.await.unwrap_or_default();
    if let Some(local) = &local {
        if let Err(error) = std::fs::remove_file(&local.path) {
            tracing::warn!(path = %local.path, %error, "cannot remove the local socket");
        }
    }
    let left = osd.stop_ops(remaining()).await;
    if left > 0 {
        tracing::warn!(osd = id, ops = left, "ops still in flight at shutdown are abandoned");
    }
    drop(connections);
    keep_alive.abort();
    liveness.revoke(remaining().max(Duration::from_millis(500))).await;
    osd.peers.close_all();
    drop(watcher);
    if !engine.write_back_journal(remaining().max(Duration::from_millis(500))).await {
        tracing::warn!(osd = id, "the journal was not emptied at shutdown; the next start replays it");
    }
    driver.abort();
    let stats = engine.stats();
    tracing::info!(
        osd = id,
        journal_written_bytes = stats.record_bytes_written,
        writeback_jobs = stats.writeback_jobs,
        writeback_pages_copied = stats.writeback_pages_copied,
        writeback_journal_read_bytes = stats.writeback_journal_read_bytes,
        meta_pages_loaded = stats.meta_pages_loaded,
        op_times = %osd.op_times,
        "osd stopped"
    );
    Ok(())
}

/// Binds the local Unix socket at `path` (ADR 0013): see `net::bind_unix` for a socket file
/// that is already there.
fn bind_local(path: &Path) -> Result<(tokio::net::UnixListener, LocalSocket), OsdError> {
    let path = std::path::absolute(path).map_err(|source| local_listen_error(path, source))?;
    let machine = cluster::machine_id()
        .ok_or_else(|| OsdError::Config { reason: "cannot read this machine's boot id for the local socket".into() })?;
    let text = path
        .to_str()
        .ok_or_else(|| OsdError::Config { reason: format!("local socket path {} is not UTF-8", path.display()) })?;
    let listener = net::bind_unix(&path).map_err(|source| match source.kind() {
        // Something is in the way: a configuration problem, named in the message itself.
        std::io::ErrorKind::AddrInUse | std::io::ErrorKind::AlreadyExists => {
            OsdError::Config { reason: format!("local socket {}: {source}", path.display()) }
        }
        _ => local_listen_error(&path, source),
    })?;
    Ok((listener, LocalSocket { machine: machine.to_string(), path: text.to_string() }))
}

fn local_listen_error(path: &Path, source: std::io::Error) -> OsdError {
    OsdError::Listen { address: format!("{}{}", net::UNIX_PREFIX, path.display()), source }
}

/// The address to publish: `--advertise`, or the bound address if it names a specific IP.
fn advertised(config: &OsdConfig, bound: SocketAddr) -> Result<String, OsdError> {
    if let Some(address) = &config.advertise_address {
        return Ok(address.clone());
    }
    if bound.ip().is_unspecified() {
        return Err(OsdError::Config {
            reason: format!(
                "listen address {} does not say where peers reach this OSD; give an advertise address",
                config.listen_address
            ),
        });
    }
    Ok(bound.to_string())
}

/// What the OSD does with a peer whose address refused its connect: tell `config.down_reporter`,
/// once per incarnation, if the map still names that address for the peer.
fn refusal_reporter(
    id: u32,
    config: &OsdConfig,
    map: tokio::sync::watch::Receiver<Arc<cluster::ClusterMap>>,
) -> peers::OnRefused {
    let Some(reporter) = config.down_reporter.clone() else { return Box::new(|_, _| {}) };
    let reported = std::cell::RefCell::new(std::collections::HashSet::new());
    Box::new(move |peer, address| {
        let Some(incarnation) = map.borrow().incarnation_at(peer, address) else { return };
        if reported.borrow_mut().insert((peer, incarnation)) {
            tracing::warn!(
                osd = id,
                peer,
                incarnation,
                address,
                "a peer's address refuses connections: reporting it as down"
            );
            reporter.report(peer, incarnation);
        }
    })
}
