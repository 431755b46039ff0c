//! Persistence of the embedded store: reopening, snapshots, torn and corrupted logs, leases
//! across restarts, and the directory lock.

use std::fs::OpenOptions;
use std::path::Path;

use meta::{Compare, MetaError, MetaStore, Txn, TxnOp};
use meta_embedded::log::{LOG_FILE_NAME, SNAPSHOT_FILE_NAME};
use meta_embedded::{EmbeddedError, EmbeddedMetaStore, EmbeddedOptions};

async fn open(dir: &Path) -> EmbeddedMetaStore {
    EmbeddedMetaStore::open(dir).await.unwrap_or_else(|error| panic!("open {}: {error}", dir.display()))
}

async fn open_with_threshold(dir: &Path, log_compaction_threshold_bytes: u64) -> EmbeddedMetaStore {
    let options = EmbeddedOptions { log_compaction_threshold_bytes, ..EmbeddedOptions::default() };
    EmbeddedMetaStore::open_with(dir, options).await.expect("open")
}

fn log_size_bytes(dir: &Path) -> u64 {
    std::fs::metadata(dir.join(LOG_FILE_NAME)).expect("log metadata").len()
}

#[tokio::test]
async fn reopen_keeps_keys_revisions_and_versions() {
    let dir = tempfile::tempdir().unwrap();
    let (listing, revision) = {
        let store = open(dir.path()).await;
        store.put("/a", b"1".to_vec(), None).await.unwrap();
        store.put("/a", b"2".to_vec(), None).await.unwrap();
        store.put("/b", vec![0, 255], None).await.unwrap();
        store.put("/c", b"gone".to_vec(), None).await.unwrap();
        store.delete("/c").await.unwrap();
        let txn = Txn {
            compares: vec![Compare::absent("/d")],
            success: vec![TxnOp::put("/d", "4", None), TxnOp::put("/e", "5", None)],
            failure: vec![],
        };
        assert!(store.txn(txn).await.unwrap().succeeded);
        let listing = store.list_with_revision("").await.unwrap();
        (listing.kvs, listing.revision)
    };
    let store = open(dir.path()).await;
    let reopened = store.list_with_revision("").await.unwrap();
    assert_eq!(reopened.kvs, listing);
    assert_eq!(reopened.revision, revision);
    assert_eq!(store.put("/f", b"6".to_vec(), None).await.unwrap(), revision + 1);
    let a = store.get("/a").await.unwrap().unwrap();
    assert_eq!((a.version, a.create_revision, a.mod_revision), (2, 1, 2));
}

#[tokio::test]
async fn leased_keys_do_not_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (old_lease, revision) = {
        let store = open(dir.path()).await;
        let lease = store.lease_grant(60).await.unwrap();
        store.put("/live/1", b"x".to_vec(), Some(lease)).await.unwrap();
        store.put("/live/2", b"x".to_vec(), Some(lease)).await.unwrap();
        store.put("/plain", b"x".to_vec(), None).await.unwrap();
        (lease, store.revision())
    };
    let store = open(dir.path()).await;
    assert_eq!(store.get("/live/1").await.unwrap(), None);
    assert_eq!(store.get("/live/2").await.unwrap(), None);
    assert!(store.get("/plain").await.unwrap().is_some());
    // Both deletions are one commit.
    assert_eq!(store.revision(), revision + 1);
    assert_eq!(store.lease_keep_alive(old_lease).await, Err(MetaError::LeaseExpired { lease: old_lease }));
    let new_lease = store.lease_grant(60).await.unwrap();
    assert_ne!(new_lease, old_lease, "a lease id from before the restart names a new lease");
    // The watch history does not survive either: watching from before the restart is refused.
    assert!(matches!(store.watch("/", Some(revision)).await, Err(MetaError::Compacted { .. })));
    let mut watch = store.watch("/", Some(revision + 1)).await.expect("the cleanup commit is in the history");
    assert_eq!(watch.next().await.unwrap().unwrap().kv.key, "/live/1");
    drop(store);
    // A restart without leased keys changes nothing.
    let store = open(dir.path()).await;
    assert_eq!(store.revision(), revision + 1);
}

#[tokio::test]
async fn log_compacts_into_a_snapshot_and_recovers_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let expected = {
        let store = open_with_threshold(dir.path(), 4096).await;
        for index in 0..300u32 {
            let key = format!("/k/{}", index % 50);
            store.put(&key, vec![u8::try_from(index % 251).unwrap(); 64], None).await.unwrap();
            if index % 7 == 0 {
                store.delete(&format!("/k/{}", (index + 3) % 50)).await.unwrap();
            }
        }
        assert!(dir.path().join(SNAPSHOT_FILE_NAME).exists(), "no snapshot was written");
        assert!(log_size_bytes(dir.path()) <= 4096 + 512, "the log was not restarted");
        store.list_with_revision("").await.unwrap()
    };
    let store = open_with_threshold(dir.path(), 4096).await;
    assert_eq!(store.list_with_revision("").await.unwrap(), expected);
}

