//! OSDs that run in the mon's own process (`basalt dev`), which the API can stop and start so
//! that failover and catch-up can be tried on one machine (`POST /osds/{id}/stop`, `/start`).
//! A mon of a real cluster has none and says so.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// How an OSD is stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StopMode {
    /// Finish the ops in flight, revoke the lease, write the journal back.
    #[default]
    Graceful,
    /// At once, as a crash: the liveness key stays until it is reported or its lease expires.
    Crash,
}

/// The body of `POST /osds/{id}/stop` (it may be empty).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StopRequest {
    #[serde(default)]
    pub mode: StopMode,
}

/// Why an OSD could not be stopped or started.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LocalOsdError {
    #[error("osd.{0} does not run in this process")]
    Unknown(u32),
    #[error("osd.{0} is already stopped")]
    AlreadyStopped(u32),
    #[error("osd.{0} is already running")]
    AlreadyRunning(u32),
    #[error("osd.{osd}: {reason}")]
    Failed { osd: u32, reason: String },
}

/// The OSDs of this process.
#[async_trait]
pub trait LocalOsds: Send + Sync {
    async fn stop(&self, osd: u32, mode: StopMode) -> Result<(), LocalOsdError>;
    async fn start(&self, osd: u32) -> Result<(), LocalOsdError>;
}
