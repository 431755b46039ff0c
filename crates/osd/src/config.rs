//! What an OSD is started with: the drive, the metadata store, the addresses, its placement
//! attributes and the timing knobs, with the defaults `basalt osd` uses.

use std::collections::BTreeSet;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use meta::MetaStore;

/// Where the metadata store is.
#[derive(Clone)]
pub enum Metadata {
    /// A URL for `cluster::connect` (`http://...` for etcd, `basalt://...` for an embedded store
    /// served by a mon); the OSD connects from its own thread.
    Url(String),
    /// A store already open in this process (`basalt dev`, tests). Its background tasks must run
    /// on a runtime that outlives the OSD.
    Store(Arc<dyn MetaStore>),
}

impl fmt::Debug for Metadata {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Metadata::Url(url) => write!(f, "Url({url:?})"),
            Metadata::Store(store) => write!(f, "Store({:?})", store.endpoint()),
        }
    }
}

/// The default [`OsdConfig::peer_grace`]: a cut link is reported within it plus a probe interval,
/// and marked down half a second later, well inside the 5 s a write may wait.
pub const PEER_GRACE_DEFAULT: Duration = Duration::from_millis(1500);

#[derive(Debug, Clone)]
pub struct OsdConfig {
    pub metadata: Metadata,
    /// The engine's file or block device, formatted by `basalt osd init`.
    pub data_path: PathBuf,
    /// `host:port` to listen on; port 0 picks a free port.
    pub listen_address: String,
    /// The address peers and clients use, published in the liveness key. Defaults to the bound
    /// listen address, which must then name a specific IP.
    pub advertise_address: Option<String>,
    /// A Unix socket to serve on as well, for clients and peers on this machine (ADR 0013):
    /// its path is published with the liveness key. `None`: TCP only.
    pub local_socket: Option<PathBuf>,
    /// Defaults to the machine's hostname.
    pub host: Option<String>,
    /// Defaults to `default`.
    pub rack: Option<String>,
    pub tags: BTreeSet<String>,
    /// Lease TTL of the liveness key, whole seconds (at least one).
    pub lease_ttl: Duration,
    /// How long the OSD polls for more work before parking its thread while ops are in flight
    /// (zero: never spin).
    pub spin: Duration,
    /// How long an op carrying a newer PG epoch than this OSD's waits for the map to catch up.
    pub epoch_wait: Duration,
    /// How long a primary waits for a secondary's reply before failing the op with `Busy`.
    pub secondary_timeout: Duration,
    /// How long a primary waits to connect to a secondary.
    pub connect_timeout: Duration,
    /// How long a peer this OSD shares PGs with may leave it without an answer before it reports
    /// the peer to the mon (twice that for an op waiting on a peer that answers pings; ADR 0015).
    pub peer_grace: Duration,
    /// How long a clean shutdown waits for ops in flight, and then for the journal's write-back.
    pub shutdown_timeout: Duration,
    /// Requests the drive may have in flight at once (for a real drive, its io_uring's
    /// submission entries; `OpenDrive` reads it).
    pub queue_depth: u32,
    pub engine: engine::EngineOptions,
    /// Who hears of peers whose address refuses this OSD's connect (ADR 0015); `None`: no one.
    pub down_reporter: Option<std::sync::Arc<dyn net::DownReporter>>,
}

impl OsdConfig {
    /// A configuration with the defaults of `basalt osd`.
    pub fn new(metadata: Metadata, data_path: impl Into<PathBuf>, listen_address: impl Into<String>) -> OsdConfig {
        OsdConfig {
            metadata,
            data_path: data_path.into(),
            listen_address: listen_address.into(),
            advertise_address: None,
            local_socket: None,
            host: None,
            rack: None,
            tags: BTreeSet::new(),
            lease_ttl: Duration::from_secs(3),
            spin: Duration::ZERO,
            epoch_wait: Duration::from_millis(1500),
            secondary_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
            peer_grace: PEER_GRACE_DEFAULT,
            shutdown_timeout: Duration::from_secs(3),
            queue_depth: 256,
            engine: engine::EngineOptions::default(),
            down_reporter: None,
        }
    }

    /// The lease TTL in the store's unit, whole seconds.
    pub(crate) fn lease_ttl_s(&self) -> u64 {
        self.lease_ttl.as_secs().max(1)
    }

    /// How early the OSD stops acknowledging writes before its lease could expire: a fifth of
    /// the TTL, for scheduling delays and clock rate differences between OSD and store.
    pub(crate) fn fence_margin(&self) -> Duration {
        Duration::from_secs(self.lease_ttl_s()) / 5
    }
}
