//! The cluster end to end, as separate processes: a metadata store (a real etcd, or the
//! embedded store served by the mon), one `basalt mon` and three `basalt osd` processes on
//! 127.0.0.2-4 inside a network namespace the test creates, a pool of size 3 made with the CLI.
//!
//! Random data goes through the client library and reads back; every object touched has the
//! same version and bytes on all three replicas (checked with the OSDs' `ObjectInfo` admin op);
//! then every process is killed with SIGKILL and restarted, and everything reads back intact;
//! the volume reads back byte for byte through `basalt nbd` (the standalone gateway); finally
//! `volume rm` removes the volume and its objects from every replica.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use testkit::{wait_until, Etcd, Proc, Scratch};

const BASALT: &str = env!("CARGO_BIN_EXE_basalt");
const API: &str = "127.0.0.1:8080";
const VOLUME_BYTES: u64 = 48 << 20;
const OSD_COUNT: usize = 3;

#[derive(Clone, Copy, Debug)]
enum Store {
    Etcd,
    Embedded,
}

/// The processes of one cluster, restartable on the same files.
struct Cluster {
    store: Store,
    dir: std::path::PathBuf,
    meta_url: String,
    etcd: Option<Etcd>,
    mon: Option<Proc>,
    osds: Vec<Option<Proc>>,
}

impl Cluster {
    fn start(store: Store, scratch: &Scratch) -> Cluster {
        let dir = scratch.path().to_path_buf();
        let meta_url = match store {
            Store::Etcd => "http://127.0.0.1:2379".to_string(),
            Store::Embedded => "basalt://127.0.0.1:2390".to_string(),
        };
        for index in 0..OSD_COUNT {
            cli(&[
                "osd",
                "init",
                "--data",
                path_str(&dir.join(format!("osd{index}.img"))),
                "--size",
                "256M",
                "--sparse",
            ]);
        }
        let mut cluster =
            Cluster { store, dir, meta_url, etcd: None, mon: None, osds: (0..OSD_COUNT).map(|_| None).collect() };
        cluster.start_processes();
        cluster
    }

    fn start_processes(&mut self) {
        let dir = self.dir.clone();
        let mut mon = Command::new(BASALT);
        mon.arg("mon").args(["--api", API, "--id", "mon-a"]);
        match self.store {
            Store::Etcd => {
                self.etcd = Some(Etcd::start("127.0.0.1", 2379, 2380, &dir));
                mon.args(["--etcd", &self.meta_url]);
            }
            Store::Embedded => {
                mon.args(["--embedded", path_str(&dir.join("meta")), "--meta-listen", "127.0.0.1:2390"]);
            }
        }
        self.mon = Some(Proc::spawn("mon", &dir, &mut mon));
        wait_until(Duration::from_secs(30), "the mon API", || {
            self.mon.as_mut().expect("mon").assert_running();
            std::net::TcpStream::connect(API).ok()
        });
        for index in 0..OSD_COUNT {
            let listen = format!("127.0.0.{}:6800", index + 2);
            let data = dir.join(format!("osd{index}.img"));
            let mut command = Command::new(BASALT);
            command.args(["osd", "--etcd", &self.meta_url, "--data", path_str(&data), "--listen", &listen]).args([
                "--host",
                &format!("host{index}"),
                "--lease-ttl",
                "3",
            ]);
            self.osds[index] = Some(Proc::spawn(&format!("osd{index}"), &dir, &mut command));
        }
        wait_until(Duration::from_secs(60), "three OSDs up", || {
            for osd in self.osds.iter_mut().flatten() {
                osd.assert_running();
            }
            let listing = try_cli(&["osd", "ls", "--json", "--api", API])?;
            let value: serde_json::Value = serde_json::from_str(&listing).ok()?;
            let up = value["osds"].as_array()?.iter().filter(|osd| osd["up"] == serde_json::Value::Bool(true)).count();
            (up == OSD_COUNT).then_some(())
        });
    }

