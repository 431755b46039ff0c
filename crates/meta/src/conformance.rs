//! The conformance suite: the behaviour every `MetaStore` backend must share, written once.
//!
//! Each check is a public async function taking a fresh, empty store. A backend's tests
//! instantiate all of them with [`conformance_tests!`](crate::conformance_tests), which
//! generates one `#[tokio::test]` per check around a harness function that returns the store
//! and a guard keeping its resources (temporary directory, server task, etcd process) alive.
//!
//! The lease checks use TTLs of 2 s, the shortest etcd grants with its default timing, and
//! allow generous margins for expiry because etcd checks leases every 500 ms and the test
//! machine is shared. Every wait is bounded, so a broken backend fails instead of hanging.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{sleep, timeout, Instant};

use crate::{
    campaign, Compare, CompareOp, KeyValue, LeaseId, MetaError, MetaStore, Txn, TxnOp, TxnOpResult, WatchEvent,
    WatchEventKind, WatchStream,
};

/// The lease TTL of the lease checks.
pub const LEASE_TTL_S: u64 = 2;

/// How long after its TTL an unrenewed lease must be gone.
const LEASE_EXPIRY_MARGIN: Duration = Duration::from_secs(5);

/// How long a watch may take to deliver an event that was already committed.
const WATCH_DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);

/// Generates one `#[tokio::test]` per conformance check.
///
/// `$harness` is an async function returning `(Arc<dyn MetaStore>, Guard)`; the guard is kept
/// until the check ends. The calling crate needs tokio with the `macros` and `rt-multi-thread`
/// features.
#[macro_export]
macro_rules! conformance_tests {
    ($harness:path) => {
        $crate::conformance_tests!(@each $harness;
            put_get_list_delete,
            txn_semantics,
            txn_cas_race,
            watch_order,
            watch_concurrent_writers,
            watch_replay_and_compaction,
            lease_expiry,
            lease_keep_alive,
            lease_revoke,
            election_takeover
        );
    };
    (@each $harness:path; $($check:ident),*) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                let (store, guard) = $harness().await;
                $crate::conformance::$check(store).await;
                drop(guard);
            }
        )*
    };
}

async fn put(store: &dyn MetaStore, key: &str, value: &str) -> i64 {
    store.put(key, value.as_bytes().to_vec(), None).await.unwrap_or_else(|error| panic!("put {key}: {error}"))
}

async fn get(store: &dyn MetaStore, key: &str) -> Option<KeyValue> {
    store.get(key).await.unwrap_or_else(|error| panic!("get {key}: {error}"))
}

async fn current_revision(store: &dyn MetaStore) -> i64 {
    store.list_with_revision("/conformance-revision-probe/").await.expect("list").revision
}

async fn next_event(watch: &mut WatchStream) -> WatchEvent {
    match timeout(WATCH_DELIVERY_TIMEOUT, watch.next()).await {
        Ok(Some(Ok(event))) => event,
        Ok(Some(Err(error))) => panic!("watch ended with an error: {error}"),
        Ok(None) => panic!("watch ended without an error"),
        Err(_) => panic!("no watch event within {WATCH_DELIVERY_TIMEOUT:?}"),
    }
}

/// Asserts that no event arrives within `wait`.
async fn assert_no_event(watch: &mut WatchStream, wait: Duration) {
    if let Ok(item) = timeout(wait, watch.next()).await {
        panic!("unexpected watch item {item:?}");
    }
}

fn assert_event(event: &WatchEvent, kind: WatchEventKind, key: &str, value: &str) {
    assert_eq!((event.kind, event.kv.key.as_str()), (kind, key), "event {event:?}");
    if kind == WatchEventKind::Put {
        assert_eq!(event.kv.value, value.as_bytes(), "event {event:?}");
        assert_eq!(event.kv.mod_revision, event.revision, "event {event:?}");
    } else {
        assert_eq!(event.kv.mod_revision, event.revision, "event {event:?}");
    }
}

/// Polls `condition` every 100 ms until it holds, panicking with `what` after `limit`.
async fn eventually<F, Fut>(limit: Duration, what: &str, mut condition: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if condition().await {
            return start.elapsed();
        }
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        sleep(Duration::from_millis(100)).await;
    }
}

