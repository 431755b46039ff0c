//! Admission: whether this OSD may serve a request, decided from one map's view of the PG and
//! the request alone, with no I/O (`docs/design/osd.md`, "Ops").
//!
//! The checks run in a fixed order and the first failure is the answer: the epoch (older than
//! ours: `WrongEpoch`; newer, or a PG this map does not have: wait for the map), the role
//! (primary ops only at the primary, secondary ops only at members), the arguments (the object
//! belongs to the PG, the range is non-empty, 4 KiB aligned and inside one object, a secondary's
//! version could come from a primary of the request's epoch), then fencing (no lease, no
//! service). Waiting for the map and what to answer when it does not catch up are the caller's.

use cluster::layout::VERSION_COUNTER_BITS;
use cluster::{object_pg, ClusterMap};
use engine::{ObjectId, PAGE_SIZE_BYTES};
use wire::{PgId, Request};

use super::OpError;

/// A PG as one map publishes it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PgView<'a> {
    pub(crate) pool: u32,
    pub(crate) pg: u32,
    pub(crate) epoch: u64,
    pub(crate) pg_count: u32,
    pub(crate) min_size: u8,
    /// Primary first.
    pub(crate) members: &'a [u32],
}

impl<'a> PgView<'a> {
    pub(crate) fn lookup(map: &'a ClusterMap, pg: PgId) -> Option<PgView<'a>> {
        let pool = map.pools.get(&pg.pool)?;
        let table = map.pg_tables.get(&pg.pool)?;
        if pg.pg >= pool.pg_count {
            return None;
        }
        let (epoch, members) = table.pgs.get(pg.pg as usize)?;
        Some(PgView {
            pool: pg.pool,
            pg: pg.pg,
            epoch: *epoch,
            pg_count: pool.pg_count,
            min_size: pool.min_size,
            members,
        })
    }

    pub(crate) fn primary(&self) -> Option<u32> {
        self.members.first().copied()
    }
}

/// Who may serve a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Clients' ops on a volume's data: only the PG's primary, at the PG's epoch.
    Primary,
    /// The primary's ops to the other members, at the PG's epoch.
    Secondary,
    /// Queries of one object that hold at any epoch (ObjectInfo).
    Admin,
    /// Ops that address no PG (Flush, Ping, Space, PgStates, VolumeRedundancy, VolumeUsage,
    /// Barrier, Sealed).
    Connection,
}

impl Role {
    pub(crate) fn of(request: &Request) -> Role {
        match request {
            Request::Read { .. }
            | Request::Stat { .. }
            | Request::Changes { .. }
            | Request::Flatten { .. }
            | Request::Write { .. }
            | Request::WriteZeroes { .. }
            | Request::Trim { .. } => Role::Primary,
            Request::SecWrite { .. }
            | Request::SecWritePages { .. }
            | Request::SecReplace { .. }
            | Request::SecDelete { .. }
            | Request::SecRead { .. }
            | Request::SecList { .. } => Role::Secondary,
            Request::ObjectInfo { .. } => Role::Admin,
            Request::Flush
            | Request::Ping
            | Request::Space
            | Request::PgStates
            | Request::VolumeRedundancy { .. }
            | Request::VolumeUsage { .. }
            | Request::Barrier { .. }
            | Request::Sealed { .. } => Role::Connection,
        }
    }
}

/// What admission knows about this OSD.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Osd {
    pub(crate) id: u32,
    pub(crate) object_size_bytes: u32,
    /// The lease is current (`Liveness::may_serve`).
    pub(crate) may_serve: bool,
}

/// A request this OSD may serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Admitted {
    /// The object the request addresses and the offset of its range within it, if any.
    pub(crate) object: Option<(ObjectId, u32)>,
}

#[derive(Debug)]
pub(crate) enum Decision {
    Admit(Admitted),
    /// The request is at an epoch this map has not reached (or names a PG it does not have):
    /// decide again on a newer map, or answer [`map_behind`] once waiting has run out.
    WaitForMap,
    Refuse(OpError),
}

