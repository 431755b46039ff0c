//! A simulated network for whole-cluster simulation (ADR 0020): in-memory byte streams between
//! named nodes, on tokio's clock, with the faults TCP shows.
//!
//! A [`SimNet`] installed on a thread answers `sim:NAME` addresses there, as the filesystem
//! answers `unix:PATH` ones: [`Stream::connect`](crate::Stream::connect) reaches a
//! [`SimListener`] bound at that address, from the node whose future is being polled
//! ([`SimNet::on_node`]). Bytes arrive in order after a latency drawn per write from the seed,
//! so a run is the same whenever the tasks run in the same order, which a current-thread runtime
//! with a paused clock gives.
//!
//! Faults: a cut (one way) or a partition (both ways) holds bytes until healed, and a connect
//! across it waits; [`SimNet::kill`] resets every stream of a node and closes its listeners, as
//! a crash does to its sockets. Nothing here runs unless a simulation installs a network.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// The prefix of an address on the simulated network.
pub const SIM_PREFIX: &str = "sim:";

/// Bytes written and not yet read, per direction, beyond which a write would block.
const PIPE_BYTES_MAX: usize = 4 << 20;

thread_local! {
    static NETWORK: RefCell<Option<SimNet>> = const { RefCell::new(None) };
    static NODE: RefCell<Option<Arc<str>>> = const { RefCell::new(None) };
    /// The paused nodes, each with the wakers of its tasks that found it paused.
    static PAUSED: RefCell<Vec<(Arc<str>, Vec<Waker>)>> = const { RefCell::new(Vec::new()) };
}

/// How the simulated network behaves. tokio's timers fire on whole milliseconds, so latencies
/// below one are rounded up to it.
#[derive(Debug, Clone, Copy)]
pub struct SimNetOptions {
    /// Seeds the latencies.
    pub seed: u64,
    /// Every write's bytes arrive after a latency drawn uniformly from this range.
    pub latency_min: Duration,
    pub latency_max: Duration,
}

/// A simulated network: cloned handles share it.
#[derive(Clone)]
pub struct SimNet {
    shared: Arc<NetShared>,
}

struct NetShared {
    state: Mutex<NetState>,
    /// Signalled when a cut heals or a listener appears, for connects that wait.
    changed: Notify,
}

struct NetState {
    options: SimNetOptions,
    rng: SplitMix64,
    /// Listening addresses (without the prefix) and the node that listens.
    listeners: BTreeMap<String, Arc<ListenerShared>>,
    /// One-way cuts, (from, to): bytes from `from` to `to` are held.
    cuts: BTreeSet<(Arc<str>, Arc<str>)>,
    /// Every stream direction made, for kills and heals; dead ones are pruned as met.
    pipes: Vec<Weak<Pipe>>,
    /// Counts connections, for the names of the connecting ends.
    connections: u64,
    /// Connects and writes, when recorded ([`SimNet::record_events`]).
    events: Option<Vec<(Instant, String)>>,
}

impl SimNet {
    pub fn new(options: SimNetOptions) -> SimNet {
        assert!(options.latency_min <= options.latency_max, "latency_min above latency_max");
        SimNet {
            shared: Arc::new(NetShared {
                state: Mutex::new(NetState {
                    options,
                    rng: SplitMix64(options.seed),
                    listeners: BTreeMap::new(),
                    cuts: BTreeSet::new(),
                    pipes: Vec::new(),
                    connections: 0,
                    events: None,
                }),
                changed: Notify::new(),
            }),
        }
    }

    /// Starts keeping a log of connects and writes (for a simulation's trace).
    pub fn record_events(&self) {
        self.state().events.get_or_insert_with(Vec::new);
    }

