//! The scenario past what the pool survives: every copy of one object rots. No read may return
//! its data then, and none may hang once every member has answered: while a member of its PG
//! is away its copy may be the good one, so a read waits; once it is back and its copy is bad
//! too, the read fails with an error and a scrub reports the object unrepairable. Writing every
//! block of the object again makes it whole, and the run's final checks follow.

use std::time::Duration;

use engine::layout::{MetaEntry, Superblock};
use engine::PAGE_SIZE_BYTES;
use net::sim::SimNet;
use wire::ObjectId;

use crate::history::BLOCK_BYTES;
use crate::scenarios::{index_of, load, wait_for, Stage};
use crate::workload::{self, Op};

/// How long a read of the rotted object gets to show that it waits.
const READ_WAIT: Duration = Duration::from_secs(3);
/// How long a read of it gets to fail once every member is back.
const READ_FAILS_WITHIN: Duration = Duration::from_secs(20);

pub(crate) async fn play(stage: &Stage<'_>) -> Result<(), String> {
    let blocks = stage.volumes[0].size_bytes() / BLOCK_BYTES as u64;
    for block in 0..blocks {
        SimNet::on_node("client", workload::write(stage.volumes, (0, block), Op::Write, stage.run, "scenario")).await;
    }
    // Idle long enough for every OSD to write its journal back: the data is in its blocks.
    tokio::time::sleep(Duration::from_secs(5)).await;

    let map = load(stage).await?;
    let record = map.volumes.get(&workload::volume_name(0)).ok_or("no record of volume 0")?;
    let inode = record.id;
    let object = ObjectId { inode, stripe: 0 };
    let pool = cluster::VolumeRecord::pool_of(inode);
    let pg_count = map.pools.get(&pool).ok_or("no pool")?.pg_count;
    let pg = cluster::object_pg(inode, 0, pg_count);
    let members = map.pg(pool, pg).ok_or("no pg")?.members;
    for index in 0..stage.nodes.count() {
        let rotted = stage.nodes.with_osd(index, |osd| osd.disk.with_disk(|disk| rot_first_page(disk, object)));
        if !rotted {
            return Err(format!("{} holds no copy of {object}", stage.nodes.name(index)));
        }
    }
    stage.run.record(format_args!("every copy of {object} rotted (pg {pool}.{pg}, members {members:?})"));

    // A member away may hold the good copy: the read waits for it.
    let away_osd = *members.get(1).ok_or("the pg has one member")?;
    let away = index_of(stage, &map, away_osd)?;
    stage.nodes.kill(away).await;
    wait_for(stage, "the member away out of the acting set", |map| {
        map.pg(pool, pg).is_some_and(|state| !state.members.contains(&away_osd))
    })
    .await?;
    let read = SimNet::on_node("client", stage.volumes[0].read(0, BLOCK_BYTES as u32));
    match tokio::time::timeout(READ_WAIT, read).await {
        Err(_) => stage.run.record("a read of the rotted object waited for the member away"),
        Ok(Ok(_)) => return Err("a read of an object whose every copy rotted returned data".into()),
        Ok(Err(error)) => {
            return Err(format!("a read failed while a member that may hold a good copy was away: {error}"))
        }
    }

    // Every member back and every copy bad: the read fails, and the scrub says so.
    stage.nodes.restart(away);
    wait_for(stage, "every OSD up", |map| map.live.len() == stage.nodes.count()).await?;
    let read = SimNet::on_node("client", stage.volumes[0].read(0, BLOCK_BYTES as u32));
    match tokio::time::timeout(READ_FAILS_WITHIN, read).await {
        Ok(Err(error)) => stage.run.record(format_args!("a read of the rotted object failed: {error}")),
        Ok(Ok(_)) => return Err("a read of an object whose every copy rotted returned data".into()),
        Err(_) => {
            return Err(format!("a read of an object with no good copy did not fail within {READ_FAILS_WITHIN:?}"))
        }
    }
    crate::settle::wait_until_clean(stage.store, stage.nodes.count(), stage.nodes.lease, stage.run).await;
    let progress = SimNet::on_node("checker", crate::replicas::scrub_every_pg(stage.store)).await?;
    if progress.unrepairable != 1 {
        return Err(format!(
            "the scrub found {} unrepairable objects, not the one rotted: {progress:?}",
            progress.unrepairable
        ));
    }
    stage.run.record("the scrub found the rotted object unrepairable");

    // Written again whole, it reads well; the final checks take it from here.
    let blocks_per_object = u64::from(stage.volumes[0].object_size_bytes()) / BLOCK_BYTES as u64;
    for block in 0..blocks_per_object {
        SimNet::on_node("client", workload::write(stage.volumes, (0, block), Op::Write, stage.run, "scenario")).await;
    }
    Ok(())
}

/// Flips a bit in the first page of the newest copy of `object` on `disk`; whether it found
/// one.
fn rot_first_page(disk: &mut sim::SimDisk, object: ObjectId) -> bool {
    let page = PAGE_SIZE_BYTES as usize;
    let geometry = Superblock::decode(&disk.read_written(0, page)).expect("a formatted disk").geometry;
    let pages_per_object = geometry.pages_per_object();
    let mut newest: Option<(u64, u64)> = None;
    for block in 0..geometry.block_count {
        let (meta_page, at) = geometry.meta_location(block);
        let slot_bytes = geometry.meta_entry_size_bytes as usize;
        let meta = disk.read_written(geometry.meta_page_offset_bytes(meta_page) + at as u64, slot_bytes);
        let Ok(Some(entry)) = MetaEntry::decode(&meta, pages_per_object) else { continue };
        if entry.object == object
            && entry.page_bitmap & 1 != 0
            && newest.is_none_or(|(version, _)| entry.version > version)
        {
            newest = Some((entry.version, geometry.block_offset_bytes(block)));
        }
    }
    let Some((_, offset)) = newest else { return false };
    disk.flip_bit(offset + 100, 3);
    true
}
