//! The secondary's ops: what the PG's primary asks of the other members (apply a version it
//! minted, read or list what this member holds). Admission has checked the epoch, membership,
//! the arguments and the lease.

use engine::{AlignedBuffer, EngineError, ObjectId, Request as EngineRequest, PAGE_SIZE_BYTES};
use wire::{ListEntry, PgId, Response};

use super::{OpError, Osd};
use crate::pages::scatter;

impl Osd {
    pub(crate) async fn sec_write(
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

    /// Brings `object` from `base_version` to `version` with the pages that changed in between
    /// (catch-up, `recovery.rs`). One run of pages is written as it comes; scattered pages are
    /// laid over this member's copy and the object replaced whole, holding the pages the copy
    /// held and those sent, so the new version appears at once or not at all.
    pub(crate) async fn sec_write_pages(
        &self,
        object: ObjectId,
        base_version: u64,
        version: u64,
        page_mask: u64,
        data: &[u8],
    ) -> Result<Response, OpError> {
        let _object = self.locks.write(object).await;
        let held = self.engine.with(|engine| engine.object_exists(object).then(|| engine.object_version(object)));
        let held = held.flatten();
        if held == Some(version) {
            // A retried request.
            return Ok(Response::SecWritePages);
        }
        let absent = base_version == wire::ABSENT_VERSION;
        if held != (!absent).then_some(base_version) {
            stdx::coverage::mark("secondary: pages refused, the base version not held");
            let reason = held.map_or("it holds none".to_string(), |held| format!("it holds version {held:#x}"));
            return Err(OpError::BaseNotHeld { object, base_version, reason });
        }
        if absent {
            self.refuse_new_object(object, &[])?;
        }
        let first = page_mask.trailing_zeros();
        let run = page_mask >> first;
        let request = if run & run.wrapping_add(1) == 0 {
            let data = AlignedBuffer::from_slice(data);
            EngineRequest::WriteVersioned { object, offset_bytes: first * PAGE_SIZE_BYTES, data, version }
        } else if absent {
            let data = scatter(AlignedBuffer::zeroed(self.object_size_bytes as usize), page_mask, data);
            EngineRequest::ReplaceVersioned { object, data, present: page_mask, version }
        } else {
            // A copy that cannot be read is no base to build on: the primary sends it whole.
            let copy = match self.read(object, 0, self.object_size_bytes).await {
                Ok(copy) => copy,
                Err(error) if crate::pg::scrub::unreadable(&error) => {
                    return Err(OpError::BaseNotHeld { object, base_version, reason: error.to_string() })
                }
                Err(error) => return Err(error),
            };
            if copy.version != base_version {
                // A write of a newer primary landed meanwhile.
                let reason = format!("it holds version {:#x} now", copy.version);
                return Err(OpError::BaseNotHeld { object, base_version, reason });
            }
            stdx::coverage::mark("secondary: scattered pages laid over the held copy");
            let data = scatter(AlignedBuffer::from_slice(&copy.data), page_mask, data);
            EngineRequest::ReplaceVersioned { object, data, present: copy.present | page_mask, version }
        };
        self.apply_versioned(object, version, request).await?;
        Ok(Response::SecWritePages)
    }

    /// Replaces this member's copy of `object`, whatever it holds, with `version`, of which
    /// only the pages of `page_mask` hold data (`data` has them in order): a whole copy from
    /// recovery, backfill or a repair, keeping which pages the object holds.
    pub(crate) async fn sec_replace(
        &self,
        object: ObjectId,
        version: u64,
        page_mask: u64,
        data: &[u8],
    ) -> Result<Response, OpError> {
        // A copy of an object this member lacks takes new space: never past the full ratio.
        self.refuse_new_object(object, &[])?;
        let data = scatter(AlignedBuffer::zeroed(self.object_size_bytes as usize), page_mask, data);
        let request = EngineRequest::ReplaceVersioned { object, data, present: page_mask, version };
        self.apply_versioned(object, version, request).await?;
        Ok(Response::SecReplace)
    }

    pub(crate) async fn sec_delete(&self, object: ObjectId, version: u64) -> Result<Response, OpError> {
        self.apply_versioned(object, version, EngineRequest::DeleteVersioned { object, version }).await?;
        Ok(Response::SecDelete)
    }

    pub(crate) async fn sec_read(
        &self,
        object: ObjectId,
        offset_bytes: u32,
        length_bytes: u32,
    ) -> Result<Response, OpError> {
        if !self.object_exists(object) {
            return Err(OpError::NoSuchObject);
        }
        let read = self.read(object, offset_bytes, length_bytes).await?;
        Ok(Response::SecRead { version: read.version, present: read.present, data: read.data })
    }

    /// The PG's objects at or after `start`, in order, at most `count_max`.
    pub(crate) async fn sec_list(&self, pg: PgId, pg_count: u32, start: ObjectId, count_max: u32) -> Response {
        let count_max = count_max.min(wire::limits::LIST_ENTRIES_MAX_COUNT) as usize;
        let _gate = self.stray_gate.lock().await;
        let entries = self.engine.list_pg(pg, pg_count, start, count_max);
        Response::SecList {
            entries: entries.into_iter().map(|(object, version)| ListEntry { object, version }).collect(),
        }
    }

    /// Applies the primary's version. Already holding exactly that version, from the same kind
    /// of op (a write, or a delete), means a retried request: success. Holding a newer one, or
    /// the other kind at that version (a primary that minted again a version it had forgotten),
    /// means this member saw an op the primary did not count on; the op fails with
    /// `NewerVersion` and the client's retry, with a newer version, goes through.
    async fn apply_versioned(&self, object: ObjectId, version: u64, request: EngineRequest) -> Result<(), OpError> {
        let deleting = matches!(request, EngineRequest::DeleteVersioned { .. });
        match self.engine.submit(request).await {
            Ok(_) => Ok(()),
            Err(EngineError::StaleVersion { current, .. })
                if current == version && self.object_exists(object) != deleting =>
            {
                Ok(())
            }
            Err(EngineError::StaleVersion { current, .. }) if current == version => {
                tracing::warn!(osd = self.id, %object, version, deleting, "refusing an op at a version held by the other kind of op");
                Err(OpError::NewerVersionHeld { object, version, current })
            }
            Err(EngineError::StaleVersion { current, .. }) => {
                stdx::coverage::mark("secondary: an older version refused");
                tracing::warn!(osd = self.id, %object, version, current, "refusing an older version from the primary");
                Err(OpError::NewerVersionHeld { object, version, current })
            }
            Err(error) => Err(error.into()),
        }
    }
}
