//! A simulated cluster: the store, a mon, the OSDs on their disks, a pool and its volumes, and
//! the run from start to verdict.
//!
//! Each OSD is a node of the simulated network: its `osd::serve` runs in a `LocalSet` of its own
//! inside `SimNet::on_node`, so every task it spawns opens connections from that node, and
//! dropping the node's task drops all of them at once, as a crash does.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use cluster::records::{encode, ClusterRecord, FORMAT_VERSION};
use engine::{Engine, FormatOptions};
use meta::MetaStore;
use meta_embedded::{EmbeddedMetaStore, EmbeddedOptions};
use net::sim::{SimNet, SimNetOptions};
use net::Listener;
use osd::{Metadata, OsdConfig, OsdEnv, Stop};
use sim::{SimDisk, SimDiskOptions, TimedDisk, TimedDiskControl, TimedDiskOptions};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::commits::Commits;
use crate::down_reports::SimDownReporter;
use crate::history::History;
use crate::node_store::{NodeStore, StoreFaults, STORE_NODE};
use crate::pause::PauseSwitch;
use crate::store_members::StoreMembers;
use crate::trace::{fnv1a, Trace};
use crate::{clock, workload, Outcome, SimOptions};

/// Each OSD's simulated drive.
const DISK_BYTES: u64 = 96 << 20;
/// The pool's PGs: few, so that a run exercises every one.
pub(crate) const PG_COUNT: u64 = 8;
/// Each OSD's host (its failure domain) is its node's name after this.
pub(crate) const HOST_PREFIX: &str = "host-";
/// The mon's node on the simulated network.
pub(crate) const MON_NODE: &str = "mon";
/// The mons of a control plane of two (`SimOptions::control_plane`): each one's node and name.
/// The first is the one mon of the other runs.
pub(crate) const MONS: [(&str, &str); 2] = [(MON_NODE, "mon-a"), ("mon-b", "mon-b")];
/// How long a graceful stop may take (the OSD's own budget is 3 s, `OsdConfig::shutdown_timeout`).
const GRACEFUL_STOP_DEADLINE: Duration = Duration::from_secs(20);
/// How long a volume stays in the trash, with `SimOptions::trash`.
pub(crate) const TRASH_RETENTION_S: u64 = 3;
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
    /// Writes of PG history records to the store so far.
    pub(crate) history_writes: Cell<u64>,
}

impl Run {
    pub(crate) fn record(&self, event: impl std::fmt::Display) {
        let mut trace = self.trace.borrow_mut();
        for (at, event) in self.network.take_events() {
            trace.record(at - self.started, format_args!("net {event}"));
        }
        trace.record(self.started.elapsed(), event);
    }

    /// Adds a line of the daemons' log (`log.rs`), outside the hash.
    pub(crate) fn note(&self, text: &str) {
        if let Ok(mut trace) = self.trace.try_borrow_mut() {
            trace.note(self.started.elapsed(), text);
        }
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
    /// Tells the running process how to stop.
    stop: Option<tokio::sync::oneshot::Sender<Stop>>,
    pub(crate) pause: PauseSwitch,
    /// Set while the fault injector makes the disk fail requests: the OSD stopping on its
    /// failed drive is then what must happen, not a violation.
    pub(crate) failing_disk: Rc<Cell<bool>>,
    /// How many times the disk was set to fail: an OSD whose drive failed while it ran may
    /// finish stopping after the fault is over (its stop waits for the store).
    disk_faults: Rc<Cell<u32>>,
    /// Removed from the cluster: never started again, and no longer counted.
    pub(crate) retired: Cell<bool>,
}

/// The OSD nodes, for the faults to kill, restart and cut off.
pub(crate) struct Nodes {
    pub(crate) network: SimNet,
    store: Arc<dyn MetaStore>,
    pub(crate) store_faults: StoreFaults,
    /// The OSDs' lease.
    pub(crate) lease: Duration,
    /// How clients and OSDs report an OSD gone to the mon.
    pub(crate) reporter: SimDownReporter,
    /// The mons (one, or [`MONS`]), each with its process while it runs.
    mons: Vec<RefCell<Option<MonProcess>>>,
    /// The node whose data had bits flipped, if any did (`replicas.rs` lets it answer
    /// `Corrupt`).
    pub(crate) rotted: RefCell<Option<String>>,
    run: Rc<Run>,
    osds: RefCell<Vec<OsdNode>>,
    /// Every node of the network (OSDs, clients, the store, the checker), for partitions.
    names: Vec<String>,
}

impl OsdNode {
    /// The disk fails requests until [`OsdNode::disk_repaired`].
    pub(crate) fn disk_failing(&self) {
        self.failing_disk.set(true);
        self.disk_faults.set(self.disk_faults.get() + 1);
    }

