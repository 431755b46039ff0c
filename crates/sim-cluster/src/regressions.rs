//! Seeds that once failed, kept with what they found: `tests/seeds.rs` runs them every time,
//! and `tests/coverage.rs` counts the branches they reach.

use crate::SimOptions;

/// Seeds that once failed with the fixed geometry (3 OSDs, 3 copies, `min_size` 2), kept with
/// what they found.
pub const REGRESSIONS: [(u64, &str); 8] = [
    (268, "an OSD restarted after its drive failed reaped the requests of the process before it"),
    (315, "a primary whose copy rotted answered a client Corrupt while a member was down"),
    (376, "a primary's drive failed three reads in a row and the client saw the error"),
    (9764, "a primary whose own write failed minted that version again: the secondaries took the next write for a retry and skipped it"),
    (57656, "the pacer slept for less than a timer tick and spun, which a paused clock never ends"),
    (16390, "the settle check passed in the instant before a lease that lapsed during a heal took its OSD down"),
    (63111, "the final reads waited for ever behind a one-way cut between two OSDs that both kept their leases"),
    (27988, "a primary whose copy rotted sent it to a member catching up, failed, and retried for ever instead of sending another member's good copy"),
];

/// Seeds that once failed with a geometry drawn from the seed, kept with what they found.
pub const DRAWN_REGRESSIONS: [(u64, &str); 6] = [
    (14, "6 OSDs, down-out 8 s: a PG whose target changed back to its acting set at the same epoch stayed degraded for ever"),
    (11, "a backfilling PG clean with the members its history already named, at an older epoch, never told the mon it was complete"),
    (23, "a primary that discarded its own unacknowledged newer copy pulled the acknowledged older one, took the refusal for success and lost the write"),
    (227, "a clean record the lease refused for an instant was never tried again: the backfill never ended"),
    (2450, "a primary whose drive failed two reads in a row, holding the only copy of the newest version, called it unrepairable and failed the client's read"),
    (52814, "a member listed while its slow drive still queued an object's first write forgot the object for good; peering took its list and a read returned zeros for an acknowledged write"),
];

/// Seeds that once failed with the geometry and the workload drawn from the seed (object and
/// journal sizes, pipelined clients, whole-object ops), kept with what they found.
pub const WIDE_REGRESSIONS: [(u64, &str); 5] = [
    (90, "a member listed after its PG served kept a copy of an object the PG had deleted meanwhile; once recorded clean, the old data would have come back"),
    (187, "a whole-object write whose fresh block the primary's drive failed answered the client with the drive's error"),
    (233, "a delete in a PG clean in memory but not yet recorded clean removed the object, and a member of the older recorded set offered its old copy as the newest"),
    (1316, "a retried delete of an object the primary no longer knew (its first try reached all but a paused member, and write-back forgot the tombstone) was acknowledged as done; the paused member's copy came back when it returned"),
    (1406, "a write after a delete minted the delete's own version once write-back had forgotten it on the primary; a member still holding the delete took the write for its retry and skipped it"),
];

/// Seeds that once failed with two streams of faults at once, over the geometry and workload
/// drawn from the seed, kept with what they found.
pub const OVERLAPPING_REGRESSIONS: [(u64, &str); 6] = [
    (172, "an OSD started while cut off from the metadata store exited instead of waiting for it"),
    (570, "the harness took an OSD that could not open its engine on a drive failing reads for a violation"),
    (1661, "the replica check compared a PG's members from a map the mon had moved on since (a backfill ended, the old member removed its copies as strays)"),
    (52738, "the final reads were held to their bound with the mon killed and an OSD paused by the other stream: nothing could fail that OSD's PGs over"),
    (54016, "a delete whose secondary's drive failed was retried after write-back forgot it on the primary, which still took that member for complete and acknowledged at once; the member's old copy came back"),
    (4749, "a write in a PG clean in memory, whose clean record the store cut-off held back, skipped the record; the next peering trusted the older set and lost the write"),
];