/// Keeps `lease` alive every 500 ms until the returned sender is dropped or sent to.
fn keep_alive_in_background(store: Arc<dyn MetaStore>, lease: LeaseId) -> tokio::sync::oneshot::Sender<()> {
    let (stop_sender, mut stop_receiver) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = &mut stop_receiver => return,
                _ = sleep(Duration::from_millis(500)) => {}
            }
            if let Err(error) = store.lease_keep_alive(lease).await {
                panic!("keep-alive of lease {lease}: {error}");
            }
        }
    });
    stop_sender
}

/// Put, get, list and delete, with the revision, version and create revision rules.
pub async fn put_get_list_delete(store: Arc<dyn MetaStore>) {
    let store = store.as_ref();
    assert_eq!(get(store, "/c/a").await, None);
    let revision_a1 = put(store, "/c/a", "1").await;
    assert!(revision_a1 > 0);
    let a = get(store, "/c/a").await.expect("/c/a after put");
    assert_eq!(a.value, b"1");
    assert_eq!((a.create_revision, a.mod_revision, a.version, a.lease), (revision_a1, revision_a1, 1, None));

    let revision_a2 = put(store, "/c/a", "2").await;
    assert_eq!(revision_a2, revision_a1 + 1);
    let a = get(store, "/c/a").await.expect("/c/a after second put");
    assert_eq!(
        (a.value.as_slice(), a.create_revision, a.mod_revision, a.version),
        (&b"2"[..], revision_a1, revision_a2, 2)
    );

    // Keys just outside the prefix, and one that sorts between, must not confuse the listing.
    put(store, "/c/c", "3").await;
    put(store, "/c/b/nested", "4").await;
    put(store, "/c", "outside").await;
    put(store, "/c0", "outside").await;
    put(store, "/b/x", "outside").await;
    let listing = store.list_with_revision("/c/").await.expect("list /c/");
    let keys: Vec<&str> = listing.kvs.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, ["/c/a", "/c/b/nested", "/c/c"]);
    assert_eq!(listing.revision, current_revision(store).await);
    assert_eq!(listing.revision, revision_a2 + 5);
    let all = store.list("").await.expect("list everything");
    assert_eq!(all.len(), 6);
    assert!(all.windows(2).all(|pair| pair[0].key < pair[1].key));
    assert!(store.list("/nothing/").await.expect("list /nothing/").is_empty());

    // Values are bytes, not text.
    let binary: Vec<u8> = (0..=255).collect();
    store.put("/c/binary", binary.clone(), None).await.expect("put binary");
    assert_eq!(get(store, "/c/binary").await.expect("binary").value, binary);
    store.put("/c/empty", Vec::new(), None).await.expect("put empty");
    assert_eq!(get(store, "/c/empty").await.expect("empty").value, b"");

    let before_delete = current_revision(store).await;
    assert!(store.delete("/c/a").await.expect("delete /c/a"));
    assert_eq!(current_revision(store).await, before_delete + 1);
    assert_eq!(get(store, "/c/a").await, None);
    assert!(!store.delete("/c/a").await.expect("delete /c/a again"));
    assert_eq!(current_revision(store).await, before_delete + 1, "deleting a missing key changed the revision");

    // A key created again starts over.
    let revision_a3 = put(store, "/c/a", "3").await;
    let a = get(store, "/c/a").await.expect("/c/a recreated");
    assert_eq!((a.create_revision, a.version), (revision_a3, 1));
}