    pub(crate) fn disk_repaired(&self) {
        self.failing_disk.set(false);
    }
}

impl Nodes {
    /// Every OSD node, retired ones included.
    pub(crate) fn count(&self) -> usize {
        self.osds.borrow().len()
    }

    /// The OSD nodes that belong to the cluster: every one not retired.
    pub(crate) fn members(&self) -> usize {
        self.osds.borrow().iter().filter(|osd| !osd.retired.get()).count()
    }

    /// Whether OSD `index` was removed from the cluster.
    pub(crate) fn is_retired(&self, index: usize) -> bool {
        self.osds.borrow()[index].retired.get()
    }

    /// Marks OSD `index`, stopped and removed from the cluster, as never to start again.
    pub(crate) fn retire(&self, index: usize) {
        let osds = self.osds.borrow();
        assert!(osds[index].process.is_none(), "{} is retired while it runs", osds[index].name);
        osds[index].retired.set(true);
        self.run.record(format_args!("membership: {} retired", osds[index].name));
    }

    pub(crate) fn name(&self, index: usize) -> String {
        self.osds.borrow()[index].name.clone()
    }

    /// Whether a mon runs that can lead: not paused, and the store has a leader.
    pub(crate) fn mon_running(&self) -> bool {
        let store_leads = self.store_faults.members().is_none_or(|members| members.leader().is_some());
        let running =
            (0..self.mons.len()).any(|index| self.mons[index].borrow().is_some() && !SimNet::is_paused(MONS[index].0));
        running && store_leads
    }

    /// The mons of the control plane.
    pub(crate) fn mon_count(&self) -> usize {
        self.mons.len()
    }

    /// Mon `index`'s node.
    pub(crate) fn mon_node(&self, index: usize) -> &'static str {
        MONS[index].0
    }

    /// The mon that leads, as the store says (a leader that lost its lease may not know yet).
    pub(crate) async fn leading_mon(&self) -> Option<usize> {
        let kv = self.store.get(cluster::keys::MON_LEADER).await.ok()??;
        let leader: cluster::LeaderRecord = cluster::records::decode(cluster::keys::MON_LEADER, &kv.value).ok()?;
        (0..self.mons.len()).find(|&index| MONS[index].1 == leader.mon)
    }

    /// Whether OSD `index`'s process runs (it may have stopped on a failed drive).
    pub(crate) fn is_running(&self, index: usize) -> bool {
        self.osds.borrow()[index].process.as_ref().is_some_and(|process| !process.is_finished())
    }

    /// Every node of the network.
    pub(crate) fn names(&self) -> &[String] {
        &self.names
    }

    /// The run, for faults to record themselves.
    pub(crate) fn run(&self) -> &Run {
        &self.run
    }

    /// Runs `f` on OSD `index`'s node (its disk, pause switch, flags).
    pub(crate) fn with_osd<R>(&self, index: usize, f: impl FnOnce(&OsdNode) -> R) -> R {
        f(&self.osds.borrow()[index])
    }

    /// Kills OSD `index` as a power loss would: its tasks and connections gone at once, the
    /// disk's writes in flight lost, its unflushed ones kept, lost or torn as `SimDisk` decides.
    pub(crate) async fn kill(&self, index: usize) {
        let (name, process) = {
            let mut osds = self.osds.borrow_mut();
            osds[index].pause.resume();
            (osds[index].name.clone(), osds[index].process.take())
        };
        let Some(process) = process else { return };
        process.abort();
        let _ = process.await;
        self.network.kill(&name);
        self.osds.borrow()[index].disk.crash();
        self.run.record(format_args!("fault: {name} killed"));
    }

