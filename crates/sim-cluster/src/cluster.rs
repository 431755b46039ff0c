//! A simulated cluster: the store, a mon, the OSDs on their disks, a pool and its volumes, and
//! the run from start to verdict.
//!
//! Each OSD is a node of the simulated network: its `osd::serve` runs in a `LocalSet` of its own
//! inside `SimNet::on_node`, so every task it spawns opens connections from that node, and
//! dropping the node's task drops all of them at once, as a crash does.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use cluster::records::{encode, ClusterRecord, FORMAT_VERSION};
use engine::{Engine, FormatOptions, OBJECT_SIZE_DEFAULT_BYTES};
use meta::MetaStore;
use meta_embedded::{EmbeddedMetaStore, EmbeddedOptions};
use net::sim::{SimNet, SimNetOptions};
use net::Listener;
use osd::{Metadata, OsdConfig, OsdEnv, Stop};
use sim::{SimDisk, SimDiskOptions, TimedDisk, TimedDiskControl, TimedDiskOptions};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::history::History;
use crate::node_store::{NodeStore, STORE_NODE};
use crate::trace::{fnv1a, Trace};
use crate::{clock, workload, Outcome, SimOptions};

/// Each OSD's simulated drive.
const DISK_BYTES: u64 = 96 << 20;
const JOURNAL_BYTES: u64 = 8 << 20;
/// The pool's PGs: few, so that a run exercises every one.
const PG_COUNT: u64 = 8;
/// How long the cluster may take to serve before the run gives up on it.
const STARTUP_DEADLINE: Duration = Duration::from_secs(60);

/// Splits one seed into independent streams, one per purpose.
pub(crate) fn derive(seed: u64, purpose: u64) -> u64 {
    fnv1a(fnv1a(0xcbf2_9ce4_8422_2325, &seed.to_le_bytes()), &purpose.to_le_bytes())
}

/// What the run shares between its tasks (all on one thread).
pub(crate) struct Run {
    pub(crate) started: Instant,
    pub(crate) network: SimNet,
    pub(crate) trace: RefCell<Trace>,
    pub(crate) history: RefCell<History>,
    pub(crate) violations: RefCell<Vec<String>>,
}

impl Run {
    pub(crate) fn record(&self, event: impl std::fmt::Display) {
        let mut trace = self.trace.borrow_mut();
        for (at, event) in self.network.take_events() {
            trace.record(at - self.started, format_args!("net {event}"));
        }
        trace.record(self.started.elapsed(), event);
    }

    pub(crate) fn violation(&self, violation: String) {
        self.record(format_args!("VIOLATION {violation}"));
        self.violations.borrow_mut().push(violation);
    }
}

/// One OSD node: its disk (which outlives the process on it) and the running process.
pub(crate) struct OsdNode {
    pub(crate) name: String,
    pub(crate) disk: TimedDiskControl,
    pub(crate) process: Option<JoinHandle<()>>,
}

/// The OSD nodes, for the faults to kill, restart and cut off.
pub(crate) struct Nodes {
    network: SimNet,
    store: Arc<dyn MetaStore>,
    run: Rc<Run>,
    osds: RefCell<Vec<OsdNode>>,
    /// Every node of the network (OSDs, clients, the store, the checker), for partitions.
    names: Vec<String>,
}

impl Nodes {
    pub(crate) fn count(&self) -> usize {
        self.osds.borrow().len()
    }

    pub(crate) fn is_running(&self, index: usize) -> bool {
        self.osds.borrow()[index].process.is_some()
    }

    /// Kills OSD `index` as a power loss would: its tasks and connections gone at once, the
    /// disk's writes in flight lost, its unflushed ones kept, lost or torn as `SimDisk` decides.
    pub(crate) async fn kill(&self, index: usize) {
        let (name, process) = {
            let mut osds = self.osds.borrow_mut();
            (osds[index].name.clone(), osds[index].process.take())
        };
        let Some(process) = process else { return };
        process.abort();
        let _ = process.await;
        self.network.kill(&name);
        self.osds.borrow()[index].disk.crash();
        self.run.record(format_args!("fault: {name} killed"));
    }