/// Comparisons, both branches, shared revisions, reads of earlier writes, refused transactions.
pub async fn txn_semantics(store: Arc<dyn MetaStore>) {
    let store = store.as_ref();
    let create = || Txn {
        compares: vec![Compare::absent("/t/k")],
        success: vec![TxnOp::put("/t/k", "v1", None)],
        failure: vec![TxnOp::get("/t/k")],
    };
    let response = store.txn(create()).await.expect("create txn");
    assert!(response.succeeded);
    assert_eq!(response.results, [TxnOpResult::Put]);
    let created_revision = response.revision;
    let k = get(store, "/t/k").await.expect("/t/k");
    assert_eq!((k.create_revision, k.mod_revision, k.version), (created_revision, created_revision, 1));

    let response = store.txn(create()).await.expect("second create txn");
    assert!(!response.succeeded);
    assert_eq!(response.revision, created_revision, "a failed read-only txn changed the revision");
    assert_eq!(response.results, [TxnOpResult::Get(Some(k.clone()))]);

    let holds = |compare: Compare| async move {
        let response = store.txn(Txn { compares: vec![compare.clone()], success: vec![], failure: vec![] }).await;
        response.unwrap_or_else(|error| panic!("txn {compare:?}: {error}")).succeeded
    };
    assert!(holds(Compare::value("/t/k", CompareOp::Equal, "v1")).await);
    assert!(!holds(Compare::value("/t/k", CompareOp::NotEqual, "v1")).await);
    assert!(holds(Compare::value("/t/k", CompareOp::Greater, "v0")).await);
    assert!(holds(Compare::value("/t/k", CompareOp::Less, "v2")).await);
    assert!(!holds(Compare::value("/t/missing", CompareOp::Equal, "")).await, "value compare on a missing key");
    assert!(!holds(Compare::value("/t/missing", CompareOp::NotEqual, "x")).await, "value compare on a missing key");
    assert!(holds(Compare::version("/t/k", CompareOp::Equal, 1)).await);
    assert!(holds(Compare::version("/t/k", CompareOp::Greater, 0)).await);
    assert!(holds(Compare::version("/t/missing", CompareOp::Equal, 0)).await);
    assert!(holds(Compare::create_revision("/t/k", CompareOp::Equal, created_revision)).await);
    assert!(holds(Compare::mod_revision("/t/k", CompareOp::Less, created_revision + 1)).await);
    assert!(!holds(Compare::mod_revision("/t/k", CompareOp::NotEqual, created_revision)).await);
    assert!(holds(Compare::absent("/t/missing")).await);
    assert!(holds(Compare::present("/t/k")).await);

    // All comparisons must hold.
    let response = store
        .txn(Txn {
            compares: vec![Compare::present("/t/k"), Compare::present("/t/missing")],
            success: vec![TxnOp::put("/t/wrong", "x", None)],
            failure: vec![TxnOp::get("/t/missing")],
        })
        .await
        .expect("two-compare txn");
    assert!(!response.succeeded);
    assert_eq!(response.results, [TxnOpResult::Get(None)]);
    assert_eq!(get(store, "/t/wrong").await, None);

    // The writes of one transaction share one revision, and a read sees the earlier writes.
    put(store, "/t/old", "x").await;
    let response = store
        .txn(Txn {
            compares: vec![Compare::version("/t/k", CompareOp::Equal, 1)],
            success: vec![
                TxnOp::put("/t/x", "x", None),
                TxnOp::put("/t/k", "v2", None),
                TxnOp::delete("/t/old"),
                TxnOp::delete("/t/never"),
                TxnOp::get("/t/x"),
            ],
            failure: vec![],
        })
        .await
        .expect("multi-op txn");
    assert!(response.succeeded);
    let revision = response.revision;
    match response.results.as_slice() {
        [TxnOpResult::Put, TxnOpResult::Put, TxnOpResult::Delete { deleted: true }, TxnOpResult::Delete { deleted: false }, TxnOpResult::Get(Some(x))] =>
        {
            assert_eq!((x.value.as_slice(), x.mod_revision, x.version), (&b"x"[..], revision, 1));
        }
        other => panic!("multi-op txn results {other:?}"),
    }
    assert_eq!(get(store, "/t/x").await.expect("/t/x").mod_revision, revision);
    let k = get(store, "/t/k").await.expect("/t/k");
    assert_eq!((k.mod_revision, k.version, k.create_revision), (revision, 2, created_revision));
    assert_eq!(get(store, "/t/old").await, None);
    assert_eq!(current_revision(store).await, revision);

    // A transaction that writes nothing does not change the revision.
    let response = store
        .txn(Txn { compares: vec![], success: vec![TxnOp::delete("/t/never"), TxnOp::get("/t/k")], failure: vec![] })
        .await
        .expect("no-op txn");
    assert!(response.succeeded);
    assert_eq!(response.revision, revision);

    // Two writes of one key in one branch are refused, and nothing is written.
    let refused = store
        .txn(Txn {
            compares: vec![],
            success: vec![TxnOp::put("/t/dup", "1", None), TxnOp::put("/t/dup", "2", None)],
            failure: vec![],
        })
        .await;
    assert!(matches!(refused, Err(MetaError::Other { .. })), "duplicate puts: {refused:?}");
    assert_eq!(get(store, "/t/dup").await, None);
    assert_eq!(current_revision(store).await, revision);
}