    /// Kills mon `index` as a power loss would (its tasks and connections gone at once; what it
    /// holds is in the store, and its leadership lapses with its lease).
    pub(crate) async fn kill_mon(&self, index: usize) {
        let Some(mon) = self.mons[index].take() else { return };
        let node = MONS[index].0;
        SimNet::resume_node(node);
        mon.task.abort();
        let _ = mon.task.await;
        self.network.kill(node);
        self.reporter.set_running(index, false);
        self.run.record(format_args!("fault: {node} killed"));
    }

    /// Starts mon `index` again, if it is down.
    pub(crate) fn restart_mon(&self, index: usize) {
        if self.mons[index].borrow().is_some() {
            return;
        }
        self.run.record(format_args!("fault: {} restarted", MONS[index].0));
        let process = start_mon(&self.network, &self.store, &self.store_faults, &self.run, index);
        self.mons[index].replace(Some(process));
        self.reporter.set_running(index, true);
    }

    /// Pauses mon `index` as SIGSTOP would, or resumes it.
    pub(crate) fn pause_mon(&self, index: usize, paused: bool) {
        let node = MONS[index].0;
        if paused {
            SimNet::pause_node(node);
            self.run.record(format_args!("fault: {node} paused"));
        } else if SimNet::is_paused(node) {
            SimNet::resume_node(node);
            self.run.record(format_args!("fault: {node} resumed"));
        }
    }

    /// Stops OSD `index` as SIGTERM does (`Stop::Graceful`) and waits until it has.
    pub(crate) async fn stop_gracefully(&self, index: usize) -> Result<(), String> {
        let (name, stop, process) = {
            let mut osds = self.osds.borrow_mut();
            let node = &mut osds[index];
            (node.name.clone(), node.stop.take(), node.process.take())
        };
        let (Some(stop), Some(process)) = (stop, process) else { return Err(format!("{name} is not running")) };
        self.run.record(format_args!("{name} asked to stop"));
        let _ = stop.send(Stop::Graceful);
        match tokio::time::timeout(GRACEFUL_STOP_DEADLINE, process).await {
            Ok(_) => {
                // What it had not written back is on its disk, flushed or not: a clean exit.
                self.network.kill(&name);
                self.osds.borrow()[index].disk.process_exited();
                Ok(())
            }
            Err(_) => Err(format!("{name} did not stop within {GRACEFUL_STOP_DEADLINE:?}")),
        }
    }

    /// Starts OSD `index` again on its disk.
    pub(crate) fn restart(&self, index: usize) {
        self.start(index, "fault: {} restarted");
    }

    /// Starts OSD `index` for the first time, on its freshly formatted disk, if a fault has not
    /// started it already.
    pub(crate) fn join(&self, index: usize) {
        self.start(index, "membership: {} joins");
    }

    /// Starts OSD `index` on its disk unless it runs, recording `what` with its name.
    fn start(&self, index: usize, what: &str) {
        let mut osds = self.osds.borrow_mut();
        let node = &mut osds[index];
        assert!(!node.retired.get(), "{} was removed from the cluster", node.name);
        if node.process.as_ref().is_some_and(|process| !process.is_finished()) {
            return;
        }
        // A process that stopped on its own (a failed drive) left its sockets and its disk
        // requests behind.
        self.network.kill(&node.name);
        node.disk.process_exited();
        self.run.record(what.replace("{}", &node.name));
        let disk = Box::new(node.disk.reopen());
        let shared =
            Shared { network: &self.network, store: &self.store, faults: &self.store_faults, reporter: &self.reporter };
        let (process, stop) = spawn_osd(&shared, self.lease, node, disk, &self.run);
        node.process = Some(process);
        node.stop = Some(stop);
    }

    /// Stops every OSD at once (the run is over).
    fn abort_all(&self) {
        for osd in self.osds.borrow_mut().iter_mut() {
            osd.pause.resume();
            if let Some(process) = osd.process.take() {
                process.abort();
            }
            self.network.kill(&osd.name);
        }
    }
}

