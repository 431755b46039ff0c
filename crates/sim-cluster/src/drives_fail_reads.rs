//! The scenario where every drive fails two reads at once: the primary's read of an object fails,
//! and so does every member's read of its copy. No copy is known bad, so the repair waits
//! (`Busy`) rather than call the object lost; the client's read is retried and returns the
//! data once the drives read again.

use std::time::Duration;

use net::sim::SimNet;

use crate::history::BLOCK_BYTES;
use crate::scenarios::Stage;
use crate::workload::{self, Op};

/// How long the read gets to return the data once the drives read again.
const READ_WITHIN: Duration = Duration::from_secs(20);

pub(crate) async fn play(stage: &Stage<'_>) -> Result<(), String> {
    let blocks_per_object = u64::from(stage.volumes[0].object_size_bytes()) / BLOCK_BYTES as u64;
    for block in 0..blocks_per_object {
        SimNet::on_node("client", workload::write(stage.volumes, (0, block), Op::Write, stage.run, "scenario")).await;
    }
    // Idle long enough for every OSD to write its journal back: the data is in its blocks.
    tokio::time::sleep(Duration::from_secs(5)).await;
    for index in 0..stage.nodes.count() {
        stage.nodes.with_osd(index, |osd| osd.disk.with_disk(|disk| disk.fail_next_reads(2)));
    }
    stage.run.record("every drive fails its next two reads");
    let read = SimNet::on_node("client", workload::read(stage.volumes, (0, 0), stage.run, "scenario"));
    tokio::time::timeout(READ_WITHIN, read)
        .await
        .map_err(|_| format!("a read did not return within {READ_WITHIN:?} once the drives read again"))?;
    stage.run.record("the read returned once the drives read again");
    Ok(())
}