/// Eight tasks increment one counter with compare-and-swap retries; the counter ends at 8.
pub async fn txn_cas_race(store: Arc<dyn MetaStore>) {
    const TASKS: u64 = 8;
    let key = "/cas/counter";
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut attempts = 0u32;
            loop {
                attempts += 1;
                assert!(attempts < 1000, "no progress after {attempts} attempts");
                let current = store.get(key).await.expect("get counter");
                let (compare, count) = match &current {
                    None => (Compare::absent(key), 0),
                    Some(kv) => {
                        let text = std::str::from_utf8(&kv.value).expect("counter is text");
                        (Compare::mod_revision(key, CompareOp::Equal, kv.mod_revision), text.parse::<u64>().expect("n"))
                    }
                };
                let response = store
                    .txn(Txn {
                        compares: vec![compare],
                        success: vec![TxnOp::put(key, (count + 1).to_string(), None)],
                        failure: vec![],
                    })
                    .await
                    .expect("cas txn");
                if response.succeeded {
                    return attempts;
                }
            }
        }));
    }
    let mut attempts_total = 0;
    for task in tasks {
        attempts_total += task.await.expect("cas task");
    }
    let counter = get(store.as_ref(), key).await.expect("counter");
    assert_eq!(counter.value, TASKS.to_string().as_bytes(), "after {attempts_total} attempts");
    assert_eq!(counter.version, 8);
}

/// A watch delivers every change under its prefix, in revision order, and nothing else.
pub async fn watch_order(store: Arc<dyn MetaStore>) {
    put(store.as_ref(), "/w/before", "ignored").await;
    let mut watch = store.watch("/w/", None).await.expect("watch /w/");
    let mut second = store.watch("/w/", None).await.expect("second watch /w/");
    let mut single = store.watch("/w/b", None).await.expect("watch /w/b");

    let store = store.as_ref();
    let revision_a = put(store, "/w/a", "1").await;
    put(store, "/x/outside", "1").await;
    let revision_b = put(store, "/w/b", "2").await;
    assert!(store.delete("/w/a").await.expect("delete /w/a"));
    let txn = store
        .txn(Txn {
            compares: vec![],
            success: vec![TxnOp::put("/w/c", "3", None), TxnOp::put("/w/d", "4", None), TxnOp::delete("/w/b")],
            failure: vec![],
        })
        .await
        .expect("txn");
    put(store, "/w0", "outside").await;
    let revision_a2 = put(store, "/w/a", "5").await;

    for watch in [&mut watch, &mut second] {
        let event = next_event(watch).await;
        assert_event(&event, WatchEventKind::Put, "/w/a", "1");
        assert_eq!((event.revision, event.kv.create_revision, event.kv.version), (revision_a, revision_a, 1));
        let event = next_event(watch).await;
        assert_event(&event, WatchEventKind::Put, "/w/b", "2");
        assert_eq!(event.revision, revision_b);
        let event = next_event(watch).await;
        assert_event(&event, WatchEventKind::Delete, "/w/a", "");
        assert_eq!(event.revision, revision_b + 1);
        for (kind, key, value) in [
            (WatchEventKind::Put, "/w/c", "3"),
            (WatchEventKind::Put, "/w/d", "4"),
            (WatchEventKind::Delete, "/w/b", ""),
        ] {
            let event = next_event(watch).await;
            assert_event(&event, kind, key, value);
            assert_eq!(event.revision, txn.revision);
        }
        let event = next_event(watch).await;
        assert_event(&event, WatchEventKind::Put, "/w/a", "5");
        assert_eq!((event.revision, event.kv.create_revision, event.kv.version), (revision_a2, revision_a2, 1));
        assert_no_event(watch, Duration::from_millis(300)).await;
    }

    let event = next_event(&mut single).await;
    assert_event(&event, WatchEventKind::Put, "/w/b", "2");
    let event = next_event(&mut single).await;
    assert_event(&event, WatchEventKind::Delete, "/w/b", "");
    assert_no_event(&mut single, Duration::from_millis(100)).await;

    // Dropping one watch leaves the others working.
    drop(second);
    drop(single);
    put(store, "/w/e", "6").await;
    assert_event(&next_event(&mut watch).await, WatchEventKind::Put, "/w/e", "6");
}