pub(crate) async fn simulate(seed: u64, options: SimOptions) -> Outcome {
    let options = options.for_seed(seed);
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
        history_writes: Cell::new(0),
    });
    crate::log::attach(Some(run.clone()));
    let pools = match options.pools {
        1 => "a pool".to_string(),
        count => format!("{count} pools"),
    };
    run.record(format_args!(
        "{} osds, {pools} of {} copies with min_size {}, down-out interval {:?}",
        options.osds, options.replicas, options.min_size, options.down_out_interval
    ));
    if options.drawn_workload {
        run.record(format_args!(
            "objects of {} KiB, journals of {} KiB, up to {} ops in flight per client, whole-object ops {}{}",
            options.object_bytes >> 10,
            options.journal_bytes >> 10,
            options.pipeline_max,
            if options.whole_object_ops { "on" } else { "off" },
            if options.late_join { ", the last OSD joins late" } else { "" }
        ));
    }
    let embedded = EmbeddedMetaStore::in_memory(EmbeddedOptions::default());
    let store: Arc<dyn MetaStore> = Arc::new(embedded.clone());
    let record = ClusterRecord {
        version: FORMAT_VERSION,
        cluster_id: format!("sim-{seed:016x}"),
        object_size_bytes: options.object_bytes,
    };
    store.put(cluster::keys::CLUSTER, encode(&record), None).await.expect("the cluster record");
    let recorder = tokio::task::spawn_local(record_commits(store.clone(), run.clone()));

    let (store_faults, mon_count) = match options.control_plane {
        true => (StoreFaults::with_members(StoreMembers::new(embedded)), MONS.len()),
        false => (StoreFaults::default(), 1),
    };
    let mon_views: Vec<(&str, Arc<dyn MetaStore>)> = MONS[..mon_count]
        .iter()
        .map(|&(node, _)| (node, Arc::new(NodeStore::new(store.clone(), node, &network, &store_faults)) as _))
        .collect();
    let reporter = SimDownReporter::new(mon_views, (mon_count > 1).then(|| store.clone()), &network);
    let mons = (0..mon_count).map(|index| RefCell::new(Some(start_mon(&network, &store, &store_faults, &run, index))));
    let mons = mons.collect();

    let mut osds = Vec::new();
    for index in 0..options.osds {
        let shared = Shared { network: &network, store: &store, faults: &store_faults, reporter: &reporter };
        // The last one joins later, when the clients run (`workload.rs`).
        let start = !(options.late_join && index + 1 == options.osds);
        osds.push(start_osd(&shared, &options, seed, index, &run, start));
    }
    let mut names: Vec<String> = osds.iter().map(|osd| osd.name.clone()).collect();
    names.extend(["client", "checker", STORE_NODE].map(String::from));
    names.extend(MONS[..mon_count].iter().map(|(node, _)| node.to_string()));
    names.extend((0..options.clients).map(|index| format!("client{index}")));
    if options.nbd {
        names.push(crate::gateway::GATEWAY_NODE.to_string());
    }
    let nodes = Rc::new(Nodes {
        network: network.clone(),
        store: store.clone(),
        store_faults,
        lease: options.osd_lease,
        reporter: reporter.clone(),
        rotted: RefCell::new(None),
        mons,
        run: run.clone(),
        osds: RefCell::new(osds),
        names,
    });
    match prepare(&store, &options).await {
        Ok(()) => workload::run(seed, &options, &store, &nodes, &run).await,
        Err(error) => run.violation(error),
    }
    nodes.abort_all();
    for (index, mon) in nodes.mons.iter().enumerate() {
        SimNet::resume_node(MONS[index].0);
        if let Some(mon) = mon.take() {
            let _ = mon.stop.send(());
            let _ = mon.task.await;
        }
    }
    recorder.abort();
    crate::log::attach(None);
    let simulated = run.started.elapsed();
    let ops = run.history.borrow().ops();
    // Aborted tasks still hold the run until the runtime drops them.
    Outcome { seed, violations: run.violations.take(), trace: run.trace.take(), simulated, ops }
}

