//! `basalt dev`: a whole cluster in one foreground process, for one machine.
//!
//! The embedded metadata store (also served on `--meta-listen`, so `basalt bench` and other
//! processes can join), the mon with its API, N OSDs on files under DIR (each on its own
//! thread, as in production), and the NBD gateway. The first start creates pool `default`
//! and the volumes asked for (`vol0`, 8 GiB, by default); later starts on the same DIR keep
//! everything. SIGINT or SIGTERM stops it cleanly.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use meta::MetaStore;
use mon::stderr_log::{self, Level};
use mon::{CreatePool, CreateVolume, MonConfig};
use tokio::net::TcpListener;

use crate::dev_osds::DevOsds;
use crate::gateway::{Cluster as GatewayCluster, Gateway};
use crate::size::{format_bytes, parse_bytes};
use crate::{device, Global};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where the cluster keeps its files (metadata store and one file per OSD).
    #[arg(long = "data", value_name = "DIR", default_value = "./basalt-data")]
    pub data_dir: PathBuf,
    /// OSDs to run (each on its own file).
    #[arg(long = "osds", value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub osd_count: u32,
    /// Size of each OSD's file on first start (sparse: only the journal and written data take space).
    #[arg(long = "osd-size", value_name = "SIZE", value_parser = parse_bytes, default_value = "10G")]
    pub osd_size_bytes: u64,
    /// NBD listen address; every volume is an export named after it.
    #[arg(long = "nbd", value_name = "HOST:PORT", default_value = "127.0.0.1:10809")]
    pub nbd: String,
    /// Also serve NBD on this unix socket.
    #[arg(long = "unix", value_name = "PATH")]
    pub unix: Option<PathBuf>,
    /// The mon's JSON API address (the CLI's default).
    #[arg(long = "api", value_name = "HOST:PORT", default_value = crate::api_client::API_ADDRESS_DEFAULT)]
    pub api: String,
    /// Where the embedded metadata store is served to other processes (`basalt://HOST:PORT`).
    #[arg(long = "meta-listen", value_name = "HOST:PORT", default_value = "127.0.0.1:2390")]
    pub meta_listen: String,
    /// Volumes to create if missing, NAME=SIZE (default on first start: vol0=8G).
    #[arg(long = "volume", value_name = "NAME=SIZE", value_parser = parse_volume)]
    pub volumes: Vec<(String, u64)>,
    /// Microseconds each OSD polls for work before sleeping (trades CPU for latency).
    #[arg(long = "spin-us", value_name = "MICROSECONDS", default_value_t = 0)]
    pub spin_us: u64,
    /// Connect to the OSDs over TCP only. By default each OSD also serves on a Unix socket in
    /// DIR, which the gateway and the other OSDs use instead.
    #[arg(long = "no-local-sockets")]
    pub no_local_sockets: bool,
    #[command(flatten)]
    pub client: crate::api_client::ClientArgs,
}

fn parse_volume(text: &str) -> Result<(String, u64), String> {
    let (name, size) = text.split_once('=').ok_or_else(|| format!("{text:?}: expected NAME=SIZE"))?;
    Ok((name.to_string(), parse_bytes(size)?))
}

pub fn run(global: Global, args: Args) -> anyhow::Result<()> {
    stderr_log::install(if global.quiet { Level::WARN } else { Level::INFO });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("dev")
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    runtime.block_on(serve(global, args))
}