/// Concurrent writers: the watch sees every write once, in strictly increasing revisions.
pub async fn watch_concurrent_writers(store: Arc<dyn MetaStore>) {
    const WRITERS: usize = 4;
    const PUTS_PER_WRITER: usize = 25;
    let mut watch = store.watch("/cw/", None).await.expect("watch /cw/");
    let mut tasks = Vec::new();
    for writer in 0..WRITERS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut revisions = Vec::new();
            for index in 0..PUTS_PER_WRITER {
                let key = format!("/cw/{writer}/{index}");
                revisions.push(store.put(&key, b"x".to_vec(), None).await.expect("put"));
            }
            revisions
        }));
    }
    let mut written = Vec::new();
    for task in tasks {
        written.extend(task.await.expect("writer"));
    }
    written.sort_unstable();
    let mut seen = Vec::new();
    for _ in 0..WRITERS * PUTS_PER_WRITER {
        let event = next_event(&mut watch).await;
        assert_eq!(event.kind, WatchEventKind::Put);
        if let Some(last) = seen.last() {
            assert!(event.revision > *last, "revision {} after {last}", event.revision);
        }
        seen.push(event.revision);
    }
    assert_eq!(seen, written);
}

/// A watch from a past revision replays the history, then continues live; a compacted
/// revision is refused with `Compacted`.
pub async fn watch_replay_and_compaction(store: Arc<dyn MetaStore>) {
    let mut revisions = Vec::new();
    for index in 0..5 {
        revisions.push(put(store.as_ref(), &format!("/r/{index}"), &index.to_string()).await);
    }
    assert!(store.delete("/r/1").await.expect("delete /r/1"));
    let delete_revision = revisions[4] + 1;

    let mut watch = store.watch("/r/", Some(revisions[2])).await.expect("watch from a past revision");
    for (index, revision) in revisions.iter().enumerate().skip(2) {
        let event = next_event(&mut watch).await;
        assert_event(&event, WatchEventKind::Put, &format!("/r/{index}"), &index.to_string());
        assert_eq!(event.revision, *revision);
    }
    let event = next_event(&mut watch).await;
    assert_event(&event, WatchEventKind::Delete, "/r/1", "");
    assert_eq!(event.revision, delete_revision);
    let live_revision = put(store.as_ref(), "/r/5", "5").await;
    let event = next_event(&mut watch).await;
    assert_event(&event, WatchEventKind::Put, "/r/5", "5");
    assert_eq!(event.revision, live_revision);

    // A future start revision waits for it.
    let mut future = store.watch("/r/", Some(live_revision + 2)).await.expect("watch from a future revision");
    put(store.as_ref(), "/r/6", "6").await;
    let revision_7 = put(store.as_ref(), "/r/7", "7").await;
    let event = next_event(&mut future).await;
    assert_event(&event, WatchEventKind::Put, "/r/7", "7");
    assert_eq!(event.revision, revision_7);

    store.compact(revision_7).await.expect("compact");
    store.compact(revisions[0]).await.expect("compact an already compacted revision");
    match store.watch("/r/", Some(revisions[0])).await {
        Err(MetaError::Compacted { .. }) => {}
        Err(error) => panic!("watch from a compacted revision: {error}"),
        Ok(mut watch) => match timeout(WATCH_DELIVERY_TIMEOUT, watch.next()).await {
            Ok(Some(Err(MetaError::Compacted { .. }))) => {}
            other => panic!("watch from a compacted revision gave {other:?}"),
        },
    }
    // The compaction revision itself is still available.
    let mut watch = store.watch("/r/", Some(revision_7)).await.expect("watch from the compaction revision");
    assert_eq!(next_event(&mut watch).await.revision, revision_7);
    // An existing watch is not affected by the compaction.
    let revision_8 = put(store.as_ref(), "/r/8", "8").await;
    assert_eq!(next_event(&mut future).await.revision, revision_8);
}