/// Decides whether `osd` may serve `request`, sent at `epoch`, given the PG's `view` in its map.
pub(crate) fn admit(view: Option<PgView<'_>>, osd: Osd, epoch: u64, request: &Request) -> Decision {
    match check(view, osd, epoch, request) {
        Ok(Some(admitted)) => Decision::Admit(admitted),
        Ok(None) => Decision::WaitForMap,
        Err(error) => Decision::Refuse(error),
    }
}

fn check(view: Option<PgView<'_>>, osd: Osd, epoch: u64, request: &Request) -> Result<Option<Admitted>, OpError> {
    let role = Role::of(request);
    let Some(pg) = request.pg() else {
        debug_assert_eq!(role, Role::Connection);
        return Ok(Some(Admitted { object: None }));
    };
    let view = match (role, view) {
        (Role::Admin, Some(view)) => view,
        (Role::Admin, None) => return Err(no_such_pg(pg)),
        (_, None) if epoch == 0 => return Err(no_such_pg(pg)),
        (_, None) => return Ok(None),
        (_, Some(view)) if epoch < view.epoch => return Err(OpError::WrongEpoch { ours: view.epoch, theirs: epoch }),
        (_, Some(view)) if epoch > view.epoch => return Ok(None),
        (_, Some(view)) => view,
    };
    // Versions keep the epoch in their top bits: a map epoch beyond them cannot be minted in.
    if role != Role::Admin && epoch >> (u64::BITS - VERSION_COUNTER_BITS) != 0 {
        return Err(OpError::InvalidArgument(format!(
            "pg {}.{} epoch {epoch} is beyond what versions can hold",
            view.pool, view.pg
        )));
    }
    match role {
        Role::Primary => check_primary_role(view, osd.id)?,
        // Reads of what a member holds are also asked of OSDs of recorded sets that left the
        // acting set; only changes need membership.
        Role::Secondary
            if !view.members.contains(&osd.id)
                && matches!(
                    request,
                    Request::SecWrite { .. }
                        | Request::SecWritePages { .. }
                        | Request::SecReplace { .. }
                        | Request::SecDelete { .. }
                ) =>
        {
            return Err(OpError::InvalidArgument(format!(
                "osd.{} is not a member of pg {}.{} at epoch {epoch}",
                osd.id, view.pool, view.pg
            )))
        }
        _ => {}
    }
    let object = match *request {
        Request::Read { inode, offset_bytes, length_bytes, .. }
        | Request::WriteZeroes { inode, offset_bytes, length_bytes, .. }
        | Request::Trim { inode, offset_bytes, length_bytes, .. } => {
            Some(locate(view, osd.object_size_bytes, inode, offset_bytes, u64::from(length_bytes))?)
        }
        Request::Write { inode, offset_bytes, ref data, .. } => {
            Some(locate(view, osd.object_size_bytes, inode, offset_bytes, data.len() as u64)?)
        }
        Request::Stat { object, .. } | Request::Changes { object, .. } | Request::ObjectInfo { object, .. } => {
            Some((check_object(view, object)?, 0))
        }
        Request::SecWrite { object, version, offset_bytes, ref data, .. } => {
            let object = check_object(view, object)?;
            check_version(version, epoch)?;
            check_range(osd.object_size_bytes, offset_bytes, data.len() as u64)?;
            Some((object, offset_bytes))
        }
        Request::SecWritePages { object, base_version, version, page_mask, ref data, .. } => {
            let object = check_object(view, object)?;
            check_version(version, epoch)?;
            if page_mask == 0 {
                return Err(OpError::InvalidArgument("a SecWritePages names no page".into()));
            }
            check_pages(osd.object_size_bytes, page_mask, data.len())?;
            if base_version >= version {
                return Err(OpError::InvalidArgument(format!(
                    "base version {base_version:#x} is not older than version {version:#x}"
                )));
            }
            Some((object, 0))
        }
        Request::SecReplace { object, version, page_mask, ref data, .. } => {
            let object = check_object(view, object)?;
            check_version(version, epoch)?;
            check_pages(osd.object_size_bytes, page_mask, data.len())?;
            Some((object, 0))
        }
        Request::SecDelete { object, version, .. } => {
            let object = check_object(view, object)?;
            check_version(version, epoch)?;
            Some((object, 0))
        }
        Request::SecRead { object, offset_bytes, length_bytes, .. } => {
            let object = check_object(view, object)?;
            check_range(osd.object_size_bytes, offset_bytes, u64::from(length_bytes))?;
            Some((object, offset_bytes))
        }
        Request::SecList { .. } => None,
        Request::Flatten { count_max, .. } => {
            if count_max == 0 || count_max > wire::limits::FLATTEN_OBJECTS_MAX_COUNT {
                return Err(OpError::InvalidArgument(format!(
                    "a Flatten lists {count_max} objects, not 1 to {}",
                    wire::limits::FLATTEN_OBJECTS_MAX_COUNT
                )));
            }
            None
        }
        Request::Flush
        | Request::Ping
        | Request::Space
        | Request::PgStates
        | Request::VolumeRedundancy { .. }
        | Request::VolumeUsage { .. }
        | Request::Barrier { .. }
        | Request::Sealed { .. } => unreachable!("no pg"),
    };
    // An object's current state may be asked of any OSD holding it, lease or not.
    if role != Role::Admin && !osd.may_serve {
        return Err(OpError::LeaseNotCurrent);
    }
    Ok(Some(Admitted { object }))
}

