//! Flatten at the primary (ADR 0035): a volume's head filled, object by object, with every page
//! the layers below it show and it does not hold, so that it can lose its parent.
//!
//! The mon walks each PG with `Flatten` ops from a cursor over the family's objects there; a
//! stripe held by any layer below the head is copied up. A copy-up reads what the head and the
//! layers below show (as a client's read would), then, under the head object's write queue and
//! only if no write changed it meanwhile, replaces the head object by that content with the
//! pages it now holds, through the same replication as a client's write: every member takes
//! it, and a client write before or after lands whole. Content never changes, so a copy-up
//! repeated after a failover or by another leader does nothing more than fill what is left.

use std::collections::BTreeSet;
use std::rc::Rc;

use bytes::Bytes;
use cluster::inode;
use engine::ObjectId;
use futures_util::stream::{self, StreamExt};
use wire::{PgId, Response};

use super::primary::Mutation;
use super::{ObjectRead, OpError, Osd};
use crate::pacer::Priority;
use crate::pg::state::Pg;

impl Osd {
    /// One Flatten op: the objects of head `inode`'s family in PG `pg` from `start` on, at most
    /// `count_max` listed, each stripe that a layer below the head holds filled in the head.
    pub(crate) async fn primary_flatten(
        self: &Rc<Self>,
        pg: PgId,
        epoch: u64,
        head: u64,
        start: ObjectId,
        count_max: u32,
    ) -> Result<Response, OpError> {
        let state = self.pgs.active(pg, epoch, self.peering_wait).await?;
        self.ensure_recorded(&state).await?;
        let map = self.map.borrow().clone();
        let layer = map.layer(head).ok_or(OpError::LayerUnknown { inode: head })?;
        if layer.frozen {
            return Err(OpError::InvalidArgument(format!("layer {head:#x} is a snapshot's, not a volume's head")));
        }
        if !layer.flattening {
            return Err(OpError::InvalidArgument(format!("the volume whose head is {head:#x} is not being flattened")));
        }
        let Some(pool) = map.pools.get(&pg.pool) else {
            return Err(OpError::InvalidArgument(format!("pool {} is not in this osd's map", pg.pool)));
        };
        let family = inode::family(head).expect("a head with a parent is layered");
        let first = ObjectId { inode: inode::layered(inode::pool(head), family, 0), stripe: 0 };
        let end = first.inode + inode::LAYERS_MAX;
        let below: BTreeSet<u64> = map.chain(head).skip(1).map(|(layer, _)| layer).collect();
        let listed: Vec<ObjectId> = self
            .engine
            .list_pg(pg, pool.pg_count, start.max(first), count_max as usize)
            .into_iter()
            .map(|(object, _)| object)
            .take_while(|object| object.inode < end)
            .collect();
        let stripes: BTreeSet<u64> =
            listed.iter().filter(|object| below.contains(&object.inode)).map(|object| object.stripe).collect();
        // As many at once as the pacer lets run: it holds the OSD to its rate and slots.
        let copies: Vec<Result<bool, OpError>> = stream::iter(stripes)
            .map(|stripe| self.copy_up(&state, ObjectId { inode: head, stripe }))
            .buffer_unordered(self.pacer.in_flight_max())
            .collect()
            .await;
        let mut copied = 0u32;
        for copy in copies {
            copied += u32::from(copy?);
        }
        let next = match listed.last() {
            Some(last) if last.stripe == u64::MAX => ObjectId { inode: last.inode + 1, stripe: 0 },
            Some(last) => ObjectId { inode: last.inode, stripe: last.stripe + 1 },
            None => ObjectId { inode: end, stripe: 0 },
        };
        Ok(Response::Flatten { listed: listed.len() as u32, copied, next })
    }

    /// Fills head object `object` with the pages the layers below show and it lacks; returns
    /// whether it took any. Paced as background work.
    async fn copy_up(self: &Rc<Self>, state: &Rc<Pg>, object: ObjectId) -> Result<bool, OpError> {
        let _permit = self.pacer.admit(Priority::Flatten, u64::from(self.object_size_bytes)).await;
        loop {
            let below = self.layers_below(object);
            if below.is_empty() {
                return Ok(false);
            }
            let before = self.engine.with(|engine| engine.object_version(object));
            let own = if self.object_exists(object) {
                self.read_repairing(state, object, 0, self.object_size_bytes).await?
            } else {
                ObjectRead { version: 0, present: 0, data: Bytes::new() }
            };
            let held = own.present;
            let (data, present) = self.read_through(state, own, &below, 0, self.object_size_bytes).await?;
            if present == held {
                return Ok(false);
            }
            debug_assert_eq!(present & held, held, "a read through keeps the head's own pages");
            let _object = self.locks.write(object).await;
            // A client's write since the read: read again, under the new content.
            if self.engine.with(|engine| engine.object_version(object)) != before {
                continue;
            }
            self.replicate_held(state, object, Mutation::Replace { data, present }).await?;
            return Ok(true);
        }
    }
}