/// Runs the mon in a `LocalSet` of its own on its node, so that its connects (verifying a
/// client's report that an OSD is gone) come from that node; stops it when told.
fn start_mon(
    network: &SimNet,
    store: &Arc<dyn MetaStore>,
    faults: &StoreFaults,
    run: &Rc<Run>,
    index: usize,
) -> MonProcess {
    let (node, id) = MONS[index];
    let mon_store: Arc<dyn MetaStore> = Arc::new(NodeStore::new(store.clone(), node, network, faults));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = run.clone();
    let task = tokio::task::spawn_local(SimNet::on_node(node, async move {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async move {
                let config = mon::MonConfig::new(id, "memory");
                match mon::Mon::start_without_api(mon_store, config, None).await {
                    Ok(mon) => {
                        let _ = stopped.await;
                        mon.shutdown().await;
                    }
                    Err(error) => run.violation(format!("{id} could not start: {error}")),
                }
            })
            .await;
    }));
    MonProcess { stop, task }
}

/// The running mon, and how to stop it.
pub(crate) struct MonProcess {
    stop: tokio::sync::oneshot::Sender<()>,
    task: JoinHandle<()>,
}

/// Formats a disk and starts an OSD on it.
/// What every OSD process is started with.
struct Shared<'a> {
    network: &'a SimNet,
    store: &'a Arc<dyn MetaStore>,
    faults: &'a StoreFaults,
    reporter: &'a SimDownReporter,
}

