//! The exports of a Basalt cluster: every volume, by name, and every snapshot, read only, as
//! `VOLUME@SNAP`, through the client library.
//!
//! [`ClusterExports`] implements [`Exports`] over a [`client::Client`] and [`VolumeExport`]
//! implements [`Export`] over a [`client::Volume`]. The client library's contract is what the
//! server needs for `NBD_FLAG_CAN_MULTI_CONN`: a write is durable on every replica when it
//! returns, reads go to the OSDs (nothing is cached in the gateway), and `flush` waits for the
//! writes issued before it.
//!
//! Block status asks the client library which objects exist: an object never written (or
//! deleted) is a hole, so clients that honour it skip what reads as zeros. Each earlier
//! snapshot of a volume or snapshot is offered as `qemu:dirty-bitmap:NAME`: the pages that
//! changed since, which the OSDs tell from the layers above `NAME` (incremental backup).

use bytes::Bytes;
use client::{Client, ClientError, Volume};

use crate::export::{Change, Export, ExportError, Exports, Extent};

/// Every volume of the cluster, exported under its name. The empty (default) name is refused.
#[derive(Clone, Debug)]
pub struct ClusterExports {
    client: Client,
}

impl ClusterExports {
    pub fn new(client: Client) -> ClusterExports {
        ClusterExports { client }
    }
}

impl Exports for ClusterExports {
    type Export = VolumeExport;

    async fn open(&self, name: &str) -> Result<Option<VolumeExport>, ExportError> {
        let opened = if cluster::split_snapshot_name(name).is_some() {
            self.client.open_snapshot(name).await
        } else {
            self.client.open_volume(name).await
        };
        match opened {
            Ok(volume) => Ok(Some(VolumeExport { volume })),
            Err(ClientError::NoSuchVolume { .. } | ClientError::NoSuchSnapshot { .. }) => Ok(None),
            Err(error) => Err(export_error(error)),
        }
    }

    async fn list(&self) -> Result<Vec<String>, ExportError> {
        let map = self.client.map();
        let volumes = map.volumes.values().filter(|record| !record.is_deleting()).map(|record| record.name.clone());
        let snapshots = map
            .snapshots
            .values()
            .filter(|record| !record.hidden && !record.deleting)
            .map(cluster::SnapshotRecord::full_name);
        Ok(volumes.chain(snapshots).collect())
    }
}

/// One volume as an export.
#[derive(Clone)]
pub struct VolumeExport {
    volume: Volume,
}

impl VolumeExport {
    pub fn new(volume: Volume) -> VolumeExport {
        VolumeExport { volume }
    }
}

impl Export for VolumeExport {
    fn name(&self) -> &str {
        self.volume.name()
    }

    fn description(&self) -> String {
        let what = if self.volume.is_read_only() { "snapshot" } else { "volume" };
        format!("basalt {what} {} (inode {:#x})", self.volume.name(), self.volume.id())
    }

    fn read_only(&self) -> bool {
        self.volume.is_read_only()
    }

    fn size_bytes(&self) -> u64 {
        self.volume.size_bytes()
    }

    async fn read(&self, offset_bytes: u64, length_bytes: u32) -> Result<Bytes, ExportError> {
        self.volume.read(offset_bytes, length_bytes).await.map_err(export_error)
    }

    async fn write(&self, offset_bytes: u64, data: Bytes) -> Result<(), ExportError> {
        self.volume.write(offset_bytes, data).await.map_err(export_error)
    }

    async fn write_zeroes(&self, offset_bytes: u64, length_bytes: u64) -> Result<(), ExportError> {
        self.volume.write_zeroes(offset_bytes, length_bytes).await.map_err(export_error)
    }

    async fn trim(&self, offset_bytes: u64, length_bytes: u64) -> Result<(), ExportError> {
        self.volume.trim(offset_bytes, length_bytes).await.map_err(export_error)
    }

    async fn flush(&self) -> Result<(), ExportError> {
        self.volume.flush().await.map_err(export_error)
    }