async fn serve(global: Global, args: Args) -> anyhow::Result<()> {
    let dir = &args.data_dir;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    // The store's lock file keeps a second instance out of DIR.
    let store = meta_embedded::EmbeddedMetaStore::open(dir.join("meta")).await.with_context(|| {
        format!("cannot open the metadata store in {} (is another basalt dev using it?)", dir.display())
    })?;
    let store: Arc<dyn MetaStore> = Arc::new(store);
    let meta_listener = TcpListener::bind(&args.meta_listen)
        .await
        .with_context(|| format!("cannot listen on {} for the metadata store", args.meta_listen))?;
    let meta_url = format!("basalt://{}", meta_listener.local_addr()?);
    tokio::spawn(meta_embedded::serve(store.clone(), meta_listener));
    let first_start = cluster_watch::load(store.as_ref()).await?.pools.is_empty();

    let api_listener =
        TcpListener::bind(&args.api).await.with_context(|| format!("cannot listen on {} for the API", args.api))?;
    let api_address = api_listener.local_addr()?;
    let client = client::Client::with_store(store.clone()).await.context("cannot start the client library")?;
    let reaper: Arc<dyn mon::VolumeReaper> = Arc::new(crate::reaper::ClientReaper::new(client));
    let mut config = MonConfig::new("dev", meta_url.clone());
    // The OSDs below are the only ones: no need to wait for absent ones after a restart.
    config.liveness_grace = Duration::from_secs(2);
    let mon = mon::Mon::start(store.clone(), config, api_listener, Some(reaper)).await.context("the mon failed")?;

    let mut osds = Vec::new();
    for index in 0..args.osd_count {
        let path = dir.join(format!("osd{index}.img"));
        if !path.exists() {
            format_osd(&path, args.osd_size_bytes)?;
            global.say(format_args!("formatted {} ({})", path.display(), format_bytes(args.osd_size_bytes)));
        }
        let mut config = osd::OsdConfig::new(osd::Metadata::Store(store.clone()), &path, "127.0.0.1:0");
        config.host = Some("dev".to_string());
        config.lease_ttl = Duration::from_secs(3);
        config.down_reporter = Some(crate::down_reporter::MonReporter::api(api_address.to_string()));
        config.spin = Duration::from_micros(args.spin_us);
        if !args.no_local_sockets {
            config.local_socket = local_socket_path(&global, dir, index);
        }
        let spawned = config.clone();
        let handle = tokio::task::spawn_blocking(move || osd::spawn(spawned, crate::device::open_osd_drive))
            .await?
            .with_context(|| format!("cannot start the OSD on {}", path.display()))?;
        osds.push((config, handle));
    }
    wait_for_osds(store.as_ref(), osds.iter().map(|(_, handle)| handle.id()).collect()).await?;
    let osd_count = osds.len();
    let osds = Arc::new(DevOsds::new(osds));
    mon.serve_local_osds(osds.clone());

    let mut volumes = args.volumes.clone();
    if first_start {
        let replicas = args.osd_count.min(3);
        let pool = CreatePool {
            name: "default".into(),
            replicas: u64::from(replicas),
            min_size: Some(u64::from(replicas.min(2))),
            pg_count: None,
            failure_domain: "osd".into(),
            tags: Vec::new(),
        };
        mon::admin::create_pool(store.as_ref(), &pool).await.context("cannot create pool default")?;
        if volumes.is_empty() {
            volumes.push(("vol0".to_string(), 8 << 30));
        }
    }
    for (name, size_bytes) in &volumes {
        let request = CreateVolume { name: name.clone(), size_bytes: *size_bytes, pool: Some("default".into()) };
        match mon::admin::create_volume(store.as_ref(), &request).await {
            Ok(_) => global.say(format_args!("created volume {name} ({})", format_bytes(*size_bytes))),
            Err(error) if error.status() == 409 => {}
            Err(error) => return Err(error).with_context(|| format!("cannot create volume {name}")),
        }
    }
    wait_for_pg_tables(store.as_ref()).await?;

    let gateway = {
        let (store, listen, unix) = (store.clone(), args.nbd.clone(), args.unix.clone());
        let options = args.client.options(&api_address.to_string());
        tokio::task::spawn_blocking(move || Gateway::start(GatewayCluster::Store(store), options, listen, unix))
            .await??
    };
    let nbd_address = gateway.address();
    let first_volume = volumes.first().map_or("vol0".to_string(), |(name, _)| name.clone());
    println!(
        "basalt dev ready: nbd://{nbd_address}/{first_volume} api=http://{api_address} meta={meta_url} osds={} data={}",
        osd_count,
        dir.display()
    );

    crate::signals::shutdown_requested().await;
    let started = Instant::now();
    global.say("stopping");
    tokio::task::spawn_blocking(move || gateway.stop()).await?;
    // OSDs stop in parallel: each finishes its ops, revokes its lease and writes its journal back.
    for error in osds.stop_all().await {
        global.say(format_args!("an OSD failed while stopping: {error}"));
    }
    mon.shutdown().await;
    global.say(format_args!("stopped in {:.1} s", started.elapsed().as_secs_f64()));
    Ok(())
}

fn format_osd(path: &Path, size_bytes: u64) -> anyhow::Result<()> {
    let object_size_bytes = u64::from(engine::OBJECT_SIZE_DEFAULT_BYTES);
    device::check_geometry(size_bytes, object_size_bytes, None)?;
    let prepared = device::prepare(path, Some(size_bytes), true)?;
    if let Err(error) = device::format(path, prepared.format_size_bytes, object_size_bytes, None) {
        let _ = std::fs::remove_file(path);
        return Err(error);
    }
    Ok(())
}

async fn wait_for_osds(store: &dyn MetaStore, ids: Vec<u32>) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let map = cluster_watch::load(store).await?;
        if ids.iter().all(|id| map.live.contains_key(id)) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the OSDs did not register within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until every pool has a PG table whose members are all live, so the first I/O does
/// not wait for the mon.
async fn wait_for_pg_tables(store: &dyn MetaStore) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let map = cluster_watch::load(store).await?;
        let ready = map.pools.keys().all(|pool| {
            map.pg_tables.get(pool).is_some_and(|table| {
                table
                    .pgs
                    .iter()
                    .all(|(_, members)| !members.is_empty() && members.iter().all(|m| map.live.contains_key(m)))
            })
        });
        if ready {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the mon did not publish PG tables with live OSDs within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `DIR/osdN.sock`, unless its absolute path is too long for a Unix socket address.
fn local_socket_path(global: &Global, dir: &Path, index: u32) -> Option<PathBuf> {
    /// `sun_path` holds 108 bytes, the last a NUL.
    const SOCKET_PATH_BYTES_MAX: usize = 107;
    let path = std::path::absolute(dir.join(format!("osd{index}.sock"))).ok()?;
    if path.as_os_str().len() > SOCKET_PATH_BYTES_MAX {
        global.say(format_args!("osd{index}: {} is too long for a Unix socket; TCP only", path.display()));
        return None;
    }
    Some(path)
}