    /// Starts OSD `index` again on its disk.
    pub(crate) fn restart(&self, index: usize) {
        let mut osds = self.osds.borrow_mut();
        let node = &mut osds[index];
        if node.process.is_some() {
            return;
        }
        self.run.record(format_args!("fault: {} restarted", node.name));
        let disk = Box::new(node.disk.reopen());
        node.process = Some(spawn_osd(&self.network, &self.store, node, disk, &self.run));
    }

    /// Cuts OSD `index` off from every other node, the store included, both ways: what it
    /// sends is held until the partition heals.
    pub(crate) fn isolate(&self, index: usize) {
        let name = self.osds.borrow()[index].name.clone();
        for other in self.names.iter().filter(|other| **other != name) {
            self.network.partition(&name, other);
        }
        self.run.record(format_args!("fault: {name} cut off from every node"));
    }

    /// Heals every partition.
    pub(crate) fn heal_network(&self) {
        self.network.heal_all();
        self.run.record("fault: partitions healed");
    }

    /// Stops every OSD at once (the run is over).
    fn abort_all(&self) {
        for osd in self.osds.borrow_mut().iter_mut() {
            if let Some(process) = osd.process.take() {
                process.abort();
            }
            self.network.kill(&osd.name);
        }
    }
}

pub(crate) async fn simulate(seed: u64, options: SimOptions) -> Outcome {
    clock::install();
    let network = SimNet::new(SimNetOptions {
        seed: derive(seed, 1),
        latency_min: Duration::from_micros(50),
        latency_max: Duration::from_millis(2),
    });
    network.install();
    network.record_events();
    let run = Rc::new(Run {
        started: Instant::now(),
        network: network.clone(),
        trace: RefCell::new(Trace::new()),
        history: RefCell::new(History::default()),
        violations: RefCell::new(Vec::new()),
    });
    let store: Arc<dyn MetaStore> = Arc::new(EmbeddedMetaStore::in_memory(EmbeddedOptions::default()));
    let record = ClusterRecord {
        version: FORMAT_VERSION,
        cluster_id: format!("sim-{seed:016x}"),
        object_size_bytes: OBJECT_SIZE_DEFAULT_BYTES,
    };
    store.put(cluster::keys::CLUSTER, encode(&record), None).await.expect("the cluster record");
    let recorder = tokio::task::spawn_local(record_commits(store.clone(), run.clone()));

    let mut mon_config = mon::MonConfig::new("mon-a", "memory");
    // Its connects would come from no node of the network; OSDs are found down by their leases.
    mon_config.fast_down = false;
    let mon_store: Arc<dyn MetaStore> = Arc::new(NodeStore::new(store.clone(), "mon", &network));
    let mon = mon::Mon::start_without_api(mon_store, mon_config, None).await.expect("the mon starts");

    let mut osds = Vec::new();
    for index in 0..options.osds {
        osds.push(start_osd(&network, &store, seed, index, &run));
    }
    let mut names: Vec<String> = osds.iter().map(|osd| osd.name.clone()).collect();
    names.extend(["client".to_string(), "checker".to_string(), STORE_NODE.to_string()]);
    names.extend((0..options.clients).map(|index| format!("client{index}")));
    let nodes = Rc::new(Nodes {
        network: network.clone(),
        store: store.clone(),
        run: run.clone(),
        osds: RefCell::new(osds),
        names,
    });
    match prepare(&store, &options).await {
        Ok(()) => workload::run(seed, &options, &store, &nodes, &run).await,
        Err(error) => run.violation(error),
    }
    nodes.abort_all();
    mon.shutdown().await;
    recorder.abort();
    let simulated = run.started.elapsed();
    let ops = run.history.borrow().ops();
    // Aborted tasks still hold the run until the runtime drops them.
    Outcome { seed, violations: run.violations.take(), trace: run.trace.take(), simulated, ops }
}

