//! A measurement, not a check: QD1 pings, 4 KiB reads and 4 KiB writes through a primary of three in-process
//! OSDs, with the latency and the thread wake-ups per op of each OSD thread and of the client
//! (voluntary context switches from `/proc/self/task/*/status`: each is one sleep, so one
//! wake-up). ADR 0008 records the results.
//!
//! `cargo test -p osd --test qd1 -- --ignored --nocapture`; `BASALT_OSD_SPIN_US=N` sets the
//! OSDs' spin, `BASALT_QD1_OPS=N` the ops per workload, and `BASALT_OSD_TEST_DIR=/dev/shm`
//! puts the engines on tmpfs to take the drive out of the numbers.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{members, pattern, Cluster, INODE, OBJECT_SIZE, PG_COUNT};
use wire::{PgId, Request, Response};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|text| text.parse().ok()).unwrap_or(default)
}

/// Voluntary context switches per thread name, summed over threads of the same name.
fn switches() -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for entry in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else { continue };
        let name = status.lines().find_map(|line| line.strip_prefix("Name:")).unwrap_or("").trim().to_string();
        let voluntary = status
            .lines()
            .find_map(|line| line.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|value| value.trim().parse::<u64>().ok())
            .unwrap_or(0);
        *counts.entry(name).or_insert(0) += voluntary;
    }
    counts
}

/// Voluntary context switches of the calling thread.
fn own_switches() -> u64 {
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    status.lines().find_map(|line| line.strip_prefix("voluntary_ctxt_switches:")).unwrap().trim().parse().unwrap()
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    let rank = ((sorted.len() as f64 * fraction).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[test]
#[ignore = "a measurement; run by hand"]
fn qd1_latency_and_wakeups() {
    let spin_us = env_u64("BASALT_OSD_SPIN_US", 0);
    let ops = env_u64("BASALT_QD1_OPS", 3000) as usize;
    let cluster = Cluster::start();
    let address = cluster.address(1);
    let replica_address = cluster.address(2);
    // Objects whose primary is osd.1.
    let targets: Vec<(u64, PgId)> = (0..4096u64)
        .map(|stripe| (stripe, cluster::object_pg(INODE, stripe, PG_COUNT)))
        .filter(|(_, pg)| members(*pg)[0] == 1)
        .map(|(stripe, pg)| (stripe, PgId { pool: common::POOL, pg }))
        .take(256)
        .collect();
    // Settle the maps: one write through every member.
    let connection = cluster.connect(1);
    let (stripe, pg) = targets[0];
    let warm =
        Request::Write { pg, inode: INODE, offset_bytes: stripe * u64::from(OBJECT_SIZE), data: pattern(0, 4096) };
    assert_eq!(cluster.call_settled(&connection, 1, warm).response, Response::Write);
    drop(connection);

    println!("qd1: spin_us={spin_us} ops={ops}");
    for workload in ["ping", "read", "write", "secwrite"] {
        let targets = targets.clone();
        let address = address.clone();
        let replica_address = replica_address.clone();
        let before = switches();
        let client = std::thread::Builder::new()
            .name("client".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                runtime.block_on(async move {
                    let address = if workload == "secwrite" { &replica_address } else { &address };
                    let connection = net::connect(address).await.unwrap();
                    let switches_before = own_switches();
                    let mut latencies = Vec::with_capacity(ops);
                    let pages = u64::from(OBJECT_SIZE) / 4096;
                    for index in 0..ops {
                        let (stripe, pg) = targets[index % targets.len()];
                        let offset_bytes = stripe * u64::from(OBJECT_SIZE) + (index as u64 * 7 % pages) * 4096;
                        let request = match workload {
                            "write" => {
                                Request::Write { pg, inode: INODE, offset_bytes, data: pattern(index as u8, 4096) }
                            }
                            "read" => Request::Read { pg, inode: INODE, offset_bytes, length_bytes: 4096 },
                            // Straight to a replica's engine: one hop and one journal write.
                            "secwrite" => Request::SecWrite {
                                pg,
                                object: wire::ObjectId { inode: INODE, stripe },
                                version: (1 << 40) + 1_000_000 + index as u64,
                                offset_bytes: (offset_bytes % u64::from(OBJECT_SIZE)) as u32,
                                data: pattern(index as u8, 4096),
                            },
                            _ => Request::Ping,
                        };
                        let started = Instant::now();
                        let reply = connection.call(1, request).await.unwrap();
                        latencies.push(started.elapsed());
                        assert_eq!(reply.response.status(), wire::Status::Ok, "{reply:?}");
                    }
                    (latencies, own_switches() - switches_before)
                })
            })
            .unwrap();
        let (mut latencies, client_switches) = client.join().unwrap();
        let after = switches();
        latencies.sort();
        let mean = latencies.iter().sum::<Duration>() / latencies.len() as u32;
        let per_op = |name: &str| {
            let delta = after.get(name).copied().unwrap_or(0) - before.get(name).copied().unwrap_or(0);
            delta as f64 / ops as f64
        };
        println!(
            "qd1 {workload}: mean={:.1}us p50={:.1}us p99={:.1}us; wake-ups per op: osd.1 (primary)={:.2} osd.2={:.2} osd.3={:.2} client={:.2}",
            mean.as_secs_f64() * 1e6,
            percentile(&latencies, 0.5).as_secs_f64() * 1e6,
            percentile(&latencies, 0.99).as_secs_f64() * 1e6,
            per_op("osd-o1"),
            per_op("osd-o2"),
            per_op("osd-o3"),
            client_switches as f64 / ops as f64,
        );
    }
}