    /// The connects and writes logged since the last call, with their times.
    pub fn take_events(&self) -> Vec<(Instant, String)> {
        self.state().events.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Makes this network answer `sim:` addresses on the current thread.
    pub fn install(&self) {
        NETWORK.with(|network| *network.borrow_mut() = Some(self.clone()));
    }

    /// Removes the current thread's network.
    pub fn uninstall() {
        NETWORK.with(|network| *network.borrow_mut() = None);
        PAUSED.with(|paused| paused.borrow_mut().clear());
    }

    /// Runs `future` as node `node`: connections it opens start from that node.
    pub fn on_node<F: Future>(node: &str, future: F) -> OnNode<F> {
        OnNode { node: Some(Arc::from(node)), future: Box::pin(future) }
    }

    /// Runs `future` as the node the current task runs as, if any: a task a node spawns onto
    /// the runtime (`tokio::spawn`) does not inherit it. Outside a simulation, `future` as is.
    pub fn inherit<F: Future>(future: F) -> OnNode<F> {
        OnNode { node: Self::current_node(), future: Box::pin(future) }
    }

    /// Pauses every task that runs as `node` ([`SimNet::on_node`], [`SimNet::inherit`]) as
    /// SIGSTOP pauses a process: none is polled until [`SimNet::resume_node`]. Its sockets keep
    /// filling meanwhile.
    pub fn pause_node(node: &str) {
        PAUSED.with(|paused| {
            let mut paused = paused.borrow_mut();
            if !paused.iter().any(|(name, _)| &**name == node) {
                paused.push((Arc::from(node), Vec::new()));
            }
        });
    }

    /// Resumes the tasks of `node`, paused by [`SimNet::pause_node`].
    pub fn resume_node(node: &str) {
        let wakers = PAUSED.with(|paused| {
            let mut paused = paused.borrow_mut();
            let at = paused.iter().position(|(name, _)| &**name == node);
            at.map(|at| paused.remove(at).1).unwrap_or_default()
        });
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Whether `node` is paused.
    pub fn is_paused(node: &str) -> bool {
        PAUSED.with(|paused| paused.borrow().iter().any(|(name, _)| &**name == node))
    }

    /// The node the current task runs as (inside [`SimNet::on_node`]), if any.
    pub fn current_node() -> Option<Arc<str>> {
        NODE.with(|node| node.borrow().clone())
    }

    fn state(&self) -> MutexGuard<'_, NetState> {
        self.shared.state.lock().expect("the simulated network's lock is never held across a panic")
    }

    /// Listens at `address` (`sim:NAME`, or `NAME`) as node `node`.
    pub fn listen(&self, node: &str, address: &str) -> io::Result<SimListener> {
        let name = address.strip_prefix(SIM_PREFIX).unwrap_or(address).to_string();
        let mut state = self.state();
        if state.listeners.contains_key(&name) {
            return Err(io::Error::new(io::ErrorKind::AddrInUse, format!("{SIM_PREFIX}{name} is in use")));
        }
        let listener = Arc::new(ListenerShared {
            node: Arc::from(node),
            state: Mutex::new(ListenerState { backlog: VecDeque::new(), closed: false }),
            arrived: Notify::new(),
        });
        state.listeners.insert(name.clone(), listener.clone());
        drop(state);
        self.shared.changed.notify_waiters();
        Ok(SimListener { network: self.clone(), name, shared: listener })
    }

    /// Whether `a` and `b` are cut apart, either way (a call from one to the other and its
    /// reply cannot both go through).
    pub fn is_cut(&self, a: &str, b: &str) -> bool {
        let state = self.state();
        state.cuts.iter().any(|(from, to)| (&**from == a && &**to == b) || (&**from == b && &**to == a))
    }

    /// Holds every byte `from` sends to `to` until [`heal`](SimNet::heal).
    pub fn cut(&self, from: &str, to: &str) {
        let mut state = self.state();
        state.cuts.insert((Arc::from(from), Arc::from(to)));
        // Bytes already in flight are held too: they had not arrived.
        for pipe in live_pipes(&mut state.pipes) {
            if &*pipe.from == from && &*pipe.to == to {
                pipe.lock().hold_undelivered(Instant::now());
            }
        }
    }

    /// Cuts both ways between `a` and `b`.
    pub fn partition(&self, a: &str, b: &str) {
        self.cut(a, b);
        self.cut(b, a);
    }

    /// Ends the cut from `from` to `to`: held bytes go out, in order, after a fresh latency.
    pub fn heal(&self, from: &str, to: &str) {
        let mut state = self.state();
        state.cuts.remove(&(Arc::<str>::from(from), Arc::<str>::from(to)));
        let now = Instant::now();
        let pipes: Vec<Arc<Pipe>> =
            live_pipes(&mut state.pipes).filter(|pipe| &*pipe.from == from && &*pipe.to == to).collect();
        for pipe in pipes {
            let latency = state.latency();
            pipe.lock().release_held(now + latency);
            pipe.changed.notify_waiters();
        }
        drop(state);
        self.shared.changed.notify_waiters();
    }

    /// Ends every cut.
    pub fn heal_all(&self) {
        let cuts: Vec<(Arc<str>, Arc<str>)> = self.state().cuts.iter().cloned().collect();
        for (from, to) in cuts {
            self.heal(&from, &to);
        }
    }

    /// Resets every stream between `a` and `b`, either way (a middlebox dropping the
    /// connections): both ends see an error; listeners stay.
    pub fn reset(&self, a: &str, b: &str) {
        let mut state = self.state();
        for pipe in live_pipes(&mut state.pipes) {
            if (&*pipe.from == a && &*pipe.to == b) || (&*pipe.from == b && &*pipe.to == a) {
                pipe.lock().reset = true;
                pipe.changed.notify_waiters();
            }
        }
    }

    /// What a crash does to `node`'s sockets: every stream to or from it fails with a reset,
    /// and its listeners close.
    pub fn kill(&self, node: &str) {
        let mut state = self.state();
        state.listeners.retain(|_, listener| {
            let mine = &*listener.node == node;
            if mine {
                listener.state.lock().expect("listener lock").closed = true;
                listener.arrived.notify_waiters();
            }
            !mine
        });
        for pipe in live_pipes(&mut state.pipes) {
            if &*pipe.from == node || &*pipe.to == node {
                pipe.lock().reset = true;
                pipe.changed.notify_waiters();
            }
        }
    }

    async fn connect(&self, address: &str) -> io::Result<SimStream> {
        let from = NODE
            .with(|node| node.borrow().clone())
            .ok_or_else(|| io::Error::other(format!("connect to {address} from outside any simulated node")))?;
        let name = address.strip_prefix(SIM_PREFIX).unwrap_or(address).to_string();
        // The handshake takes a round trip, and waits out a cut either way.
        let latency = self.state().latency();
        tokio::time::sleep(latency * 2).await;
        loop {
            let changed = self.shared.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(connected) = self.try_connect(&from, &name) {
                return connected;
            }
            changed.await;
        }
    }

    /// Connects `from` to the listener at `name`, or `None` while a cut separates them.
    fn try_connect(&self, from: &Arc<str>, name: &str) -> Option<io::Result<SimStream>> {
        let mut state = self.state();
        let Some(listener) = state.listeners.get(name).cloned() else {
            let error =
                io::Error::new(io::ErrorKind::ConnectionRefused, format!("nothing listens at {SIM_PREFIX}{name}"));
            return Some(Err(error));
        };
        let to = listener.node.clone();
        if state.cuts.contains(&(from.clone(), to.clone())) || state.cuts.contains(&(to.clone(), from.clone())) {
            return None;
        }
        state.connections += 1;
        let number = state.connections;
        state.log(|| format!("connect {from}#{number} to {SIM_PREFIX}{name}"));
        let outbound = Pipe::new(from.clone(), to.clone());
        let inbound = Pipe::new(to, from.clone());
        state.pipes.push(Arc::downgrade(&outbound));
        state.pipes.push(Arc::downgrade(&inbound));
        let client_name = format!("{from}#{}", state.connections);
        drop(state);
        let client = SimStream::new(self.clone(), format!("{SIM_PREFIX}{name}"), inbound.clone(), outbound.clone());
        let server = SimStream::new(self.clone(), client_name, outbound, inbound);
        let mut backlog = listener.state.lock().expect("listener lock");
        if backlog.closed {
            return Some(Err(io::Error::new(io::ErrorKind::ConnectionRefused, format!("{SIM_PREFIX}{name} closed"))));
        }
        backlog.backlog.push_back(server);
        drop(backlog);
        listener.arrived.notify_waiters();
        Some(Ok(client))
    }
}

impl NetState {
    fn log(&mut self, event: impl FnOnce() -> String) {
        if let Some(events) = &mut self.events {
            events.push((Instant::now(), event()));
        }
    }