/// Seeds that once failed with an OSD that may join late, over everything above.
pub const JOINING_REGRESSIONS: [(u64, &str); 5] = [
    (63461, "a stray copy's delete, decided under an older map, committed after its OSD had listed the copy to a new primary, which then recorded that OSD clean: a later peering trusted it without the object and discarded the last copy of an acknowledged write"),
    (23998, "peering waited for a member of an older recorded set whose drive had failed, although the latest set's member held every write: the PG never served again"),
    (294, "a primary deleted a late-listed member's copy holding writes no one acknowledged while that member was still in the latest recorded set; killed before copying the object back, it left that member to decide the next peering alone, without the object"),
    (420, "the harness took an OSD joining late onto a drive set to fail writes, which could not record its id, for a violation"),
    (71458, "a primary discarded its copy one version below the newest, at the newest's version, then took the pulled newest for a copy it already held: the object stayed deleted and reads returned zeros"),
];

/// Seeds that once failed with snapshots, clones and rollbacks taken, over everything above.
pub const SNAPSHOT_REGRESSIONS: [(u64, &str); 6] = [
    (25, "a primary whose map did not name a volume's new head yet read it alone, without the layers below: a client read an acknowledged write as zeros"),
    (562, "a write no one acknowledged, on a member of an older recorded set, won a later peering after the PG had served the object without it: a snapshot's block changed after it was read"),
    (3195, "the same on another geometry: a snapshot's block read as one write, then as a newer one"),
    (1659, "a write no one acknowledged, rolled forward by a peering and read at an epoch that recorded no set, lost to a later peering that trusted only the latest recorded set"),
    (2221, "the same: a snapshot's block read as an in-flight write, then as the write before it"),
    (12446, "a harness bug: the run counted as settled while an OSD was still marked down on its peers' reports; the mark cleared during the disk-image check, and a PG moved under it"),
];

/// Seeds that once failed on the control plane of two mons and a store of three members.
pub const CONTROL_REGRESSIONS: [(u64, &str); 3] = [
    (412, "an OSD restarted while the store elected a leader exited when reading its own record failed (a start now waits for the store at every step; since the model of a node cut off from the store changed, the seed no longer reaches it, and `osd/tests/replication.rs` holds it)"),
    (2428, "a harness bug: an OSD whose drive failed finished stopping (its lease revocation waiting for the store's election) after the fault was undone, and was taken for one that stopped with no fault"),
    (37083, "a primary cut off from the store recorded its epoch-3 set after the PG had moved to epoch 6, where its successor, finding the PG clean, had acknowledged writes with no record: the next peering took the late record for the latest set and discarded them (a history write now compares the PG table with its writer's map)"),
];

/// Seeds that once failed with clones removed to the trash, over everything above.
pub const TRASH_REGRESSIONS: [(u64, &str); 2] = [
    (67997, "a harness bug: an OSD still stopping on its failed drive when the final reads began was not counted down, so the reads were held to a bound with two of three OSDs gone"),
    (321007, "a harness bug: the final reads were held to their bound while the store's members were cut off from one another, with an OSD whose lease had lapsed in a cut just before: it could not ride through, and nothing could fail its PGs over"),
];

/// Every seed above with the options of the stage it was found in.
pub fn with_options() -> Vec<(u64, &'static str, SimOptions)> {
    let fixed = SimOptions::default();
    let drawn = SimOptions { drawn_geometry: true, ..fixed.clone() };
    let wide = SimOptions { drawn_workload: true, ..drawn.clone() };
    let overlapping = SimOptions { overlapping_faults: true, ..wide.clone() };
    let joining = SimOptions { osd_joins: true, ..overlapping.clone() };
    let snapshots = SimOptions { snapshots: true, ..joining.clone() };
    let control = SimOptions { control_plane: true, ..snapshots.clone() };
    let trash = SimOptions { trash: true, ..control.clone() };
    let stages: [(&[(u64, &'static str)], SimOptions); 8] = [
        (&REGRESSIONS, fixed),
        (&DRAWN_REGRESSIONS, drawn),
        (&WIDE_REGRESSIONS, wide),
        (&OVERLAPPING_REGRESSIONS, overlapping),
        (&JOINING_REGRESSIONS, joining),
        (&SNAPSHOT_REGRESSIONS, snapshots),
        (&CONTROL_REGRESSIONS, control),
        (&TRASH_REGRESSIONS, trash),
    ];
    stages
        .into_iter()
        .flat_map(|(seeds, options)| seeds.iter().map(move |&(seed, found)| (seed, found, options.clone())))
        .collect()
}
