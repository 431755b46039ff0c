//! `basalt osd --etcd URL --data PATH --listen ADDR`: runs the OSD daemon on one drive until
//! SIGINT or SIGTERM, then stops cleanly (ops finish, the liveness key goes, the journal is
//! written back).
//!
//! The drive must have been formatted by `basalt osd init`. The first start allocates the OSD's
//! id and records it in the drive's superblock; later starts keep it.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use mon::stderr_log::{self, Level};
use osd::{Metadata, OsdConfig, Stop};

use crate::Global;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The metadata store: http://HOST:PORT[,...] (etcd) or basalt://HOST:PORT (a store served
    /// by `basalt mon --embedded`).
    #[arg(long = "etcd", visible_alias = "meta", value_name = "URL", required = true)]
    pub meta_url: Option<String>,
    /// The drive: a file or block device formatted by `basalt osd init`.
    #[arg(long = "data", value_name = "PATH", required = true)]
    pub data_path: Option<PathBuf>,
    /// Where to serve clients and peers (HOST:PORT).
    #[arg(long = "listen", value_name = "ADDR", required = true)]
    pub listen: Option<String>,
    /// The address others use to reach this OSD [default: the listen address].
    #[arg(long = "advertise", value_name = "ADDR")]
    pub advertise: Option<String>,
    /// Also serve on this Unix socket: clients and OSDs on this machine use it instead of TCP.
    #[arg(long = "local-socket", value_name = "PATH")]
    pub local_socket: Option<PathBuf>,
    /// The host in the OSD's placement record [default: the host name].
    #[arg(long = "host", value_name = "NAME")]
    pub host: Option<String>,
    /// The rack in the OSD's placement record [default: default].
    #[arg(long = "rack", value_name = "NAME")]
    pub rack: Option<String>,
    /// Placement tags, comma-separated (ssd, hdd, ...).
    #[arg(long = "tags", value_name = "TAG,...", value_delimiter = ',')]
    pub tags: Vec<String>,
    /// TTL of the liveness lease, in seconds.
    #[arg(long = "lease-ttl", value_name = "SECONDS", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub lease_ttl_s: u64,
    /// Milliseconds a peer sharing PGs with this OSD may leave it without an answer before it is
    /// reported to the mon, which marks one end of a cut link down (ADR 0015).
    #[arg(long = "peer-grace-ms", value_name = "MILLISECONDS", default_value_t = osd::PEER_GRACE_DEFAULT.as_millis() as u64, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub peer_grace_ms: u64,
    /// Microseconds to keep polling for work before sleeping while ops are in flight (0: off).
    /// Lowers latency at the cost of CPU; keep it small on machines with few cores.
    #[arg(long = "spin-us", value_name = "MICROSECONDS", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub spin_us: u64,
}

pub fn run(global: Global, args: Args) -> anyhow::Result<()> {
    stderr_log::install(if global.quiet { Level::WARN } else { Level::INFO });
    let (Some(meta_url), Some(data_path), Some(listen)) = (args.meta_url, args.data_path, args.listen) else {
        anyhow::bail!("basalt osd needs --etcd URL, --data PATH and --listen ADDR");
    };
    // Peers whose address refuses this OSD are reported to the mon that leads (ADR 0015).
    let reporter = crate::down_reporter::MonReporter::leader(meta_url.clone());
    let mut config = OsdConfig::new(Metadata::Url(meta_url), data_path, listen);
    config.down_reporter = Some(reporter);
    config.advertise_address = args.advertise;
    config.local_socket = args.local_socket;
    config.host = args.host;
    config.rack = args.rack;
    config.tags = args.tags.into_iter().map(|tag| tag.trim().to_string()).filter(|tag| !tag.is_empty()).collect();
    config.lease_ttl = Duration::from_secs(args.lease_ttl_s);
    config.peer_grace = Duration::from_millis(args.peer_grace_ms);
    config.spin = Duration::from_micros(args.spin_us);
    let data = config.data_path.display().to_string();
    let ready = |ready: &osd::Ready| {
        println!("osd.{} serving on {} (incarnation {})", ready.osd, ready.address, ready.incarnation);
    };
    osd::run(config, crate::device::open_osd_drive, ready, async {
        crate::signals::shutdown_requested().await;
        Stop::Graceful
    })
    .with_context(|| format!("the osd on {data} failed"))
}