    fn latency(&mut self) -> Duration {
        let (min, max) = (self.options.latency_min, self.options.latency_max);
        let span = u64::try_from((max - min).as_nanos()).unwrap_or(u64::MAX);
        min + Duration::from_nanos(if span == 0 { 0 } else { self.rng.next() % (span + 1) })
    }
}

fn live_pipes(pipes: &mut Vec<Weak<Pipe>>) -> impl Iterator<Item = Arc<Pipe>> {
    pipes.retain(|pipe| pipe.strong_count() > 0);
    pipes.iter().filter_map(Weak::upgrade).collect::<Vec<_>>().into_iter()
}

/// A future that runs as a simulated node (see [`SimNet::on_node`]).
pub struct OnNode<F> {
    node: Option<Arc<str>>,
    future: Pin<Box<F>>,
}

impl<F: Future> Future for OnNode<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        if let Some(node) = &self.node {
            let paused = PAUSED.with(|paused| {
                let mut paused = paused.borrow_mut();
                let entry = paused.iter_mut().find(|(name, _)| name == node);
                entry.map(|(_, wakers)| wakers.push(cx.waker().clone())).is_some()
            });
            if paused {
                return Poll::Pending;
            }
        }
        let previous = NODE.with(|node| std::mem::replace(&mut *node.borrow_mut(), self.node.clone()));
        let result = self.future.as_mut().poll(cx);
        NODE.with(|node| *node.borrow_mut() = previous);
        result
    }
}