/// An unrenewed lease expires and takes its keys with it.
pub async fn lease_expiry(store: Arc<dyn MetaStore>) {
    let lease = store.lease_grant(LEASE_TTL_S).await.expect("lease grant");
    store.put("/l/live", b"1".to_vec(), Some(lease)).await.expect("leased put");
    store.put("/l/plain", b"1".to_vec(), None).await.expect("plain put");
    let mut watch = store.watch("/l/", None).await.expect("watch /l/");
    let kv = get(store.as_ref(), "/l/live").await.expect("leased key");
    assert_eq!(kv.lease, Some(lease));

    let granted = Instant::now();
    sleep(Duration::from_millis(1000)).await;
    assert!(get(store.as_ref(), "/l/live").await.is_some(), "the leased key vanished before its TTL");
    let limit = Duration::from_secs(LEASE_TTL_S) + LEASE_EXPIRY_MARGIN;
    let store_ref = store.as_ref();
    eventually(limit, "the leased key disappears", || async { get(store_ref, "/l/live").await.is_none() }).await;
    assert!(granted.elapsed() >= Duration::from_secs(LEASE_TTL_S) - Duration::from_millis(100));

    let event = next_event(&mut watch).await;
    assert_event(&event, WatchEventKind::Delete, "/l/live", "");
    assert!(get(store.as_ref(), "/l/plain").await.is_some());
    assert_eq!(store.lease_keep_alive(lease).await, Err(MetaError::LeaseExpired { lease }));
    let put = store.put("/l/again", b"1".to_vec(), Some(lease)).await;
    assert_eq!(put, Err(MetaError::LeaseExpired { lease }));
    assert_eq!(get(store.as_ref(), "/l/again").await, None);
}

/// Keep-alives hold a lease and its keys past several TTLs.
pub async fn lease_keep_alive(store: Arc<dyn MetaStore>) {
    let lease = store.lease_grant(LEASE_TTL_S).await.expect("lease grant");
    store.put("/k/live", b"1".to_vec(), Some(lease)).await.expect("leased put");
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3 * LEASE_TTL_S) {
        let ttl_s = store.lease_keep_alive(lease).await.expect("keep-alive");
        assert!((1..=LEASE_TTL_S + 1).contains(&ttl_s), "keep-alive ttl_s={ttl_s}");
        assert!(get(store.as_ref(), "/k/live").await.is_some(), "leased key lost while kept alive");
        sleep(Duration::from_millis(500)).await;
    }
    store.lease_revoke(lease).await.expect("revoke");
    assert_eq!(get(store.as_ref(), "/k/live").await, None);
}

/// Revocation deletes a lease's keys at once; a key put again without the lease is detached.
pub async fn lease_revoke(store: Arc<dyn MetaStore>) {
    let lease = store.lease_grant(30).await.expect("lease grant");
    let other = store.lease_grant(30).await.expect("second lease grant");
    assert_ne!(lease, other);
    store.put("/v/a", b"1".to_vec(), Some(lease)).await.expect("leased put");
    store.put("/v/b", b"1".to_vec(), Some(lease)).await.expect("leased put");
    store.put("/v/detached", b"1".to_vec(), Some(lease)).await.expect("leased put");
    store.put("/v/detached", b"2".to_vec(), None).await.expect("detaching put");
    store.put("/v/other", b"1".to_vec(), Some(other)).await.expect("other leased put");
    assert_eq!(get(store.as_ref(), "/v/detached").await.expect("detached").lease, None);

    let mut watch = store.watch("/v/", None).await.expect("watch /v/");
    store.lease_revoke(lease).await.expect("revoke");
    assert_eq!(get(store.as_ref(), "/v/a").await, None);
    assert_eq!(get(store.as_ref(), "/v/b").await, None);
    assert!(get(store.as_ref(), "/v/detached").await.is_some());
    assert!(get(store.as_ref(), "/v/other").await.is_some());
    let first = next_event(&mut watch).await;
    let second = next_event(&mut watch).await;
    assert_eq!(first.revision, second.revision, "one revocation is one revision");
    let mut keys = [first.kv.key.clone(), second.kv.key.clone()];
    keys.sort();
    assert_eq!(keys, ["/v/a", "/v/b"]);
    assert!(first.kind == WatchEventKind::Delete && second.kind == WatchEventKind::Delete);

    assert_eq!(store.lease_keep_alive(lease).await, Err(MetaError::LeaseExpired { lease }));
    assert_eq!(store.lease_revoke(lease).await, Err(MetaError::LeaseExpired { lease }));
    assert_eq!(store.put("/v/c", b"1".to_vec(), Some(lease)).await, Err(MetaError::LeaseExpired { lease }));
    let missing = LeaseId(0x7eed_0000_0000_0001);
    assert_eq!(store.lease_keep_alive(missing).await, Err(MetaError::LeaseExpired { lease: missing }));
    store.lease_revoke(other).await.expect("revoke other");
}

