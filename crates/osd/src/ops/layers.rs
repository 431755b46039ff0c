//! Layers at the primary (ADR 0026): which client writes a layer takes, reads that fall through
//! a chain of layers, and what a trim of a layer over a parent may do.
//!
//! Every layer of a family keeps a stripe's object in the same PG, so the primary finds the
//! whole chain on its own drive: a read costs one index lookup per layer in RAM and a disk read
//! only where a layer holds the pages asked for.

use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use cluster::{inode, ClusterMap};
use engine::{ObjectId, PAGE_SIZE_BYTES};
use wire::Request;

use super::primary::Mutation;
use super::{ObjectRead, OpError, Osd};
use crate::pg::state::Pg;
use crate::sealed::SealedHeads;

const PAGE: usize = PAGE_SIZE_BYTES as usize;

/// Whether this OSD may serve a client's op on the layer it names, in the map that admits it.
/// A layered inode the map does not name is `Busy` (once the map had time to catch up): the map
/// is behind the client's (a read of a new head would miss the layers below it), or the layer
/// was replaced (a rollback) or is being removed. A write must not change a snapshot's layer (frozen) nor a head still
/// waiting for its seal, unless the mon said it is sealed (`sealed`). Inodes from before
/// layers take ops as they always did.
pub(crate) fn check_layer(map: &ClusterMap, request: &Request, sealed: &SealedHeads) -> Result<(), OpError> {
    let (inode, writes) = match *request {
        Request::Write { inode, .. } | Request::WriteZeroes { inode, .. } | Request::Trim { inode, .. } => {
            (inode, true)
        }
        Request::Read { inode, .. } => (inode, false),
        Request::Stat { object, .. } | Request::Changes { object, .. } => (object.inode, false),
        _ => return Ok(()),
    };
    if !inode::is_layered(inode) {
        return Ok(());
    }
    let Some(layer) = map.layer(inode) else {
        return Err(OpError::LayerUnknown { inode });
    };
    if !writes {
        return Ok(());
    }
    // The removal of a volume's snapshots trims them whole (`trim_mutation` deletes).
    let removal = layer.deleting && matches!(request, Request::Trim { .. });
    if layer.frozen && !removal {
        return Err(OpError::LayerFrozen { inode });
    }
    if layer.sealing && !sealed.contains(inode) {
        return Err(OpError::LayerSealing { inode });
    }
    Ok(())
}

impl Osd {
    /// Waits until head `inode` is sealed: the mon said so, or the map no longer shows it
    /// sealing. `LayerSealing` (`Busy`) past `deadline`.
    pub(crate) async fn until_sealed(&self, inode: u64, deadline: tokio::time::Instant) -> Result<(), OpError> {
        let mut receiver = self.map.clone();
        loop {
            let word = self.sealed_heads.changed();
            let sealing = receiver.borrow_and_update().layer(inode).is_some_and(|layer| layer.sealing);
            if !sealing || self.sealed_heads.contains(inode) {
                return Ok(());
            }
            let woken = tokio::time::timeout_at(deadline, async {
                tokio::select! {
                    changed = receiver.changed() => changed.is_ok(),
                    () = word => true,
                }
            });
            if !matches!(woken.await, Ok(true)) {
                return Err(OpError::LayerSealing { inode });
            }
        }
    }

    /// The layers below `object`'s that a read of it falls through to, top first, each with
    /// how many bytes of its object show through. Empty for a layer without a parent.
    pub(crate) fn layers_below(&self, object: ObjectId) -> Vec<(ObjectId, u32)> {
        let map = self.map.borrow().clone();
        if map.layer(object.inode).and_then(|layer| layer.parent).is_none() {
            return Vec::new();
        }
        let object_size = u64::from(self.object_size_bytes);
        let start = object.stripe * object_size;
        map.chain(object.inode)
            .skip(1)
            .map(|(inode, visible_bytes)| {
                let visible = visible_bytes.saturating_sub(start).min(object_size);
                (ObjectId { inode, stripe: object.stripe }, visible as u32)
            })
            .take_while(|&(_, visible)| visible > 0)
            .collect()
    }