/// Formats a disk and starts an OSD on it.
fn start_osd(network: &SimNet, store: &Arc<dyn MetaStore>, seed: u64, index: usize, run: &Rc<Run>) -> OsdNode {
    let name = format!("osd{index}");
    let disk = SimDisk::new(SimDiskOptions {
        size_bytes: DISK_BYTES,
        seed: derive(seed, 100 + index as u64),
        ..SimDiskOptions::default()
    });
    let format = FormatOptions {
        object_size_bytes: u64::from(OBJECT_SIZE_DEFAULT_BYTES),
        journal_size_bytes: Some(JOURNAL_BYTES),
        nonce: derive(seed, 200 + index as u64),
    };
    let disk = Engine::format(disk, &format).expect("formatting a simulated disk");
    let latency = Duration::from_micros(20)..Duration::from_micros(300);
    let (disk, control) = TimedDisk::new(
        disk,
        TimedDiskOptions {
            seed: derive(seed, 300 + index as u64),
            read: latency.clone(),
            write: latency,
            flush: Duration::from_micros(100)..Duration::from_micros(1500),
        },
    );
    let node = OsdNode { name: name.clone(), disk: control, process: None };
    let process = spawn_osd(network, store, &node, Box::new(disk), run);
    OsdNode { process: Some(process), ..node }
}

/// Runs an OSD process on `node`'s disk.
fn spawn_osd(
    network: &SimNet,
    store: &Arc<dyn MetaStore>,
    node: &OsdNode,
    disk: Box<dyn platform::Disk>,
    run: &Rc<Run>,
) -> JoinHandle<()> {
    let address = format!("{}{}", net::sim::SIM_PREFIX, node.name);
    let listener = network.listen(&node.name, &address).expect("a free simulated address");
    let store: Arc<dyn MetaStore> = Arc::new(NodeStore::new(store.clone(), &node.name, network));
    let mut config = OsdConfig::new(Metadata::Store(store.clone()), format!("/sim/{}", node.name), address.clone());
    config.host = Some(format!("host-{}", node.name));
    let env = OsdEnv {
        disk,
        disk_ready: Box::new(node.disk.ready()),
        listener: Listener::Sim(listener),
        address,
        local: None,
        store: store.clone(),
    };
    let (run, name) = (run.clone(), node.name.clone());
    tokio::task::spawn_local(SimNet::on_node(&node.name.clone(), async move {
        let local = tokio::task::LocalSet::new();
        let ready = |ready: &osd::Ready| run.record(format_args!("{name} serving as osd.{}", ready.osd));
        let served = local.run_until(osd::serve(config, env, ready, std::future::pending::<Stop>())).await;
        if let Err(error) = served {
            run.violation(format!("{name} stopped: {error}"));
        }
    }))
}

/// Creates the pool and the volumes, and waits until every PG serves.
async fn prepare(store: &Arc<dyn MetaStore>, options: &SimOptions) -> Result<(), String> {
    let deadline = Instant::now() + STARTUP_DEADLINE;
    // The pool needs its OSDs registered and up: retry until placement finds them.
    loop {
        let request = mon::admin::CreatePool {
            name: "sim".into(),
            replicas: 3,
            min_size: Some(2),
            pg_count: Some(PG_COUNT),
            failure_domain: "host".into(),
            tags: Vec::new(),
        };
        match mon::admin::create_pool(store.as_ref(), &request).await {
            Ok(_) => break,
            Err(error) if Instant::now() < deadline => {
                tracing::debug!(%error, "the pool cannot be created yet");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => return Err(format!("the pool could not be created: {error}")),
        }
    }
    for volume in 0..options.volumes {
        let request = mon::admin::CreateVolume {
            name: workload::volume_name(volume),
            size_bytes: options.blocks_per_volume * crate::history::BLOCK_BYTES as u64,
            pool: Some("sim".into()),
        };
        mon::admin::create_volume(store.as_ref(), &request)
            .await
            .map_err(|error| format!("volume {volume} could not be created: {error}"))?;
    }
    Ok(())
}

/// Records every commit of the store in the trace: what the mon and the OSDs decided, in order.
async fn record_commits(store: Arc<dyn MetaStore>, run: Rc<Run>) {
    let Ok(mut watch) = store.watch("/", Some(1)).await else { return };
    while let Some(Ok(event)) = watch.next().await {
        let value = fnv1a(0, &event.kv.value);
        run.record(format_args!("store r{} {:?} {} {value:016x}", event.revision, event.kind, event.kv.key));
    }
}