/// Connects to `address` on the current thread's network.
pub(crate) async fn connect(address: &str) -> io::Result<SimStream> {
    let network = NETWORK.with(|network| network.borrow().clone()).ok_or_else(|| {
        io::Error::new(io::ErrorKind::NotFound, format!("no simulated network on this thread for {address}"))
    })?;
    network.connect(address).await
}

/// A listening address on the simulated network; dropping it stops listening.
pub struct SimListener {
    network: SimNet,
    name: String,
    shared: Arc<ListenerShared>,
}

struct ListenerShared {
    node: Arc<str>,
    state: Mutex<ListenerState>,
    arrived: Notify,
}

struct ListenerState {
    backlog: VecDeque<SimStream>,
    closed: bool,
}

impl std::fmt::Debug for SimListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimListener").field("name", &self.name).field("node", &self.shared.node).finish()
    }
}

impl SimListener {
    /// The next connection; fails once the node is killed.
    pub async fn accept(&self) -> io::Result<SimStream> {
        loop {
            let arrived = self.shared.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            {
                let mut state = self.shared.state.lock().expect("listener lock");
                if let Some(stream) = state.backlog.pop_front() {
                    return Ok(stream);
                }
                if state.closed {
                    return Err(io::Error::new(io::ErrorKind::ConnectionAborted, "the node was killed"));
                }
            }
            arrived.await;
        }
    }

    /// The address it listens at, with its prefix.
    pub fn address(&self) -> String {
        format!("{SIM_PREFIX}{}", self.name)
    }
}

impl Drop for SimListener {
    fn drop(&mut self) {
        let mut state = self.network.state();
        if state.listeners.get(&self.name).is_some_and(|listener| Arc::ptr_eq(listener, &self.shared)) {
            state.listeners.remove(&self.name);
        }
    }
}

/// One direction of a stream.
struct Pipe {
    from: Arc<str>,
    to: Arc<str>,
    state: Mutex<PipeState>,
    /// Signalled on every change a reader or writer may wait for.
    changed: Notify,
}

#[derive(Default)]
struct PipeState {
    /// Written bytes in order, each with the time it arrives (`None`: held by a cut).
    segments: VecDeque<Segment>,
    /// Bytes in `segments`.
    bytes: usize,
    /// The writing end shut down or went away: the reader sees the end after the segments.
    ended: bool,
    /// The reading end shut down: it reads the end at once.
    read_closed: bool,
    /// Reset by a kill or by the reading end going away: both ends fail.
    reset: bool,
}

struct Segment {
    arrives: Option<Instant>,
    bytes: Vec<u8>,
    read: usize,
}

impl Pipe {
    fn new(from: Arc<str>, to: Arc<str>) -> Arc<Pipe> {
        Arc::new(Pipe { from, to, state: Mutex::new(PipeState::default()), changed: Notify::new() })
    }

    fn lock(&self) -> MutexGuard<'_, PipeState> {
        self.state.lock().expect("a pipe's lock is never held across a panic")
    }
}