/// Formats OSD `index`'s disk and, if `start`, starts the OSD on it.
fn start_osd(
    shared: &Shared<'_>,
    options: &SimOptions,
    seed: u64,
    index: usize,
    run: &Rc<Run>,
    start: bool,
) -> OsdNode {
    let name = format!("osd{index}");
    let disk = SimDisk::new(SimDiskOptions {
        size_bytes: DISK_BYTES,
        seed: derive(seed, 100 + index as u64),
        ..SimDiskOptions::default()
    });
    let format = FormatOptions {
        object_size_bytes: u64::from(options.object_bytes),
        journal_size_bytes: Some(options.journal_bytes),
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
    let node = OsdNode {
        name: name.clone(),
        disk: control,
        process: None,
        stop: None,
        pause: PauseSwitch::default(),
        failing_disk: Rc::new(Cell::new(false)),
        disk_faults: Rc::new(Cell::new(0)),
        retired: Cell::new(false),
    };
    if !start {
        return node;
    }
    let (process, stop) = spawn_osd(shared, options.osd_lease, &node, Box::new(disk), run);
    OsdNode { process: Some(process), stop: Some(stop), ..node }
}

/// Runs an OSD process on `node`'s disk.
fn spawn_osd(
    shared: &Shared<'_>,
    lease: Duration,
    node: &OsdNode,
    disk: Box<dyn platform::Disk>,
    run: &Rc<Run>,
) -> (JoinHandle<()>, tokio::sync::oneshot::Sender<Stop>) {
    let address = format!("{}{}", net::sim::SIM_PREFIX, node.name);
    let network = shared.network;
    let listener = network.listen(&node.name, &address).expect("a free simulated address");
    let store: Arc<dyn MetaStore> = Arc::new(NodeStore::new(shared.store.clone(), &node.name, network, shared.faults));
    let mut config = OsdConfig::new(Metadata::Store(store.clone()), format!("/sim/{}", node.name), address.clone());
    config.host = Some(format!("{HOST_PREFIX}{}", node.name));
    config.lease_ttl = lease;
    config.down_reporter = Some(Arc::new(shared.reporter.clone()));
    let env = OsdEnv {
        disk,
        disk_ready: Box::new(node.disk.ready()),
        listener: Listener::Sim(listener),
        address,
        local: None,
        store: store.clone(),
    };
    let (run, name, failing_disk) = (run.clone(), node.name.clone(), node.failing_disk.clone());
    let (disk_faults, disk_faults_at_start) = (node.disk_faults.clone(), node.disk_faults.get());
    let (stop, stopped) = tokio::sync::oneshot::channel::<Stop>();
    let asked = Rc::new(Cell::new(false));
    let stop_signal = {
        let asked = asked.clone();
        async move {
            match stopped.await {
                Ok(how) => {
                    asked.set(true);
                    how
                }
                Err(_) => std::future::pending().await,
            }
        }
    };
    let process = tokio::task::spawn_local(node.pause.wrap(SimNet::on_node(&node.name.clone(), async move {
        let local = tokio::task::LocalSet::new();
        let ready = |ready: &osd::Ready| run.record(format_args!("{name} serving as osd.{}", ready.osd));
        let served = local.run_until(osd::serve(config, env, ready, stop_signal)).await;
        match served {
            // A drive set to fail stops its OSD, or keeps it from starting when it fails the
            // reads or the first write of a start (a second fault restarted it meanwhile, or it
            // joined late onto a drive already set to fail).
            Err(
                error @ (osd::OsdError::DriveFailed { .. }
                | osd::OsdError::OpenEngine { .. }
                | osd::OsdError::SetOsdId { .. }),
            ) if failing_disk.get() || disk_faults.get() != disk_faults_at_start => {
                run.record(format_args!("{name} stopped: {error}"));
            }
            Err(error) => run.violation(format!("{name} stopped: {error}")),
            Ok(()) if asked.get() => run.record(format_args!("{name} stopped as asked")),
            Ok(()) => run.violation(format!("{name} stopped unasked")),
        }
    })));
    (process, stop)
}

/// The name of pool `index`: volume `v` is in pool `v % pools`.
fn pool_name(index: usize) -> String {
    match index {
        0 => "sim".into(),
        _ => format!("sim{}", index + 1),
    }
}

/// Creates the pools and the volumes, and waits until every PG serves.
async fn prepare(store: &Arc<dyn MetaStore>, options: &SimOptions) -> Result<(), String> {
    let deadline = Instant::now() + STARTUP_DEADLINE;
    // A pool needs its OSDs registered and up: retry until placement finds them.
    for pool in 0..options.pools {
        loop {
            let request = mon::admin::CreatePool {
                name: pool_name(pool),
                replicas: u64::from(options.replicas),
                min_size: Some(u64::from(options.min_size)),
                // Pools of other PG counts: the same PG numbers, other objects.
                pg_count: Some(PG_COUNT >> pool),
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
    }
    if let Some(interval) = options.down_out_interval {
        let change = mon::views::SettingsChange { down_out_interval_s: Some(interval.as_secs()), ..Default::default() };
        mon::osd_admin::change_settings(store.as_ref(), &change)
            .await
            .map_err(|error| format!("the down-out interval could not be set: {error}"))?;
    }
    if options.trash {
        // Short enough that some clones expire in the trash while the clients run.
        let change = mon::views::SettingsChange { trash_retention_s: Some(TRASH_RETENTION_S), ..Default::default() };
        mon::osd_admin::change_settings(store.as_ref(), &change)
            .await
            .map_err(|error| format!("the trash retention could not be set: {error}"))?;
    }
    for volume in 0..options.volumes {
        let request = mon::admin::CreateVolume {
            name: workload::volume_name(volume),
            size_bytes: options.blocks_per_volume * crate::history::BLOCK_BYTES as u64,
            pool: Some(pool_name(volume % options.pools)),
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
    let mut commits = Commits::default();
    while let Some(Ok(event)) = watch.next().await {
        if event.kind == meta::WatchEventKind::Put && event.kv.key.starts_with(cluster::keys::PG_HISTORY_PREFIX) {
            run.history_writes.set(run.history_writes.get() + 1);
        }
        if event.kind == meta::WatchEventKind::Put {
            if let Err(violation) = commits.put(&event.kv.key, &event.kv.value) {
                run.violation(format!("store r{}: {violation}", event.revision));
            }
        }
        let value = fnv1a(0, &event.kv.value);
        run.record(format_args!("store r{} {:?} {} {value:016x}", event.revision, event.kind, event.kv.key));
    }
}