/// The answer to a request whose epoch the map did not reach in time.
pub(crate) fn map_behind(view: Option<PgView<'_>>, role: Role, pg: PgId, epoch: u64) -> OpError {
    match view {
        None => no_such_pg(pg),
        // The client retries a busy primary; a secondary's primary is told its epoch is not ours.
        Some(view) if role == Role::Primary => OpError::EpochAhead { ours: view.epoch, theirs: epoch },
        Some(view) => OpError::WrongEpoch { ours: view.epoch, theirs: epoch },
    }
}

/// After a wait (for an object's queue): the PG must still be at `epoch` with `osd` as primary.
pub(crate) fn still_primary(view: Option<PgView<'_>>, osd: u32, epoch: u64) -> Result<(), OpError> {
    let Some(view) = view else {
        return Err(OpError::WrongEpoch { ours: 0, theirs: epoch });
    };
    if view.epoch != epoch {
        return Err(OpError::WrongEpoch { ours: view.epoch, theirs: epoch });
    }
    check_primary_role(view, osd)
}

fn check_primary_role(view: PgView<'_>, osd: u32) -> Result<(), OpError> {
    match view.primary() {
        Some(primary) if primary == osd => Ok(()),
        primary => Err(OpError::NotPrimary { primary }),
    }
}

fn no_such_pg(pg: PgId) -> OpError {
    OpError::InvalidArgument(format!("pg {}.{} does not exist", pg.pool, pg.pg))
}

fn check_object(view: PgView<'_>, object: ObjectId) -> Result<ObjectId, OpError> {
    let actual = object_pg(object.inode, object.stripe, view.pg_count);
    if actual != view.pg {
        return Err(OpError::InvalidArgument(format!(
            "object {:#x}:{} belongs to pg {}.{actual}, not {}.{}",
            object.inode, object.stripe, view.pool, view.pool, view.pg
        )));
    }
    Ok(object)
}

fn check_alignment(offset_bytes: u64, length_bytes: u64) -> Result<(), OpError> {
    let page = u64::from(PAGE_SIZE_BYTES);
    if length_bytes == 0 || offset_bytes % page != 0 || length_bytes % page != 0 {
        return Err(OpError::InvalidArgument(format!(
            "range offset_bytes={offset_bytes} length_bytes={length_bytes} is empty or not 4 KiB aligned"
        )));
    }
    Ok(())
}