impl PipeState {
    /// Holds every segment that has not arrived by `now`.
    fn hold_undelivered(&mut self, now: Instant) {
        for segment in &mut self.segments {
            if segment.arrives.is_some_and(|at| at > now) {
                segment.arrives = None;
            }
        }
    }

    fn release_held(&mut self, at: Instant) {
        for segment in &mut self.segments {
            if segment.arrives.is_none() {
                segment.arrives = Some(at);
            }
        }
    }

    fn last_arrival(&self) -> Option<Option<Instant>> {
        self.segments.back().map(|segment| segment.arrives)
    }
}

/// One end of a simulated stream. It is also an `AsyncRead` and `AsyncWrite`, for protocols
/// that read and write through those (the NBD gateway's).
pub struct SimStream {
    network: SimNet,
    peer: String,
    inbound: Arc<Pipe>,
    outbound: Arc<Pipe>,
    /// The wait of a `poll_read` that found nothing to read, kept across polls (in a mutex
    /// only so the stream stays `Sync`; polls reach it through `&mut`).
    read_wait: Mutex<Option<Wait>>,
    /// The wait of a `poll_write` that found the pipe full.
    write_wait: Mutex<Option<Wait>>,
}

type Wait = Pin<Box<dyn Future<Output = ()> + Send>>;

impl std::fmt::Debug for SimStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SimStream({} -> {}, peer {})", self.outbound.from, self.outbound.to, self.peer)
    }
}

fn reset_error() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionReset, "connection reset")
}

impl SimStream {
    fn new(network: SimNet, peer: String, inbound: Arc<Pipe>, outbound: Arc<Pipe>) -> SimStream {
        SimStream { network, peer, inbound, outbound, read_wait: Mutex::new(None), write_wait: Mutex::new(None) }
    }

    pub fn peer_name(&self) -> String {
        self.peer.clone()
    }

    /// Waits until a read would return bytes, the end, or an error.
    pub(crate) async fn readable(&self) -> io::Result<()> {
        wait_readable(&self.inbound).await;
        Ok(())
    }

    /// Waits until a write would take bytes or fail.
    pub(crate) async fn writable(&self) -> io::Result<()> {
        wait_writable(&self.outbound).await;
        Ok(())
    }

    pub(crate) fn try_read(&self, buffer: &mut [u8]) -> io::Result<usize> {
        let mut state = self.inbound.lock();
        if state.reset {
            return Err(reset_error());
        }
        if state.read_closed {
            return Ok(0);
        }
        let now = Instant::now();
        let mut done = 0;
        while done < buffer.len() {
            let Some(segment) = state.segments.front_mut() else { break };
            if segment.arrives.is_none_or(|at| at > now) {
                break;
            }
            let take = (segment.bytes.len() - segment.read).min(buffer.len() - done);
            buffer[done..done + take].copy_from_slice(&segment.bytes[segment.read..segment.read + take]);
            segment.read += take;
            done += take;
            if segment.read == segment.bytes.len() {
                state.segments.pop_front();
            }
        }
        state.bytes -= done;
        if done > 0 {
            drop(state);
            // The writer may be waiting for room.
            self.inbound.changed.notify_waiters();
            return Ok(done);
        }
        if state.ended && state.segments.is_empty() {
            return Ok(0);
        }
        Err(io::ErrorKind::WouldBlock.into())
    }

    pub(crate) fn try_write(&self, bytes: &[u8]) -> io::Result<usize> {
        let mut network = self.network.state();
        let cut = network.cuts.contains(&(self.outbound.from.clone(), self.outbound.to.clone()));
        let latency = network.latency();
        let (from, to) = (&self.outbound.from, &self.outbound.to);
        network
            .log(|| format!("{from} to {to}: {} bytes in {latency:?}{}", bytes.len(), if cut { ", held" } else { "" }));
        drop(network);
        let mut state = self.outbound.lock();
        if state.reset {
            return Err(reset_error());
        }
        if state.ended {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, "the stream is shut down"));
        }
        let room = PIPE_BYTES_MAX.saturating_sub(state.bytes);
        if room == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        if bytes.is_empty() {
            return Ok(0);
        }
        let take = bytes.len().min(room);
        // In order: never before the bytes written ahead of these; held while anything ahead is.
        let arrives = match state.last_arrival() {
            _ if cut => None,
            Some(None) => None,
            Some(Some(previous)) => Some(previous.max(Instant::now() + latency)),
            None => Some(Instant::now() + latency),
        };
        state.segments.push_back(Segment { arrives, bytes: bytes[..take].to_vec(), read: 0 });
        state.bytes += take;
        drop(state);
        self.outbound.changed.notify_waiters();
        Ok(take)
    }

    /// Shuts down both directions: the peer reads the end after what was sent, this end reads
    /// the end at once.
    pub(crate) fn shutdown(&self) -> io::Result<()> {
        self.outbound.lock().ended = true;
        self.outbound.changed.notify_waiters();
        self.inbound.lock().read_closed = true;
        self.inbound.changed.notify_waiters();
        Ok(())
    }
}