    /// The snapshots below this export's layer: its volume's as `SNAP`, those of the volume a
    /// clone was made from as `VOLUME@SNAP`.
    fn bitmaps(&self) -> Vec<String> {
        let name = self.volume.name();
        let volume = cluster::split_snapshot_name(name).map_or(name, |(volume, _)| volume);
        let bitmap = |record: cluster::SnapshotRecord| {
            if record.volume == volume {
                record.name
            } else {
                record.full_name()
            }
        };
        self.volume.earlier_snapshots().into_iter().map(bitmap).collect()
    }

    /// Pages changed since snapshot `bitmap`; the answer may cover only a prefix of a long range.
    async fn changes(&self, bitmap: &str, offset_bytes: u64, length_bytes: u64) -> Result<Vec<Change>, ExportError> {
        let runs = self.volume.changes(bitmap, offset_bytes, length_bytes).await.map_err(export_error)?;
        Ok(runs.into_iter().map(|(length_bytes, changed)| Change { length_bytes, changed }).collect())
    }

    /// Objects that do not exist are holes (they read as zeros); the answer may cover only a
    /// prefix of a long range (the client library asks about a bounded number of objects).
    async fn block_status(&self, offset_bytes: u64, length_bytes: u64) -> Result<Vec<Extent>, ExportError> {
        let runs = self.volume.allocation(offset_bytes, length_bytes).await.map_err(export_error)?;
        Ok(runs.into_iter().map(|(length_bytes, allocated)| Extent { length_bytes, hole: !allocated }).collect())
    }
}

/// What an NBD client sees of a client library error.
fn export_error(error: ClientError) -> ExportError {
    let message = error.to_string();
    match error {
        ClientError::NoSpace { .. } => ExportError::NoSpace(message),
        ClientError::ReadOnly { .. } => ExportError::ReadOnly(message),
        // The server checks ranges against the size it advertised; these mean the volume
        // shrank or went away under the connection.
        ClientError::OutOfRange { .. }
        | ClientError::InvalidArgument { .. }
        | ClientError::NotEarlier { .. }
        | ClientError::NoSuchVolume { .. }
        | ClientError::NoSuchSnapshot { .. }
        | ClientError::InvalidVolume { .. } => ExportError::Invalid(message),
        ClientError::Meta(_)
        | ClientError::Unavailable { .. }
        | ClientError::Corrupt { .. }
        | ClientError::Io { .. }
        | ClientError::Refused { .. }
        | ClientError::BadReply { .. } => ExportError::Io(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{EINVAL, EIO, ENOSPC};

    /// Maps `error` and checks the NBD error value and that the message names the volume.
    fn check(error: ClientError, errno: u32) {
        let mapped = export_error(error);
        assert_eq!(mapped.errno(), errno);
        assert!(mapped.to_string().contains("vol"), "{mapped}");
    }

    #[test]
    fn client_errors_map_to_nbd_errors() {
        let pg = wire::PgId { pool: 1, pg: 2 };
        let operation = client::Operation::Write;
        check(ClientError::NoSpace { volume: "vol".into(), operation, offset_bytes: 0, pg, osd: 3 }, ENOSPC);
        check(ClientError::Io { volume: "vol".into(), operation, offset_bytes: 0, pg, osd: 3 }, EIO);
        check(ClientError::Corrupt { volume: "vol".into(), operation, offset_bytes: 0, pg, osd: 3 }, EIO);
        check(
            ClientError::Unavailable {
                volume: "vol".into(),
                operation,
                offset_bytes: 0,
                pg,
                waited_ms: 30_000,
                problem: "no primary".into(),
            },
            EIO,
        );
        check(
            ClientError::OutOfRange {
                volume: "vol".into(),
                operation,
                offset_bytes: 0,
                length_bytes: 4096,
                size_bytes: 0,
            },
            EINVAL,
        );
        check(ClientError::NoSuchVolume { name: "vol".into() }, EINVAL);
    }
}