#[tokio::test]
async fn torn_last_record_is_discarded() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path()).await;
        for index in 0..5 {
            store.put(&format!("/k/{index}"), b"value".to_vec(), None).await.unwrap();
        }
    }
    let before_last = log_size_bytes(dir.path());
    {
        let store = open(dir.path()).await;
        store.put("/k/last", vec![7; 100], None).await.unwrap();
    }
    let after_last = log_size_bytes(dir.path());
    // The reopen appended a boot record before the last put; cut inside the put's record.
    let record_start = after_last - (16 + 1 + 8 + 4 + 1 + 4 + 7 + 4 + 100 + 24);
    assert!(record_start > before_last);
    for cut in [record_start + 3, record_start + 16, after_last - 1] {
        let copy = tempfile::tempdir().unwrap();
        std::fs::copy(dir.path().join(LOG_FILE_NAME), copy.path().join(LOG_FILE_NAME)).unwrap();
        OpenOptions::new().write(true).open(copy.path().join(LOG_FILE_NAME)).unwrap().set_len(cut).unwrap();
        let store = open(copy.path()).await;
        assert_eq!(store.get("/k/last").await.unwrap(), None, "cut at {cut}");
        assert!(store.get("/k/4").await.unwrap().is_some(), "cut at {cut}");
        assert_eq!(store.revision(), 5);
        // The store goes on from the valid prefix, and that survives another reopen.
        assert_eq!(store.put("/k/after", b"x".to_vec(), None).await.unwrap(), 6);
        drop(store);
        let store = open(copy.path()).await;
        assert!(store.get("/k/after").await.unwrap().is_some());
    }
    // Zeros after the last record (a file extended but never written) are discarded too.
    let mut log = std::fs::read(dir.path().join(LOG_FILE_NAME)).unwrap();
    log.extend_from_slice(&[0; 40]);
    std::fs::write(dir.path().join(LOG_FILE_NAME), log).unwrap();
    let store = open(dir.path()).await;
    assert!(store.get("/k/last").await.unwrap().is_some());
}

#[tokio::test]
async fn corruption_in_the_middle_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let mut record_ends = Vec::new();
    {
        let store = open(dir.path()).await;
        for index in 0..5 {
            store.put(&format!("/k/{index}"), vec![1; 50], None).await.unwrap();
            record_ends.push(log_size_bytes(dir.path()));
        }
    }
    let pristine = std::fs::read(dir.path().join(LOG_FILE_NAME)).unwrap();
    // One byte in the payload of the second put, then one in the header of the third.
    for offset in [record_ends[1] - 10, record_ends[1] + 5] {
        let mut damaged = pristine.clone();
        damaged[usize::try_from(offset).unwrap()] ^= 0x40;
        std::fs::write(dir.path().join(LOG_FILE_NAME), &damaged).unwrap();
        match EmbeddedMetaStore::open(dir.path()).await {
            Err(error @ EmbeddedError::Corrupt { .. }) => {
                let message = error.to_string();
                assert!(message.contains(&dir.path().join(LOG_FILE_NAME).display().to_string()), "{message}");
                assert!(message.contains("a valid record follows"), "{message}");
                let EmbeddedError::Corrupt { offset_bytes, .. } = error else { unreachable!() };
                assert!(offset_bytes <= offset && offset_bytes >= record_ends[0], "offset_bytes={offset_bytes}");
            }
            Err(error) => panic!("unexpected error {error}"),
            Ok(_) => panic!("opened a log damaged at {offset}"),
        }
    }
    // A damaged snapshot is reported as well.
    std::fs::write(dir.path().join(LOG_FILE_NAME), &pristine).unwrap();
    {
        let store = open_with_threshold(dir.path(), 1).await;
        store.put("/k/snapshot", b"x".to_vec(), None).await.unwrap();
    }
    let mut snapshot = std::fs::read(dir.path().join(SNAPSHOT_FILE_NAME)).unwrap();
    let last = snapshot.len() - 3;
    snapshot[last] ^= 1;
    std::fs::write(dir.path().join(SNAPSHOT_FILE_NAME), snapshot).unwrap();
    match EmbeddedMetaStore::open(dir.path()).await {
        Err(EmbeddedError::Corrupt { reason, .. }) => assert!(reason.contains("snapshot"), "{reason}"),
        Err(error) => panic!("unexpected error {error}"),
        Ok(_) => panic!("opened a damaged snapshot"),
    }
}

#[tokio::test]
async fn a_second_open_is_refused_while_the_first_is_open() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    match EmbeddedMetaStore::open(dir.path()).await {
        Err(error @ EmbeddedError::InUse { .. }) => {
            assert_eq!(
                error.to_string(),
                format!("metadata store {} is in use by another process", dir.path().display())
            );
        }
        Err(error) => panic!("unexpected error {error}"),
        Ok(_) => panic!("opened the same store twice"),
    }
    drop(store);
    open(dir.path()).await;
}

#[tokio::test]
async fn oversized_transactions_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let result = store.put("/huge", vec![0; 40 << 20], None).await;
    assert!(matches!(result, Err(MetaError::Other { .. })), "{result:?}");
    assert_eq!(store.revision(), 0);
}