    /// SIGKILL every process, as a power cut of the whole cluster would stop them.
    fn kill_all(&mut self) {
        for osd in &mut self.osds {
            if let Some(mut osd) = osd.take() {
                osd.kill();
            }
        }
        if let Some(mut mon) = self.mon.take() {
            mon.kill();
        }
        if let Some(mut etcd) = self.etcd.take() {
            etcd.proc.kill();
        }
    }
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

fn try_cli(args: &[&str]) -> Option<String> {
    let output = Command::new(BASALT).args(args).output().expect("run basalt");
    output.status.success().then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

fn cli(args: &[&str]) -> String {
    testkit::run_ok(BASALT, args)
}

/// Writes random extents through the client, returning the volume's expected contents and the
/// stripes written.
async fn write_random(volume: &client::Volume, seed: u64) -> (Vec<u8>, BTreeSet<u64>) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut model = vec![0u8; VOLUME_BYTES as usize];
    let mut stripes = BTreeSet::new();
    let object = u64::from(volume.object_size_bytes());
    let pages = VOLUME_BYTES / 4096;
    let mut writes = Vec::new();
    for _ in 0..160 {
        let length_pages = if rng.gen_ratio(1, 4) { rng.gen_range(1..=96) } else { rng.gen_range(1..=4) };
        let first = rng.gen_range(0..pages - length_pages);
        let offset = first * 4096;
        let mut data = vec![0u8; (length_pages * 4096) as usize];
        rng.fill(&mut data[..]);
        model[offset as usize..offset as usize + data.len()].copy_from_slice(&data);
        for stripe in offset / object..=(offset + data.len() as u64 - 1) / object {
            stripes.insert(stripe);
        }
        writes.push((offset, Bytes::from(data)));
    }
    // Up to eight writes in flight, so requests are pipelined and PGs written concurrently; a
    // write that overlaps one in flight waits for the batch, so the model's order is the order
    // the cluster saw.
    let mut batch: Vec<(u64, u64, tokio::task::JoinHandle<()>)> = Vec::new();
    for (offset, data) in writes {
        let end = offset + data.len() as u64;
        if batch.len() == 8 || batch.iter().any(|&(start, stop, _)| offset < stop && start < end) {
            for (_, _, task) in batch.drain(..) {
                task.await.expect("write task");
            }
        }
        let volume = volume.clone();
        let task = tokio::spawn(async move {
            volume.write(offset, data).await.unwrap_or_else(|e| panic!("write at {offset}: {e}"));
        });
        batch.push((offset, end, task));
    }
    for (_, _, task) in batch {
        task.await.expect("write task");
    }
    (model, stripes)
}

async fn read_all(volume: &client::Volume, model: &[u8], when: &str) {
    let chunk = 1 << 20;
    let mut reads = Vec::new();
    for offset in (0..VOLUME_BYTES).step_by(chunk) {
        let volume = volume.clone();
        reads.push(tokio::spawn(async move { (offset, volume.read(offset, chunk as u32).await) }));
    }
    for read in reads {
        let (offset, result) = read.await.expect("read task");
        let data = result.unwrap_or_else(|e| panic!("{when}: read at {offset}: {e}"));
        let expected = &model[offset as usize..offset as usize + chunk];
        if data.as_ref() != expected {
            let at = data.iter().zip(expected).position(|(a, b)| a != b).unwrap_or(0);
            panic!("{when}: volume bytes differ at offset {}", offset as usize + at);
        }
    }
}

/// Every written object has the same version and bytes on each member of its PG, and those
/// bytes are what the client wrote.
async fn check_replicas(meta_url: &str, volume: &client::Volume, model: &[u8], stripes: &BTreeSet<u64>) {
    let store = cluster_watch::connect(meta_url).await.expect("connect to the metadata store");
    let map = cluster_watch::load(store.as_ref()).await.expect("load the cluster map");
    let record = map.volumes.get(volume.name()).expect("volume record");
    let pool = map.pools.get(&record.pool).expect("pool record");
    let object_bytes = volume.object_size_bytes() as usize;
    let mut connections = std::collections::HashMap::new();
    for &stripe in stripes {
        let pg = cluster::object_pg(record.id, stripe, pool.pg_count);
        let state = map.pg(pool.id, pg).expect("PG in the table");
        assert_eq!(state.members.len(), OSD_COUNT, "PG {pg} is not fully replicated: {state:?}");
        let start = stripe as usize * object_bytes;
        let expected_crc = crc32c::crc32c(&model[start..start + object_bytes]);
        let mut seen = Vec::new();
        for osd in &state.members {
            let address = map.address(*osd).expect("OSD address").to_string();
            if !connections.contains_key(&address) {
                connections.insert(address.clone(), net::connect(&address).await.expect("connect to an OSD"));
            }
            let request = wire::Request::ObjectInfo {
                pg: wire::PgId { pool: pool.id, pg },
                object: wire::ObjectId { inode: record.id, stripe },
            };
            let reply = connections[&address].call(state.epoch, request).await.expect("ObjectInfo");
            match reply.response {
                wire::Response::ObjectInfo { version, data_crc32c, present } => {
                    seen.push((*osd, version, data_crc32c, present))
                }
                other => panic!("ObjectInfo of stripe {stripe} on osd.{osd}: {other:?}"),
            }
        }
        let (_, version, crc, present) = seen[0];
        assert!(
            seen.iter().all(|&(_, v, c, p)| v == version && c == crc && p == present),
            "stripe {stripe}: replicas differ: {seen:?}"
        );
        assert_eq!(crc, expected_crc, "stripe {stripe}: replicas hold bytes the client did not write");
    }
}

/// No member of any PG still holds an object of the removed volume.
async fn check_removed(map: &cluster::ClusterMap, name: &str, stripes: &BTreeSet<u64>) {
    let record = map.volumes.get(name).expect("volume record before removal");
    let pool = map.pools.get(&record.pool).expect("pool record");
    for &stripe in stripes {
        let pg = cluster::object_pg(record.id, stripe, pool.pg_count);
        let state = map.pg(pool.id, pg).expect("PG in the table");
        for osd in &state.members {
            let connection = net::connect(map.address(*osd).expect("OSD address")).await.expect("connect to an OSD");
            let request = wire::Request::ObjectInfo {
                pg: wire::PgId { pool: pool.id, pg },
                object: wire::ObjectId { inode: record.id, stripe },
            };
            let reply = connection.call(state.epoch, request).await.expect("ObjectInfo");
            assert!(
                matches!(reply.response, wire::Response::Failed { status: wire::Status::NoSuchObject, .. }),
                "stripe {stripe} of removed volume {name} still on osd.{osd}: {:?}",
                reply.response
            );
        }
    }
}

/// `basalt nbd`, the standalone gateway: the volume reads back through it with `nbdcopy`
/// byte for byte, and SIGTERM stops it cleanly.
fn nbd_gateway_serves(scratch: &Scratch, meta_url: &str, model: &[u8]) {
    let mut command = Command::new(BASALT);
    command.args(["nbd", "--etcd", meta_url, "--listen", "127.0.0.5:10809"]);
    let mut gateway = Proc::spawn("nbd", scratch.path(), &mut command);
    let uri = "nbd://127.0.0.5:10809/v1";
    wait_until(Duration::from_secs(30), "the NBD gateway", || {
        gateway.assert_running();
        let probe = Command::new("nbdinfo").args(["--size", uri]).output().expect("run nbdinfo (libnbd-bin)");
        probe.status.success().then_some(())
    });
    let copy = Command::new("nbdcopy").args([uri, "-"]).output().expect("run nbdcopy (libnbd-bin)");
    assert!(copy.status.success(), "nbdcopy failed: {}", String::from_utf8_lossy(&copy.stderr));
    assert_eq!(copy.stdout.len(), model.len(), "size of the volume read through the gateway");
    if let Some(offset) = copy.stdout.iter().zip(model).position(|(read, written)| read != written) {
        panic!("byte {offset} read through basalt nbd differs from what was written");
    }
    let (status, took) = gateway.stop(libc::SIGTERM, Duration::from_secs(10));
    assert!(status.success(), "basalt nbd exited with {status} on SIGTERM");
    assert!(took < Duration::from_secs(5), "basalt nbd took {took:?} to stop");
}

/// `basalt status` sums the usage the mon asks the three OSDs for (wire op `Space`): each
/// holds a replica of every object written.
fn status_reports_usage(objects: usize) {
    let least = objects as u64 * 3 * (128 << 10);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let status: serde_json::Value =
            serde_json::from_str(&cli(&["status", "--json", "--api", API])).expect("status is JSON");
        let capacity = &status["capacity"];
        let reporting = capacity["reporting_osds"].as_u64().expect("reporting_osds");
        let used = capacity["used_bytes"].as_u64().unwrap_or(0);
        if reporting == 3 && used >= least {
            assert!(used <= capacity["total_bytes"].as_u64().expect("total_bytes"), "{capacity}");
            let text = cli(&["status", "--api", API]);
            assert!(text.contains("(used: ") && !text.contains("not reported") && !text.contains("from"), "{text}");
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "status does not report the usage of {objects} objects on 3 OSDs within 30 s: {capacity}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn run(store: Store) {
    let name = match store {
        Store::Etcd => "cluster-etcd",
        Store::Embedded => "cluster-embedded",
    };
    // The namespace belongs to this thread and whatever it starts.
    std::thread::spawn(move || {
        testkit::netns::enter_new();
        let scratch = Scratch::new(name);
        let mut cluster = Cluster::start(store, &scratch);
        cli(&["pool", "create", "rep3", "--replicas", "3", "--min-size", "2", "--pgs", "16", "--api", API]);
        cli(&["volume", "create", "v1", "--size", "48M", "--pool", "rep3", "--api", API]);
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        let meta_url = cluster.meta_url.clone();
        let (model, stripes) = runtime.block_on(async {
            let client = client::Client::connect(&meta_url).await.expect("client");
            let volume = client.open_volume("v1").await.expect("open v1");
            let (model, stripes) = write_random(&volume, 7).await;
            read_all(&volume, &model, "after writing").await;
            check_replicas(&meta_url, &volume, &model, &stripes).await;
            (model, stripes)
        });
        status_reports_usage(stripes.len());
        cluster.kill_all();
        cluster.start_processes();
        runtime.block_on(async {
            let client = client::Client::connect(&meta_url).await.expect("client after restart");
            let volume = client.open_volume("v1").await.expect("open v1 after restart");
            read_all(&volume, &model, "after restarting every process").await;
            check_replicas(&meta_url, &volume, &model, &stripes).await;
            nbd_gateway_serves(&scratch, &meta_url, &model);
            // Removing the volume removes its objects from every replica, in the background.
            let store = cluster_watch::connect(&meta_url).await.expect("connect to the metadata store");
            let before = cluster_watch::load(store.as_ref()).await.expect("map");
            cli(&["volume", "rm", "v1", "--now", "--api", API]);
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while cluster_watch::load(store.as_ref()).await.expect("map").volumes.contains_key("v1") {
                assert!(std::time::Instant::now() < deadline, "volume v1 still listed 60 s after volume rm");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            check_removed(&before, "v1", &stripes).await;
        });
        cluster.kill_all();
    })
    .join()
    .expect("cluster test thread");
}

#[test]
fn three_osds_on_etcd_replicate_and_survive_a_full_restart() {
    run(Store::Etcd);
}

#[test]
fn three_osds_on_the_embedded_store_replicate_and_survive_a_full_restart() {
    run(Store::Embedded);
}