/// A range within an object: non-empty, 4 KiB aligned, inside the object.
fn check_range(object_size_bytes: u32, offset_bytes: u32, length_bytes: u64) -> Result<(), OpError> {
    check_alignment(u64::from(offset_bytes), length_bytes)?;
    if u64::from(offset_bytes) + length_bytes > u64::from(object_size_bytes) {
        return Err(OpError::OutOfRange(format!(
            "range offset_bytes={offset_bytes} length_bytes={length_bytes} exceeds the object size of {object_size_bytes} bytes"
        )));
    }
    Ok(())
}

/// The object and offset within it of a volume range, which must lie in one object of the PG.
fn locate(
    view: PgView<'_>,
    object_size_bytes: u32,
    inode: u64,
    offset_bytes: u64,
    length_bytes: u64,
) -> Result<(ObjectId, u32), OpError> {
    check_alignment(offset_bytes, length_bytes)?;
    let object_size = u64::from(object_size_bytes);
    let stripe = offset_bytes / object_size;
    // Cannot truncate: below the object size, a u32.
    let offset_in_object = (offset_bytes % object_size) as u32;
    if u64::from(offset_in_object) + length_bytes > object_size {
        return Err(OpError::OutOfRange(format!(
            "range offset_bytes={offset_bytes} length_bytes={length_bytes} crosses the end of object {stripe} ({object_size}-byte objects)"
        )));
    }
    let object = check_object(view, ObjectId { inode, stripe })?;
    Ok((object, offset_in_object))
}

/// A page mask within the object, with one page of data for each of its bits.
fn check_pages(object_size_bytes: u32, page_mask: u64, data_bytes: usize) -> Result<(), OpError> {
    let pages = object_size_bytes / PAGE_SIZE_BYTES;
    let outside = if pages >= 64 { 0 } else { page_mask >> pages };
    if outside != 0 {
        return Err(OpError::InvalidArgument(format!(
            "page mask {page_mask:#x} names a page past the object's {pages}"
        )));
    }
    let expected = page_mask.count_ones() as usize * PAGE_SIZE_BYTES as usize;
    if data_bytes != expected {
        return Err(OpError::InvalidArgument(format!(
            "{data_bytes} bytes of data for the {} pages of mask {page_mask:#x}, which need {expected}",
            page_mask.count_ones()
        )));
    }
    Ok(())
}