/// Two candidates: one leads; the other takes over when the leader's lease is revoked, and
/// again when it expires.
pub async fn election_takeover(store: Arc<dyn MetaStore>) {
    let key = "/basalt/mon/leader";
    let lease_a = store.lease_grant(LEASE_TTL_S).await.expect("lease a");
    let lease_b = store.lease_grant(LEASE_TTL_S).await.expect("lease b");
    let keep_a = keep_alive_in_background(store.clone(), lease_a);
    let keep_b = keep_alive_in_background(store.clone(), lease_b);

    let leader_a = campaign(store.as_ref(), key, "a", lease_a).await.expect("a campaigns");
    assert_eq!(get(store.as_ref(), key).await.expect("leader key").value, b"a");
    assert!(leader_a.is_current(store.as_ref()).await.expect("is_current"));
    // Campaigning again with the same lease is idempotent.
    assert_eq!(campaign(store.as_ref(), key, "a", lease_a).await.expect("a again"), leader_a);

    let candidate_b = {
        let store = store.clone();
        tokio::spawn(async move { campaign(store.as_ref(), key, "b", lease_b).await })
    };
    sleep(Duration::from_millis(700)).await;
    assert!(!candidate_b.is_finished(), "b became leader while a held the lease");

    // Revocation: b takes over at once.
    drop(keep_a);
    let lost_a = {
        let store = store.clone();
        let leader_a = leader_a.clone();
        tokio::spawn(async move { leader_a.lost(store.as_ref()).await })
    };
    store.lease_revoke(lease_a).await.expect("revoke a");
    let leader_b = timeout(Duration::from_secs(5), candidate_b)
        .await
        .expect("b takes over within 5 s of the revocation")
        .expect("task")
        .expect("b campaigns");
    assert!(leader_b.revision > leader_a.revision, "fencing token must grow");
    assert_eq!(get(store.as_ref(), key).await.expect("leader key").value, b"b");
    timeout(Duration::from_secs(5), lost_a).await.expect("a learns it lost").expect("task").expect("lost");
    assert!(!leader_a.is_current(store.as_ref()).await.expect("is_current"));

    // Expiry: a campaigns again with a new lease, b stops renewing, a takes over.
    let lease_a2 = store.lease_grant(LEASE_TTL_S).await.expect("lease a2");
    let keep_a2 = keep_alive_in_background(store.clone(), lease_a2);
    let candidate_a = {
        let store = store.clone();
        tokio::spawn(async move { campaign(store.as_ref(), key, "a", lease_a2).await })
    };
    sleep(Duration::from_millis(700)).await;
    assert!(!candidate_a.is_finished(), "a became leader while b held the lease");
    let stopped = Instant::now();
    drop(keep_b);
    let limit = Duration::from_secs(LEASE_TTL_S) + LEASE_EXPIRY_MARGIN + Duration::from_secs(1);
    let leader_a2 = timeout(limit, candidate_a)
        .await
        .expect("a takes over after b's lease expires")
        .expect("task")
        .expect("a campaigns");
    assert!(stopped.elapsed() >= Duration::from_secs(LEASE_TTL_S) - Duration::from_millis(600));
    assert!(leader_a2.revision > leader_b.revision);
    assert!(!leader_b.is_current(store.as_ref()).await.expect("is_current"));
    assert!(leader_a2.is_current(store.as_ref()).await.expect("is_current"));

    leader_a2.resign(store.as_ref()).await.expect("resign");
    assert_eq!(get(store.as_ref(), key).await, None);
    drop(keep_a2);
    store.lease_revoke(lease_a2).await.expect("revoke a2");
}