/// Waits until a read of `pipe` would return bytes, the end, or an error.
async fn wait_readable(pipe: &Pipe) {
    loop {
        let changed = pipe.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let next = {
            let state = pipe.lock();
            if state.reset || state.read_closed {
                return;
            }
            match state.segments.front() {
                Some(Segment { arrives: Some(at), .. }) if *at <= Instant::now() => return,
                Some(Segment { arrives, .. }) => *arrives,
                None if state.ended => return,
                None => None,
            }
        };
        match next {
            Some(at) => {
                tokio::select! {
                    biased;
                    () = &mut changed => {}
                    () = tokio::time::sleep_until(at) => {}
                }
            }
            None => changed.await,
        }
    }
}

/// Waits until a write to `pipe` would take bytes or fail.
async fn wait_writable(pipe: &Pipe) {
    loop {
        let changed = pipe.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        {
            let state = pipe.lock();
            if state.reset || state.ended || state.bytes < PIPE_BYTES_MAX {
                return;
            }
        }
        changed.await;
    }
}

/// Polls the wait kept in `slot`, starting it with `start` if none is kept; clears it once done.
fn poll_wait(slot: &mut Mutex<Option<Wait>>, cx: &mut Context<'_>, start: impl FnOnce() -> Wait) -> Poll<()> {
    let slot = slot.get_mut().expect("a wait's lock is never held across a panic");
    let wait = slot.get_or_insert_with(start);
    let done = wait.as_mut().poll(cx);
    if done.is_ready() {
        *slot = None;
    }
    done
}

impl tokio::io::AsyncRead for SimStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buffer: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if buffer.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            match self.try_read(buffer.initialize_unfilled()) {
                Ok(read) => {
                    buffer.advance(read);
                    *self.read_wait.get_mut().expect("a wait's lock is never held across a panic") = None;
                    return Poll::Ready(Ok(()));
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) => return Poll::Ready(Err(error)),
            }
            let pipe = self.inbound.clone();
            std::task::ready!(poll_wait(&mut self.read_wait, cx, || Box::pin(
                async move { wait_readable(&pipe).await }
            )));
        }
    }
}

impl tokio::io::AsyncWrite for SimStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        if bytes.is_empty() {
            return Poll::Ready(Ok(0));
        }
        loop {
            match self.try_write(bytes) {
                Ok(written) => {
                    *self.write_wait.get_mut().expect("a wait's lock is never held across a panic") = None;
                    return Poll::Ready(Ok(written));
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) => return Poll::Ready(Err(error)),
            }
            let pipe = self.outbound.clone();
            std::task::ready!(poll_wait(&mut self.write_wait, cx, || Box::pin(
                async move { wait_writable(&pipe).await }
            )));
        }
    }

    /// Written bytes are on their way at once: nothing to flush.
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// Ends the writing direction: the peer reads the end after what was sent.
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.outbound.lock().ended = true;
        self.outbound.changed.notify_waiters();
        Poll::Ready(Ok(()))
    }
}

impl Drop for SimStream {
    fn drop(&mut self) {
        // A closed socket: the peer reads the end of what was sent, and its later writes fail.
        self.outbound.lock().ended = true;
        self.outbound.changed.notify_waiters();
        self.inbound.lock().reset = true;
        self.inbound.changed.notify_waiters();
    }
}

/// A small seeded generator (SplitMix64): latencies need no more, and no dependency.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}