/// A primary of epoch `epoch` mints versions below `(epoch + 1) << 40` (`cluster::mint_version`);
/// a higher one is a bug or hostile, and storing it would let a later mint overflow.
fn check_version(version: u64, epoch: u64) -> Result<(), OpError> {
    if version == 0 || version >> VERSION_COUNTER_BITS > epoch {
        return Err(OpError::InvalidArgument(format!(
            "version {version:#x} cannot come from a primary of epoch {epoch}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use wire::Status;

    use super::*;

    const POOL: u32 = 1;
    const PG_COUNT: u32 = 4;
    const OBJECT_SIZE: u32 = 128 * 1024;
    const EPOCH: u64 = 7;
    /// Osd 10 is the primary; 11 and 12 the secondaries; 13 is no member.
    const MEMBERS: [u32; 3] = [10, 11, 12];

    fn view(pg: u32) -> PgView<'static> {
        PgView { pool: POOL, pg, epoch: EPOCH, pg_count: PG_COUNT, min_size: 2, members: &MEMBERS }
    }

    /// The first stripe of inode 1 that lands in `pg`.
    fn stripe_in(pg: u32) -> u64 {
        (0..).find(|&stripe| object_pg(1, stripe, PG_COUNT) == pg).expect("some stripe lands in every pg")
    }

    fn object_in(pg: u32) -> ObjectId {
        ObjectId { inode: 1, stripe: stripe_in(pg) }
    }

    fn pg_id(pg: u32) -> PgId {
        PgId { pool: POOL, pg }
    }

    fn read(pg: u32, offset_bytes: u64, length_bytes: u32) -> Request {
        Request::Read { pg: pg_id(pg), inode: 1, offset_bytes, length_bytes }
    }

    fn read_in(pg: u32) -> Request {
        read(pg, stripe_in(pg) * u64::from(OBJECT_SIZE), 4096)
    }

    fn sec_write(pg: u32, version: u64, offset_bytes: u32, length: usize) -> Request {
        Request::SecWrite {
            pg: pg_id(pg),
            object: object_in(pg),
            version,
            offset_bytes,
            data: Bytes::from(vec![0; length]),
        }
    }

    /// What admission decides for `request` at `osd`, given the PG's view and the request's
    /// epoch: `Some(Ok)` when admitted, `None` when it waits for the map, else the refusal's status.
    fn check(osd: u32, may_serve: bool, view: Option<PgView<'static>>, epoch: u64, request: Request) -> Option<Status> {
        let osd = Osd { id: osd, object_size_bytes: OBJECT_SIZE, may_serve };
        match admit(view, osd, epoch, &request) {
            Decision::Admit(_) => Some(Status::Ok),
            Decision::WaitForMap => None,
            Decision::Refuse(error) => Some(error.status()),
        }
    }

    #[test]
    fn the_primary_serves_its_pgs_ops_at_their_epoch() {
        assert_eq!(check(10, true, Some(view(2)), EPOCH, read_in(2)), Some(Status::Ok));
        let write = Request::Write {
            pg: pg_id(2),
            inode: 1,
            offset_bytes: stripe_in(2) * 131072 + 8192,
            data: Bytes::from(vec![1; 8192]),
        };
        let osd = Osd { id: 10, object_size_bytes: OBJECT_SIZE, may_serve: true };
        let Decision::Admit(admitted) = admit(Some(view(2)), osd, EPOCH, &write) else { panic!("admitted") };
        assert_eq!(admitted.object, Some((ObjectId { inode: 1, stripe: stripe_in(2) }, 8192)));
    }

    #[test]
    fn epochs() {
        // Older than ours: the requester's map is behind.
        assert_eq!(check(10, true, Some(view(2)), EPOCH - 1, read_in(2)), Some(Status::WrongEpoch));
        // Newer than ours, or a PG this map lacks: wait for the map.
        assert_eq!(check(10, true, Some(view(2)), EPOCH + 1, read_in(2)), None);
        assert_eq!(check(10, true, None, EPOCH, read_in(2)), None);
        // No map could have routed epoch 0 to a PG.
        assert_eq!(check(10, true, None, 0, read_in(2)), Some(Status::InvalidArgument));
        // Secondary ops are held to the epoch the same way.
        assert_eq!(
            check(11, true, Some(view(2)), EPOCH - 1, sec_write(2, EPOCH << 40, 0, 4096)),
            Some(Status::WrongEpoch)
        );
        assert_eq!(check(11, true, Some(view(2)), EPOCH + 1, sec_write(2, EPOCH << 40, 0, 4096)), None);
    }

    #[test]
    fn when_the_map_does_not_catch_up() {
        let status = |view, role| map_behind(view, role, pg_id(2), EPOCH + 1).status();
        assert_eq!(status(Some(view(2)), Role::Primary), Status::Busy);
        assert_eq!(status(Some(view(2)), Role::Secondary), Status::WrongEpoch);
        assert_eq!(status(None, Role::Primary), Status::InvalidArgument);
    }

    #[test]
    fn roles() {
        assert_eq!(check(11, true, Some(view(2)), EPOCH, read_in(2)), Some(Status::NotPrimary));
        assert_eq!(check(13, true, Some(view(2)), EPOCH, read_in(2)), Some(Status::NotPrimary));
        assert_eq!(check(11, true, Some(view(2)), EPOCH, sec_write(2, EPOCH << 40, 0, 4096)), Some(Status::Ok));
        assert_eq!(
            check(13, true, Some(view(2)), EPOCH, sec_write(2, EPOCH << 40, 0, 4096)),
            Some(Status::InvalidArgument)
        );
        // Object queries hold at any epoch, from any OSD.
        let info = Request::ObjectInfo { pg: pg_id(2), object: object_in(2) };
        assert_eq!(check(13, false, Some(view(2)), 0, info.clone()), Some(Status::Ok));
        assert_eq!(check(13, false, None, 0, info), Some(Status::InvalidArgument));
    }

    #[test]
    fn ranges() {
        let base = stripe_in(2) * u64::from(OBJECT_SIZE);
        assert_eq!(check(10, true, Some(view(2)), EPOCH, read(2, base, 0)), Some(Status::InvalidArgument));
        assert_eq!(check(10, true, Some(view(2)), EPOCH, read(2, base + 512, 4096)), Some(Status::InvalidArgument));
        assert_eq!(check(10, true, Some(view(2)), EPOCH, read(2, base, 1000)), Some(Status::InvalidArgument));
        assert_eq!(check(10, true, Some(view(2)), EPOCH, read(2, base + 124 * 1024, 8192)), Some(Status::OutOfRange));
        assert_eq!(check(10, true, Some(view(2)), EPOCH, read(2, base, OBJECT_SIZE)), Some(Status::Ok));
        // An object of another PG.
        let elsewhere = stripe_in(3) * u64::from(OBJECT_SIZE);
        assert_eq!(check(10, true, Some(view(2)), EPOCH, read(2, elsewhere, 4096)), Some(Status::InvalidArgument));
        assert_eq!(
            check(11, true, Some(view(2)), EPOCH, sec_write(2, EPOCH << 40, 4096, 0)),
            Some(Status::InvalidArgument)
        );
        assert_eq!(
            check(11, true, Some(view(2)), EPOCH, sec_write(2, EPOCH << 40, 124 * 1024, 8192)),
            Some(Status::OutOfRange)
        );
        let sec_read = Request::SecRead { pg: pg_id(2), object: object_in(2), offset_bytes: 100, length_bytes: 4096 };
        assert_eq!(check(11, true, Some(view(2)), EPOCH, sec_read), Some(Status::InvalidArgument));
    }

    #[test]
    fn versions_a_primary_of_the_epoch_could_mint() {
        assert_eq!(check(11, true, Some(view(2)), EPOCH, sec_write(2, (EPOCH << 40) + 5, 0, 4096)), Some(Status::Ok));
        assert_eq!(check(11, true, Some(view(2)), EPOCH, sec_write(2, 1, 0, 4096)), Some(Status::Ok));
        assert_eq!(check(11, true, Some(view(2)), EPOCH, sec_write(2, 0, 0, 4096)), Some(Status::InvalidArgument));
        assert_eq!(
            check(11, true, Some(view(2)), EPOCH, sec_write(2, (EPOCH + 1) << 40, 0, 4096)),
            Some(Status::InvalidArgument)
        );
        let delete = Request::SecDelete { pg: pg_id(2), object: object_in(2), version: (EPOCH + 1) << 40 };
        assert_eq!(check(11, true, Some(view(2)), EPOCH, delete), Some(Status::InvalidArgument));
    }

    #[test]
    fn pages_name_pages_of_the_object_with_a_page_of_data_each() {
        let pages = |page_mask: u64, pages: usize, base_version: u64| Request::SecWritePages {
            pg: pg_id(2),
            object: object_in(2),
            base_version,
            version: EPOCH << 40,
            page_mask,
            data: Bytes::from(vec![0; pages * 4096]),
        };
        let check_pages = |request| check(11, true, Some(view(2)), EPOCH, request);
        assert_eq!(check_pages(pages(0b1011, 3, 5)), Some(Status::Ok));
        assert_eq!(check_pages(pages(1 << 31, 1, 5)), Some(Status::Ok));
        // No page, a page past the object's 32, data for another count of pages.
        assert_eq!(check_pages(pages(0, 0, 5)), Some(Status::InvalidArgument));
        assert_eq!(check_pages(pages(1 << 32, 1, 5)), Some(Status::InvalidArgument));
        assert_eq!(check_pages(pages(0b11, 1, 5)), Some(Status::InvalidArgument));
        assert_eq!(check_pages(pages(0b11, 3, 5)), Some(Status::InvalidArgument));
        // A base at or above the version written.
        assert_eq!(check_pages(pages(0b1, 1, EPOCH << 40)), Some(Status::InvalidArgument));
        // Only members take them.
        assert_eq!(check(13, true, Some(view(2)), EPOCH, pages(0b1, 1, 5)), Some(Status::InvalidArgument));
        // A replace may name no page (a copy of an object that holds none), nothing else.
        let replace = |page_mask: u64, pages: usize| Request::SecReplace {
            pg: pg_id(2),
            object: object_in(2),
            version: EPOCH << 40,
            page_mask,
            data: Bytes::from(vec![0; pages * 4096]),
        };
        assert_eq!(check_pages(replace(0, 0)), Some(Status::Ok));
        assert_eq!(check_pages(replace(0b101, 2)), Some(Status::Ok));
        assert_eq!(check_pages(replace(1 << 32, 1)), Some(Status::InvalidArgument));
        assert_eq!(check_pages(replace(0b11, 1)), Some(Status::InvalidArgument));
        assert_eq!(check(13, true, Some(view(2)), EPOCH, replace(0b1, 1)), Some(Status::InvalidArgument));
    }

    #[test]
    fn no_lease_no_service_after_every_other_check() {
        assert_eq!(check(10, false, Some(view(2)), EPOCH, read_in(2)), Some(Status::Busy));
        assert_eq!(check(11, false, Some(view(2)), EPOCH, sec_write(2, EPOCH << 40, 0, 4096)), Some(Status::Busy));
        // The earlier checks answer first.
        assert_eq!(check(10, false, Some(view(2)), EPOCH - 1, read_in(2)), Some(Status::WrongEpoch));
        assert_eq!(check(11, false, Some(view(2)), EPOCH, read_in(2)), Some(Status::NotPrimary));
        assert_eq!(check(10, false, Some(view(2)), EPOCH, read(2, 1, 4096)), Some(Status::InvalidArgument));
    }

    #[test]
    fn an_epoch_too_large_for_versions_is_refused() {
        let huge = 1u64 << 24;
        let view = PgView { epoch: huge, ..view(2) };
        assert_eq!(check(10, true, Some(view), huge, read_in(2)), Some(Status::InvalidArgument));
    }

    #[test]
    fn ops_without_a_pg_are_admitted() {
        for request in [
            Request::Flush,
            Request::Ping,
            Request::Space,
            Request::PgStates,
            Request::VolumeRedundancy { inode: 1 },
            Request::VolumeUsage { inode: 1 },
        ] {
            assert_eq!(check(13, false, None, 0, request), Some(Status::Ok));
        }
    }

    #[test]
    fn still_primary_after_a_wait() {
        assert!(still_primary(Some(view(2)), 10, EPOCH).is_ok());
        assert_eq!(still_primary(Some(view(2)), 10, EPOCH - 1).unwrap_err().status(), Status::WrongEpoch);
        assert_eq!(still_primary(Some(view(2)), 11, EPOCH).unwrap_err().status(), Status::NotPrimary);
        assert_eq!(still_primary(None, 10, EPOCH).unwrap_err().status(), Status::WrongEpoch);
    }
}
