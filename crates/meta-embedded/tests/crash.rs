//! Crash test: a child process writes to an embedded store and is killed with SIGKILL at
//! random points, several times over; after each kill the store reopens with every
//! acknowledged write present and nothing invented.
//!
//! The child is this test binary running the ignored `child_writer` test. Operation `i` puts
//! `/crash/<i>`; when `i` is a multiple of 10 it also deletes `/crash/<i - 5>` in the same
//! transaction, and the child prints `acked i` after each operation returns. The log
//! compaction threshold is tiny, so kills also land inside snapshot writes and renames.
//! `BASALT_META_CRASH_CYCLES=N` sets the number of kills (default 5).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use meta::{Compare, MetaStore, Txn, TxnOp};
use meta_embedded::{EmbeddedError, EmbeddedMetaStore, EmbeddedOptions};

const DIR_ENV: &str = "BASALT_META_CRASH_CHILD_DIR";
const START_ENV: &str = "BASALT_META_CRASH_CHILD_START";
const COMPACTION_THRESHOLD_BYTES: u64 = 8 << 10;

fn options() -> EmbeddedOptions {
    EmbeddedOptions { log_compaction_threshold_bytes: COMPACTION_THRESHOLD_BYTES, ..EmbeddedOptions::default() }
}

fn key(index: u64) -> String {
    format!("/crash/{index:08}")
}

fn value(index: u64) -> Vec<u8> {
    format!("value of operation {index} ").repeat(4).into_bytes()
}

/// Whether `/crash/<index>` exists after operations `0..=last` committed.
fn expected_present(index: u64, last: u64) -> bool {
    let deleted_by = index + 5;
    index <= last && !(index % 10 == 5 && deleted_by <= last)
}

#[test]
#[ignore = "the child process of sigkill_keeps_every_acknowledged_write"]
fn child_writer() {
    let dir = std::env::var(DIR_ENV).expect("run by sigkill_keeps_every_acknowledged_write");
    let start: u64 = std::env::var(START_ENV).expect("start index").parse().expect("number");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    runtime.block_on(async {
        let store = EmbeddedMetaStore::open_with(&dir, options()).await.expect("child open");
        for index in start.. {
            let mut success = vec![TxnOp::put(key(index), value(index), None)];
            if index % 10 == 0 && index >= 10 {
                success.push(TxnOp::delete(key(index - 5)));
            }
            let txn = Txn { compares: vec![Compare::absent(key(index))], success, failure: vec![] };
            assert!(store.txn(txn).await.expect("child txn").succeeded);
            println!("acked {index}");
        }
    });
}

/// Checks the store against operations `0..=last` (plus possibly the one in flight) and
/// returns the index of the last committed operation.
async fn verify(dir: &Path, last_acked: Option<u64>) -> Option<u64> {
    let store = EmbeddedMetaStore::open_with(dir, options()).await.expect("reopen after the kill");
    let listing = store.list("/crash/").await.expect("list");
    let present: BTreeSet<u64> = listing
        .iter()
        .map(|kv| {
            let index: u64 = kv.key["/crash/".len()..].parse().expect("index");
            assert_eq!(kv.value, value(index), "value of {}", kv.key);
            index
        })
        .collect();
    let in_flight = last_acked.map_or(0, |last| last + 1);
    let last = if present.contains(&in_flight) { Some(in_flight) } else { last_acked };
    let expected: BTreeSet<u64> = match last {
        None => BTreeSet::new(),
        Some(last) => (0..=last).filter(|index| expected_present(*index, last)).collect(),
    };
    assert_eq!(present, expected, "after the last acknowledged operation {last_acked:?}");
    last
}

#[test]
fn sigkill_keeps_every_acknowledged_write() {
    let cycles: u64 = std::env::var("BASALT_META_CRASH_CYCLES").ok().and_then(|value| value.parse().ok()).unwrap_or(5);
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let mut last_committed: Option<u64> = None;
    let mut seed = std::process::id() as u64 ^ 0x9e37_79b9_7f4a_7c15;
    for cycle in 0..cycles {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let acks_before_kill = 20 + seed % 300;
        let start = last_committed.map_or(0, |last| last + 1);
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_writer", "--ignored", "--nocapture", "--test-threads=1"])
            .env(DIR_ENV, dir.path())
            .env(START_ENV, start.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the child");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut last_acked = last_committed;
        let started = Instant::now();
        let mut acks = 0;
        while acks < acks_before_kill {
            let line = lines.next().expect("the child ended early").expect("read the child's output");
            // The first acknowledgement shares a line with the test harness's "test child_writer ... ".
            if let Some((_, index)) = line.split_once("acked ") {
                let index: u64 = index.parse().unwrap();
                assert_eq!(index, last_acked.map_or(0, |last| last + 1));
                last_acked = Some(index);
                acks += 1;
                if cycle == 0 && acks == 1 {
                    // The child holds the directory lock.
                    match runtime.block_on(EmbeddedMetaStore::open(dir.path())) {
                        Err(EmbeddedError::InUse { .. }) => {}
                        Err(error) => panic!("unexpected error {error}"),
                        Ok(_) => panic!("opened a store another process has open"),
                    }
                }
            }
            assert!(started.elapsed() < Duration::from_secs(60), "the child is too slow");
        }
        child.kill().expect("SIGKILL the child");
        child.wait().unwrap();
        // Acknowledgements still in the pipe count too.
        for line in lines {
            if let Some((_, index)) = line.unwrap().split_once("acked ") {
                last_acked = Some(index.parse().unwrap());
            }
        }
        last_committed = runtime.block_on(verify(dir.path(), last_acked));
        eprintln!("cycle {cycle}: killed after operation {last_acked:?}, recovered up to {last_committed:?}");
    }
}
