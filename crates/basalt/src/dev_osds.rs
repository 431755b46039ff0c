//! `basalt dev`'s OSDs, which the mon's API stops and starts (`mon::LocalOsds`): each keeps its
//! configuration, so a stopped one starts again on the same drive.

use async_trait::async_trait;
use mon::{LocalOsdError, LocalOsds, StopMode};

/// One OSD of this process.
struct Slot {
    id: u32,
    config: osd::OsdConfig,
    running: Option<osd::OsdHandle>,
}

/// The OSDs of `basalt dev`.
pub struct DevOsds {
    slots: tokio::sync::Mutex<Vec<Slot>>,
}

impl DevOsds {
    /// The OSDs started from these configurations.
    pub fn new(started: Vec<(osd::OsdConfig, osd::OsdHandle)>) -> DevOsds {
        let slots = started
            .into_iter()
            .map(|(config, handle)| Slot { id: handle.id(), config, running: Some(handle) })
            .collect();
        DevOsds { slots: tokio::sync::Mutex::new(slots) }
    }

    /// Stops every running OSD, all at once, gracefully; returns the errors.
    pub async fn stop_all(&self) -> Vec<osd::OsdError> {
        let handles: Vec<osd::OsdHandle> =
            self.slots.lock().await.iter_mut().filter_map(|slot| slot.running.take()).collect();
        let stopping: Vec<_> = handles
            .into_iter()
            .map(|handle| tokio::task::spawn_blocking(move || handle.stop(osd::Stop::Graceful)))
            .collect();
        let mut errors = Vec::new();
        for stop in stopping {
            match stop.await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => errors.push(error),
                Err(_) => errors.push(osd::OsdError::Panicked),
            }
        }
        errors
    }
}

#[async_trait]
impl LocalOsds for DevOsds {
    async fn stop(&self, osd: u32, mode: StopMode) -> Result<(), LocalOsdError> {
        let mut slots = self.slots.lock().await;
        let slot = slots.iter_mut().find(|slot| slot.id == osd).ok_or(LocalOsdError::Unknown(osd))?;
        let handle = slot.running.take().ok_or(LocalOsdError::AlreadyStopped(osd))?;
        let how = match mode {
            StopMode::Graceful => osd::Stop::Graceful,
            StopMode::Crash => osd::Stop::Abort,
        };
        tracing::info!(osd, ?mode, "stopping an OSD on request");
        let stopped = tokio::task::spawn_blocking(move || handle.stop(how)).await;
        match stopped {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(LocalOsdError::Failed { osd, reason: error.to_string() }),
            Err(_) => Err(LocalOsdError::Failed { osd, reason: "the osd panicked while stopping".into() }),
        }
    }

    async fn start(&self, osd: u32) -> Result<(), LocalOsdError> {
        let mut slots = self.slots.lock().await;
        let slot = slots.iter_mut().find(|slot| slot.id == osd).ok_or(LocalOsdError::Unknown(osd))?;
        if slot.running.is_some() {
            return Err(LocalOsdError::AlreadyRunning(osd));
        }
        let config = slot.config.clone();
        tracing::info!(osd, "starting an OSD on request");
        let started = tokio::task::spawn_blocking(move || osd::spawn(config, crate::device::open_osd_drive)).await;
        match started {
            Ok(Ok(handle)) => {
                slot.running = Some(handle);
                Ok(())
            }
            Ok(Err(error)) => Err(LocalOsdError::Failed { osd, reason: error.to_string() }),
            Err(_) => Err(LocalOsdError::Failed { osd, reason: "the osd panicked while starting".into() }),
        }
    }
}
