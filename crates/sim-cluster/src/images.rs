//! Replicas compared without asking the OSDs: each OSD's disk image, as its reads see it now,
//! is copied and opened with the engine (its journal replayed as after a power cut), and every
//! member's copy of every object the clients could touch is read there. The OSDs' own answers
//! (`replicas.rs`) go through the code under test; these do not. What each OSD lists of its
//! PGs (`listings.rs`) must be what its image holds of them.

use std::collections::BTreeMap;

use cluster::{ClusterMap, VolumeRecord};
use engine::{Engine, EngineOptions, ObjectId, Reply, Request};
use mon::views::PgView;
use platform::Disk;

use crate::cluster::{Nodes, HOST_PREFIX};
use crate::history::BLOCK_BYTES;
use crate::listings::Listings;
use crate::{workload, SimOptions};

/// One copy as its image holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Copy {
    /// With the pages that hold data: a copy that turned a page never written into zeros
    /// written differs, since a layer reads through the first and not the second.
    Held {
        version: u64,
        crc32c: u32,
        present: u64,
    },
    Missing,
    Unreadable(String),
}

/// Compares every member's copy of every object in the disk images, for the PGs `views` shows
/// settled (clean on their target set), among the members the views name, and each member's
/// listing of those PGs (`listed`) with what its image holds of them; returns how many
/// objects were compared and how many skipped (in PGs not settled when asked).
pub(crate) fn compare(
    nodes: &Nodes,
    map: &ClusterMap,
    views: &[PgView],
    listed: &Listings,
    options: &SimOptions,
) -> Result<(usize, usize), String> {
    // The members as the views saw them settled: the map may have moved on since (an OSD
    // marked in again makes it a member to backfill).
    let settled: BTreeMap<(u32, u32), &[u32]> = views
        .iter()
        .filter(|view| crate::settle::is_settled(view))
        .map(|view| ((view.pool, view.pg), view.acting.as_slice()))
        .collect();
    let mut engines = BTreeMap::new();
    for (&osd, record) in &map.osds {
        let name = record.host.trim_start_matches(HOST_PREFIX);
        let Some(index) = (0..nodes.count()).find(|&index| nodes.name(index) == name) else { continue };
        let image = nodes.with_osd(index, |node| node.disk.with_disk(|disk| disk.copy_of_written()));
        let disk: Box<dyn Disk> = Box::new(image);
        let engine = Engine::open(disk, &EngineOptions::default())
            .map_err(|error| format!("osd.{osd}'s disk image does not open: {error}"))?;
        engines.insert(osd, engine);
    }
    for (&(osd, pool, pg), listing) in listed {
        let engine = engines.get(&osd).ok_or_else(|| format!("osd.{osd} has no disk image"))?;
        let pg_count = map.pools.get(&pool).ok_or_else(|| format!("no pool {pool}"))?.pg_count;
        let held: Vec<(ObjectId, u64)> = engine
            .list_objects()
            .into_iter()
            .filter(|(object, _)| {
                VolumeRecord::pool_of(object.inode) == pool
                    && cluster::object_pg(object.inode, object.stripe, pg_count) == pg
            })
            .collect();
        if held != *listing {
            return Err(format!(
                "osd.{osd} lists PG {pool}.{pg} as {listing:?}, and its disk image holds {held:?} of it"
            ));
        }
    }
    let stripes = options.blocks_per_volume * BLOCK_BYTES as u64 / u64::from(options.object_bytes);
    let (mut compared, mut skipped) = (0, 0);
    for volume in 0..options.volumes {
        let name = workload::volume_name(volume);
        let record = map.volumes.get(&name).ok_or_else(|| format!("no volume {name} in the map"))?;
        let pool = map.pools.get(&record.pool).ok_or_else(|| format!("no pool {}", record.pool))?;
        for stripe in 0..stripes {
            let object = ObjectId { inode: record.id, stripe };
            let pg = cluster::object_pg(record.id, stripe, pool.pg_count);
            let Some(&members) = settled.get(&(pool.id, pg)) else {
                skipped += 1;
                continue;
            };
            let mut copies = Vec::new();
            for &osd in members {
                let engine = engines.get_mut(&osd).ok_or_else(|| format!("osd.{osd} has no disk image"))?;
                copies.push((osd, copy_of(engine, object)));
            }
            let differ = copies.windows(2).any(|pair| pair[0].1 != pair[1].1);
            let unreadable = copies.iter().any(|(_, copy)| matches!(copy, Copy::Unreadable(_)));
            if differ || unreadable {
                return Err(format!("{name} stripe {stripe} (PG {}.{pg}) in the disk images: {copies:?}", pool.id));
            }
            compared += 1;
        }
    }
    Ok((compared, skipped))
}

/// `object` as the engine on a disk image reads it.
fn copy_of(engine: &mut Engine<Box<dyn Disk>>, object: ObjectId) -> Copy {
    if !engine.object_exists(object) {
        return Copy::Missing;
    }
    let length_bytes = engine.object_size_bytes();
    engine.submit(0, Request::Read { object, offset_bytes: 0, length_bytes });
    let mut completions = Vec::new();
    while completions.is_empty() {
        engine.poll(&mut completions);
    }
    match completions.remove(0).result {
        Ok(Reply::Read { version, data, present }) => Copy::Held { version, crc32c: crc32c::crc32c(&data), present },
        Ok(other) => Copy::Unreadable(format!("the engine answered a read with {other:?}")),
        Err(error) => Copy::Unreadable(error.to_string()),
    }
}
