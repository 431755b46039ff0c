//! Records for the unit tests' cluster maps, built one way for every module.

use cluster::{OsdLiveRecord, OsdRecord};

/// A registered OSD of 1 GiB on `host` in `rack`, in, never marked.
pub(crate) fn osd(id: u32, host: &str, rack: &str) -> OsdRecord {
    OsdRecord {
        version: 1,
        id,
        host: host.into(),
        rack: rack.into(),
        tags: Default::default(),
        weight: 1.0,
        capacity_bytes: 1 << 30,
        out: false,
        auto_out: false,
        down_mark: None,
    }
}

/// The liveness record of OSD `id` running at `incarnation` with a 3 s lease.
pub(crate) fn live(id: u32, incarnation: i64) -> OsdLiveRecord {
    OsdLiveRecord { version: 1, address: format!("127.0.0.1:{id}"), incarnation, local: None, lease_ttl_s: 3 }
}
