//! What each OSD lists of the PGs it is a settled member of (`SecList`, what peering sees),
//! asked over the wire from the checker's node, for `images.rs` to hold against the objects
//! its disk image holds: an OSD whose index of objects by PG lost one would leave it out of
//! peering, and only this comparison sees that while the copy itself reads well.

use std::collections::BTreeMap;
use std::time::Duration;

use cluster::ClusterMap;
use mon::views::PgView;
use wire::{ObjectId, PgId, Request, Response, Status};

/// Each (osd, pool, pg)'s listing: its objects and their versions, in order.
pub(crate) type Listings = BTreeMap<(u32, u32, u32), Vec<(ObjectId, u64)>>;

const CALL_TIMEOUT: Duration = Duration::from_secs(2);
const PAGE_COUNT: u32 = 1_000;

/// Lists every settled PG on each of its acting members. A PG whose epoch moved on since the
/// views were taken (an OSD marked in again, to backfill) is left out, as `images.rs` leaves
/// out PGs not settled.
pub(crate) async fn gather(map: &ClusterMap, views: &[PgView]) -> Result<Listings, String> {
    let mut listings = Listings::new();
    'pgs: for view in views.iter().filter(|view| crate::settle::is_settled(view)) {
        let pg = PgId { pool: view.pool, pg: view.pg };
        let epoch = map.pg(view.pool, view.pg).map_or(0, |state| state.epoch);
        let mut members = Vec::new();
        for &osd in &view.acting {
            let address = map.address(osd).ok_or_else(|| format!("osd.{osd} has no address"))?;
            let connection =
                net::connect(address).await.map_err(|error| format!("connecting to osd.{osd}: {error}"))?;
            let mut entries = Vec::new();
            let mut start = ObjectId { inode: 0, stripe: 0 };
            loop {
                let request = Request::SecList { pg, start, count_max: PAGE_COUNT };
                let reply = tokio::time::timeout(CALL_TIMEOUT, connection.call(epoch, request))
                    .await
                    .map_err(|_| format!("osd.{osd} did not list {pg} in {CALL_TIMEOUT:?}"))?
                    .map_err(|error| format!("listing {pg} on osd.{osd}: {error}"))?;
                let page = match reply.response {
                    Response::SecList { entries } => entries,
                    Response::Failed { status: Status::WrongEpoch, .. } => {
                        connection.close("moved on");
                        continue 'pgs;
                    }
                    other => return Err(format!("osd.{osd} answered the listing of {pg} with {other:?}")),
                };
                let full = page.len() == PAGE_COUNT as usize;
                entries.extend(page.iter().map(|entry| (entry.object, entry.version)));
                match page.last() {
                    Some(last) if full => start = ObjectId { inode: last.object.inode, stripe: last.object.stripe + 1 },
                    _ => break,
                }
            }
            connection.close("listed");
            members.push(((osd, view.pool, view.pg), entries));
        }
        listings.extend(members);
    }
    Ok(listings)
}
