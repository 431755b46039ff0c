//! Membership changes drawn from the seed while the clients run, as an operator makes them: an
//! OSD marked out (placement moves its PGs to the others, which backfill them; it serves them
//! until they are clean without it) and in again, or reweighted and back to 1. One at a time,
//! each undone before the next; the last is undone when the clients finish ([`undo`]).

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use meta::MetaStore;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::cluster::{Nodes, HOST_PREFIX};

/// A change in effect, to undo.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Change {
    Out(u32),
    Weight(u32),
}

/// Draws changes and applies them until dropped; `pending` holds the one in effect.
pub(crate) async fn change(seed: u64, nodes: Rc<Nodes>, store: Arc<dyn MetaStore>, pending: Rc<Cell<Option<Change>>>) {
    let mut rng = SmallRng::seed_from_u64(seed);
    loop {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(500..3_000))).await;
        let index = rng.gen_range(0..nodes.count());
        let lasting = Duration::from_millis(rng.gen_range(1_000..6_000));
        let out = rng.gen_bool(0.6);
        let weight = [0.25, 0.5, 2.0][rng.gen_range(0..3)];
        let Some(id) = osd_id(store.as_ref(), &nodes.name(index)).await else { continue };
        let applied = if out {
            mon::osd_admin::mark_out(store.as_ref(), id).await.map(|_| Change::Out(id))
        } else {
            mon::osd_admin::reweight(store.as_ref(), id, weight).await.map(|_| Change::Weight(id))
        };
        match applied {
            Ok(change) => {
                pending.set(Some(change));
                match change {
                    Change::Out(id) => nodes.run().record(format_args!("membership: osd.{id} marked out")),
                    Change::Weight(id) => nodes.run().record(format_args!("membership: osd.{id} weighted {weight}")),
                }
            }
            Err(error) => nodes.run().record(format_args!("membership: no change of osd.{id}: {error}")),
        }
        tokio::time::sleep(lasting).await;
        undo(&nodes, store.as_ref(), &pending).await;
    }
}

/// Undoes the change in effect, if any.
pub(crate) async fn undo(nodes: &Nodes, store: &dyn MetaStore, pending: &Cell<Option<Change>>) {
    let Some(change) = pending.take() else { return };
    let (undone, what) = match change {
        Change::Out(id) => (mon::osd_admin::mark_in(store, id).await.map(|_| id), "marked in"),
        Change::Weight(id) => (mon::osd_admin::reweight(store, id, 1.0).await.map(|_| id), "weighted 1"),
    };
    match undone {
        Ok(id) => nodes.run().record(format_args!("membership: osd.{id} {what}")),
        Err(error) => nodes.run().violation(format!("a membership change could not be undone: {error}")),
    }
}

/// The id of the OSD running on node `name` (its record names the node's host).
async fn osd_id(store: &dyn MetaStore, name: &str) -> Option<u32> {
    let map = cluster_watch::load(store).await.ok()?;
    let host = format!("{HOST_PREFIX}{name}");
    map.osds.iter().find(|(_, osd)| osd.host == host).map(|(&id, _)| id)
}
