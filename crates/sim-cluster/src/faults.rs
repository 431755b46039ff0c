//! Faults drawn from the seed while the clients run, one OSD at a time (the pool, 3 copies and
//! `min_size` 2, keeps serving):
//! - killed as a power loss would (its tasks and connections gone at once, its disk's
//!   unflushed writes lost or torn) and restarted on the same disk a while later;
//! - cut off from every other node, the metadata store included (its lease runs out at the
//!   store while it cannot renew it; what it sent arrives when the partition heals).

use std::rc::Rc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::cluster::Nodes;

/// Kills and restarts OSDs, or cuts them off and heals them, until dropped.
pub(crate) async fn inject(seed: u64, nodes: Rc<Nodes>) {
    let mut rng = SmallRng::seed_from_u64(seed);
    loop {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(10..400))).await;
        let index = rng.gen_range(0..nodes.count());
        // Mostly past the lease (3 s), so that the PGs fail over; sometimes within it.
        let down = Duration::from_millis(rng.gen_range(100..6_000));
        if rng.gen_bool(0.3) {
            nodes.isolate(index);
            tokio::time::sleep(down).await;
            nodes.heal_network();
        } else {
            nodes.kill(index).await;
            tokio::time::sleep(down).await;
            nodes.restart(index);
        }
    }
}

/// Heals the network and restarts every OSD that is down (the faults are over).
pub(crate) fn heal(nodes: &Nodes) {
    nodes.heal_network();
    for index in 0..nodes.count() {
        if !nodes.is_running(index) {
            nodes.restart(index);
        }
    }
}
