//! Leases held as an etcd cluster without a leader holds them (`hold_leases`), for the
//! simulator's elections: none expires while held; on release each gets its whole TTL again
//! (a new leader) or keeps its deadline (the old leader back).

use std::time::Duration;

use meta::{MetaError, MetaStore};
use meta_embedded::{EmbeddedMetaStore, EmbeddedOptions};

#[tokio::test(start_paused = true)]
async fn a_held_lease_outlives_its_deadline_and_gets_its_whole_ttl_on_release() {
    let store = EmbeddedMetaStore::in_memory(EmbeddedOptions::default());
    let lease = store.lease_grant(3).await.unwrap();
    store.put("/held", b"x".to_vec(), Some(lease)).await.unwrap();
    store.hold_leases();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(store.get("/held").await.unwrap().is_some(), "no lease expires while held");
    store.release_leases(true);
    tokio::time::sleep(Duration::from_millis(2_900)).await;
    assert!(store.get("/held").await.unwrap().is_some(), "a whole TTL from the release");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(store.get("/held").await.unwrap().is_none(), "expired a TTL after the release");
    assert!(matches!(MetaStore::lease_keep_alive(&store, lease).await, Err(MetaError::LeaseExpired { .. })));
}

#[tokio::test(start_paused = true)]
async fn a_lease_released_without_renewal_expires_on_its_old_deadline() {
    let store = EmbeddedMetaStore::in_memory(EmbeddedOptions::default());
    let lease = store.lease_grant(3).await.unwrap();
    store.put("/held", b"x".to_vec(), Some(lease)).await.unwrap();
    store.hold_leases();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(store.get("/held").await.unwrap().is_some(), "no lease expires while held");
    store.release_leases(false);
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(store.get("/held").await.unwrap().is_none(), "past its deadline, it expires once released");
}
