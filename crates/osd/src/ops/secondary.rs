//! The secondary's ops: what the PG's primary asks of the other members (apply a version it
//! minted, read or list what this member holds). Admission has checked the epoch, membership,
//! the arguments and the lease.

use engine::{AlignedBuffer, EngineError, ObjectId, Request as EngineRequest};
use wire::{ListEntry, Response};

use super::{OpError, Osd};
use cluster::object_pg;

impl Osd {
    pub(super) async fn sec_write(
        &self,
        object: ObjectId,
        version: u64,
        offset_bytes: u32,
        data: &[u8],
    ) -> Result<Response, OpError> {
        // A copy of an object this member lacks (a client's new object, or recovery's and
        // backfill's copies) takes new space: never past the full ratio.
        self.refuse_new_object(object, &[])?;
        let request =
            EngineRequest::WriteVersioned { object, offset_bytes, data: AlignedBuffer::from_slice(data), version };
        self.apply_versioned(object, version, request).await?;
        Ok(Response::SecWrite)
    }

    pub(super) async fn sec_delete(&self, object: ObjectId, version: u64) -> Result<Response, OpError> {
        self.apply_versioned(object, version, EngineRequest::DeleteVersioned { object, version }).await?;
        Ok(Response::SecDelete)
    }

    pub(super) async fn sec_read(
        &self,
        object: ObjectId,
        offset_bytes: u32,
        length_bytes: u32,
    ) -> Result<Response, OpError> {
        if !self.object_exists(object) {
            return Err(OpError::NoSuchObject);
        }
        let (version, data) = self.read(object, offset_bytes, length_bytes).await?;
        Ok(Response::SecRead { version, data })
    }

    /// The PG's objects at or after `start`, in order, at most `count_max`.
    pub(super) fn sec_list(&self, pg: u32, pg_count: u32, start: ObjectId, count_max: u32) -> Response {
        let count_max = count_max.min(wire::limits::LIST_ENTRIES_MAX_COUNT) as usize;
        let entries = self.engine.with(|engine| {
            engine
                .list_objects()
                .into_iter()
                .filter(|(object, _)| *object >= start && object_pg(object.inode, object.stripe, pg_count) == pg)
                .take(count_max)
                .map(|(object, version)| ListEntry { object, version })
                .collect()
        });
        Response::SecList { entries }
    }

    /// Applies the primary's version. Already holding exactly that version means a retried
    /// request: success. Holding a newer one means this member saw a write the primary did not
    /// (an unacknowledged op); the op fails with `Busy` and the client's retry, with a newer
    /// version, goes through.
    async fn apply_versioned(&self, object: ObjectId, version: u64, request: EngineRequest) -> Result<(), OpError> {
        match self.engine.submit(request).await {
            Ok(_) => Ok(()),
            Err(EngineError::StaleVersion { current, .. }) if current == version => Ok(()),
            Err(EngineError::StaleVersion { current, .. }) => {
                tracing::warn!(osd = self.id, %object, version, current, "refusing an older version from the primary");
                Err(OpError::NewerVersionHeld { object, version, current })
            }
            Err(error) => Err(error.into()),
        }
    }
}