    /// A read of a range of a layer that has layers below: each page from the topmost layer
    /// that holds it, zeros where none does or past what a parent shows, and the pages of the
    /// range some layer holds (bit `i`: page `i` of the object). `head` is what the top layer
    /// holds of the range.
    pub(crate) async fn read_through(
        self: &Rc<Self>,
        state: &Rc<Pg>,
        head: ObjectRead,
        below: &[(ObjectId, u32)],
        offset_bytes: u32,
        length_bytes: u32,
    ) -> Result<(Bytes, u64), OpError> {
        let wanted = crate::pages::of_range(offset_bytes, length_bytes);
        let first_page = (offset_bytes / PAGE_SIZE_BYTES) as usize;
        let mut held = head.present & wanted;
        let mut missing = wanted & !head.present;
        if missing == 0 {
            return Ok((head.data, held));
        }
        let place = |out: &mut Option<BytesMut>, data: &Bytes, pages: u64| {
            let out = out.get_or_insert_with(|| BytesMut::zeroed(length_bytes as usize));
            for page in crate::pages::pages(pages) {
                let at = (page - first_page) * PAGE;
                out[at..at + PAGE].copy_from_slice(&data[at..at + PAGE]);
            }
        };
        let mut out: Option<BytesMut> = None;
        if head.present & wanted != 0 {
            place(&mut out, &head.data, head.present & wanted);
        }
        for &(object, visible_bytes) in below {
            // Past what this layer shows, deeper layers show nothing either: zeros.
            missing &= crate::pages::below(visible_bytes);
            if missing == 0 {
                break;
            }
            if !self.object_exists(object) {
                continue;
            }
            let read = self.read_repairing(state, object, offset_bytes, length_bytes).await?;
            let found = read.present & missing;
            if found == 0 {
                continue;
            }
            if found == wanted {
                debug_assert!(out.is_none());
                return Ok((read.data, wanted));
            }
            place(&mut out, &read.data, found);
            missing &= !found;
            held |= found;
        }
        let data = match out {
            Some(out) => out.freeze(),
            None => Bytes::from(vec![0; length_bytes as usize]),
        };
        Ok((data, held))
    }

    /// Whether a Stat of `object` finds data: in its own layer, or in a layer below that shows
    /// any of it. Returns the version of the layer's object that holds some.
    pub(crate) fn stat_through(&self, object: ObjectId) -> Option<u64> {
        std::iter::once(object)
            .chain(self.layers_below(object).into_iter().map(|(object, _)| object))
            .find(|&object| self.object_exists(object))
            .map(|object| self.engine.with(|engine| engine.object_version(object)).unwrap_or(0))
    }

    /// The pages of `object` that may differ from the same stripe of layer `since`, which must be
    /// below it in its chain (ADR 0034): those a layer above `since` holds where it shows
    /// through, and those past a size cut between the two (zeros above it, maybe not in `since`).
    /// Never a page clear that differs; only metadata is read.
    pub(crate) async fn changes_since(&self, object: ObjectId, since: u64) -> Result<u64, OpError> {
        let map = self.map.borrow().clone();
        let object_size = u64::from(self.object_size_bytes);
        let start = object.stripe * object_size;
        let mut changed = 0u64;
        for (inode, visible_bytes) in map.chain(object.inode) {
            let shown = crate::pages::below(visible_bytes.saturating_sub(start).min(object_size) as u32);
            if inode == since {
                let all = crate::pages::below(self.object_size_bytes);
                return Ok(changed | (all & !shown));
            }
            let layer = ObjectId { inode, stripe: object.stripe };
            if shown == 0 || !self.object_exists(layer) {
                continue;
            }
            match self.engine.submit(engine::Request::Pages { object: layer }).await? {
                engine::Reply::Pages { present, .. } => changed |= present & shown,
                other => unreachable!("the engine answered a Pages request with {other:?}"),
            }
        }
        Err(OpError::InvalidArgument(format!(
            "layer {since:#x} is not below layer {:#x} in its chain: not an earlier snapshot of the same volume",
            object.inode
        )))
    }

    /// A Trim of a whole object deletes it, unless a layer below shows through it: a delete
    /// would expose the parent's data, so the layer's pages are written as zeros instead. The
    /// removal of a volume deletes.
    pub(crate) fn trim_mutation(&self, object: ObjectId, offset_bytes: u32, length_bytes: u32) -> Mutation {
        let whole = offset_bytes == 0 && length_bytes == self.object_size_bytes;
        if whole && (self.removing(object.inode) || self.layers_below(object).is_empty()) {
            Mutation::Delete
        } else {
            Mutation::zeros(offset_bytes, length_bytes)
        }
    }

    /// Whether layer `inode` belongs to a volume being removed.
    fn removing(&self, inode: u64) -> bool {
        self.map.borrow().layer(inode).is_some_and(|layer| layer.deleting)
    }
}
