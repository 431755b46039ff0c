//! Removes the objects of deleted volumes through the client library, for the mon's leader.

use async_trait::async_trait;
use cluster::{SnapshotRecord, VolumeRecord};
use mon::reaper::VolumeReaper;

/// Objects trimmed per call: each call runs its pieces concurrently, so this bounds the
/// requests in flight.
const OBJECTS_PER_CALL: u64 = 64;

pub struct ClientReaper {
    client: client::Client,
}

impl ClientReaper {
    pub fn new(client: client::Client) -> ClientReaper {
        ClientReaper { client }
    }
}

#[async_trait]
impl VolumeReaper for ClientReaper {
    async fn remove_objects(
        &self,
        volume: &VolumeRecord,
        progress: &(dyn Fn(u64, u64) + Send + Sync),
    ) -> Result<(), String> {
        let handle = self.client.open_volume_for_removal(&volume.name).await.map_err(|e| e.to_string())?;
        trim_all(&handle, progress).await
    }

    async fn remove_snapshot_objects(&self, snapshot: &SnapshotRecord) -> Result<(), String> {
        let handle = self.client.open_snapshot_for_removal(snapshot).map_err(|e| e.to_string())?;
        trim_all(&handle, &|_, _| {}).await
    }
}

/// Trims every object of `handle`, `OBJECTS_PER_CALL` at a time.
async fn trim_all(handle: &client::Volume, progress: &(dyn Fn(u64, u64) + Send + Sync)) -> Result<(), String> {
    let (size_bytes, object_bytes) = (handle.size_bytes(), u64::from(handle.object_size_bytes()));
    let total = size_bytes.div_ceil(object_bytes);
    let mut done = 0;
    progress(done, total);
    while done < total {
        let count = OBJECTS_PER_CALL.min(total - done);
        let offset = done * object_bytes;
        let length = (count * object_bytes).min(size_bytes - offset);
        handle.trim(offset, length).await.map_err(|e| format!("trimming objects {done}..{}: {e}", done + count))?;
        done += count;
        progress(done, total);
    }
    Ok(())
}
