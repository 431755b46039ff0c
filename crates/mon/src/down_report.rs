//! Fast failure detection (ADR 0015, `docs/design/peering.md`): a party that saw an OSD's
//! connection reset and its reconnect refused reports the OSD and the incarnation it knew. The
//! mon connects to the OSD's published address itself, and only if that is refused too does it
//! revoke the OSD's lease, so the liveness key goes at once instead of after the TTL.
//!
//! A refused connect proves no process listens there; a timeout, a reset or silence proves
//! nothing (a hung or cut-off OSD), and such an OSD is left to its lease, which it fences itself
//! by. A report about an older incarnation changes nothing: the OSD has restarted since.

use std::io::ErrorKind;
use std::time::Duration;

use cluster::records::decode;
use cluster::{keys, OsdLiveRecord};
use meta::{LeaseId, MetaError, MetaStore};
use serde::Deserialize;

use crate::views::DownReportView;

/// How long the mon's own connect may take; no answer within it proves nothing.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// `POST /osds/{id}/down-report`'s body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DownReport {
    /// The incarnation the reporter last knew (the liveness record's).
    pub incarnation: i64,
}

/// What the mon's own connect to an OSD's address found.
#[derive(Debug)]
enum Probe {
    /// Nothing listens there: the process is gone.
    Refused(String),
    Accepted,
    /// No answer, or an error that proves nothing.
    Inconclusive(String),
}

async fn probe(address: &str) -> Probe {
    match tokio::time::timeout(PROBE_TIMEOUT, net::Stream::connect(address)).await {
        Ok(Ok(_)) => Probe::Accepted,
        Ok(Err(error)) if error.kind() == ErrorKind::ConnectionRefused => Probe::Refused(error.to_string()),
        Ok(Err(error)) => Probe::Inconclusive(error.to_string()),
        Err(_) => Probe::Inconclusive(format!("no answer within {PROBE_TIMEOUT:?}")),
    }
}

/// Checks a report about `osd` and revokes its lease if the mon finds it gone too.
pub async fn handle(
    store: &dyn MetaStore,
    fast_down: bool,
    osd: u32,
    report: DownReport,
) -> Result<DownReportView, MetaError> {
    let answer = |down: bool, revoked: bool, reason: String| DownReportView { osd, down, revoked, reason };
    let key = keys::osd_live(osd);
    let Some(kv) = store.get(&key).await? else {
        return Ok(answer(true, false, format!("osd.{osd} has no liveness key: it is already down")));
    };
    let live: OsdLiveRecord = decode(&key, &kv.value).map_err(|error| MetaError::other(&key, error.to_string()))?;
    if live.incarnation != report.incarnation {
        let reason = format!(
            "osd.{osd} runs incarnation {}, the report is about incarnation {}: it restarted since",
            live.incarnation, report.incarnation
        );
        return Ok(answer(false, false, reason));
    }
    if !fast_down {
        let reason = "fast down detection is off on this mon (--fast-down=off): the OSD's lease decides".to_string();
        return Ok(answer(false, false, reason));
    }
    match probe(&live.address).await {
        Probe::Refused(error) => {
            match store.lease_revoke(LeaseId(live.incarnation)).await {
                Ok(()) | Err(MetaError::LeaseExpired { .. }) => {}
                Err(error) => return Err(error),
            }
            tracing::warn!(osd, incarnation = live.incarnation, address = %live.address, "declared down: its address refuses connections; lease revoked");
            Ok(answer(
                true,
                true,
                format!("{} refuses connections ({error}): the lease of osd.{osd} is revoked", live.address),
            ))
        }
        Probe::Accepted => Ok(answer(false, false, format!("osd.{osd} accepts connections at {}", live.address))),
        Probe::Inconclusive(why) => Ok(answer(
            false,
            false,
            format!("{} gave no proof that osd.{osd} is gone ({why}): its lease decides", live.address),
        )),
    }
}
