//! Faults drawn from the seed while the clients run: an OSD killed as a power loss would (its
//! tasks and connections gone at once, its disk's unflushed writes lost or torn) and restarted
//! on the same disk a while later. One OSD is down at a time, so the pool (3 copies, `min_size`
//! 2) keeps serving; a second fault while one is down comes with partitions and pauses.

use std::rc::Rc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::cluster::Nodes;

/// Kills and restarts OSDs until dropped.
pub(crate) async fn inject(seed: u64, nodes: Rc<Nodes>) {
    let mut rng = SmallRng::seed_from_u64(seed);
    loop {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(10..400))).await;
        let index = rng.gen_range(0..nodes.count());
        nodes.kill(index).await;
        // Mostly past the lease (3 s), so that the PGs fail over; sometimes within it.
        tokio::time::sleep(Duration::from_millis(rng.gen_range(100..6_000))).await;
        nodes.restart(index);
    }
}

/// Restarts every OSD that is down (the faults are over).
pub(crate) fn heal(nodes: &Nodes) {
    for index in 0..nodes.count() {
        if !nodes.is_running(index) {
            nodes.restart(index);
        }
    }
}
