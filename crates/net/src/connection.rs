//! `Connection`: the requesting side of one TCP connection, shared by many tasks.
//!
//! A call takes a slot of the connection's pending table (`stdx::SlotTable`), whose id is the
//! request id, sends its frame from the calling task (`Link::send`), and waits on the slot.
//! The reader task decodes replies and completes slots by request id, waking their callers.
//! Slots are reused, so a call allocates nothing of its own. A slot's generation grows on every
//! release, so the late reply to an abandoned call can never complete a newer one: it is
//! dropped.
//!
//! When the connection closes, for whatever reason, every waiting slot is completed with the
//! same error and the table refuses new calls.

use std::future::poll_fn;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use stdx::SlotTable;
use tokio::sync::Notify;
use wire::{Body, Frame, Request, Response};

use crate::limits::CALLS_IN_FLIGHT_MAX;
use crate::link::{FrameReader, Link};
use crate::stream::Stream;
use crate::NetError;

/// A reply: the responder's PG epoch (for `WrongEpoch`, its current one) and the response,
/// which is `Response::Failed { status, .. }` when the status is not `Ok`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub epoch: u64,
    pub response: Response,
}

/// A handle to one pipelined wire-protocol connection. Clones share the connection; it closes
/// when the last clone is dropped, or at the first error.
///
/// Any number of tasks may [`call`](Connection::call) at once, from any thread; at most
/// [`limits::CALLS_IN_FLIGHT_MAX`](crate::limits::CALLS_IN_FLIGHT_MAX) calls are in flight and
/// further calls wait for a free slot.
#[derive(Clone)]
pub struct Connection {
    handle: Arc<Handle>,
}

/// Closes the connection when the last `Connection` clone goes; the reader task holds only
/// `Shared`.
struct Handle {
    shared: Arc<Shared>,
}

struct Shared {
    link: Arc<Link>,
    /// Created on a `current_thread` runtime: the reader and writer tasks run on the callers'
    /// thread. Calls may then coalesce their sends (the writer task runs after the tasks
    /// already woken) and spin for their replies (a yield polls the sockets).
    same_thread: bool,
    /// Moving average of the calls' round trips, in nanoseconds (see `spin_budget`).
    latency_average_ns: AtomicU64,
    /// See `Connection::set_spin_limit`; zero (the default) never polls.
    spin_limit_ns: AtomicU64,
    pending: Mutex<Pending>,
    /// Wakes calls waiting for a slot when the table was full, and all of them on close.
    slot_freed: Notify,
}

struct Pending {
    /// The calls in flight, by request id.
    slots: SlotTable<SlotState>,
    /// Set on close: every new call fails with it.
    closed: Option<NetError>,
}

enum SlotState {
    /// The call's frame is sent or being sent; the waker is set once the caller has polled.
    Waiting(Option<Waker>),
    Done(Result<Reply, NetError>),
}

/// Connects to `address`: `host:port` over TCP (with `TCP_NODELAY`), `unix:PATH` over a Unix
/// socket.
pub async fn connect(address: &str) -> Result<Connection, NetError> {
    let stream = Stream::connect(address)
        .await
        .map_err(|error| NetError::Connect { address: address.to_string(), source: Arc::new(error) })?;
    Ok(Connection::from_stream(stream, address))
}

impl Connection {
    /// Wraps a connected stream, naming the peer `peer` in errors, and starts its reader task.
    /// Must be called inside a tokio runtime.
    pub fn from_stream(stream: impl Into<Stream>, peer: &str) -> Connection {
        let link = Link::new(stream.into(), Arc::from(peer));
        let flavor = tokio::runtime::Handle::current().runtime_flavor();
        let shared = Arc::new(Shared {
            link: link.clone(),
            same_thread: flavor == tokio::runtime::RuntimeFlavor::CurrentThread,
            latency_average_ns: AtomicU64::new(0),
            spin_limit_ns: AtomicU64::new(0),
            pending: Mutex::new(Pending { slots: SlotTable::new(CALLS_IN_FLIGHT_MAX), closed: None }),
            slot_freed: Notify::new(),
        });
        tokio::spawn(read_replies(shared.clone(), FrameReader::new(link)));
        Connection { handle: Arc::new(Handle { shared }) }
    }

    /// Sends `request` with PG epoch `epoch` in its header and waits for the reply.
    ///
    /// Fails only if the connection is or becomes closed; a reply with a status other than `Ok`
    /// is a successful call. Dropping the future abandons the call (its reply, if one comes, is
    /// ignored); the request may still have reached the peer.
    pub async fn call(&self, epoch: u64, request: Request) -> Result<Reply, NetError> {
        let shared = &self.handle.shared;
        let (request_id, calls_in_flight) = shared.reserve().await?;
        let mut guard = SlotGuard { shared, request_id, armed: true };
        // A lone call goes out at once; with others in flight their replies arrive in bursts,
        // and the calls that follow them share one write (see `Link::send`).
        let coalesce = shared.same_thread && calls_in_flight > 1;
        shared.link.send(&Frame::request(request_id, epoch, request), coalesce).await?;
        let sent = Instant::now();
        // Adaptive polling: while replies on this connection come back within the budget, keep
        // the thread awake (yielding lets the runtime poll the sockets without sleeping)
        // instead of paying a wake-up when this one arrives.
        let spin_until = sent + shared.spin_budget();
        let reply = loop {
            match poll_fn(|cx| Poll::Ready(shared.poll_reply(request_id, cx.waker()))).await {
                Poll::Ready(reply) => break reply,
                Poll::Pending if Instant::now() < spin_until => tokio::task::yield_now().await,
                Poll::Pending => break poll_fn(|cx| shared.poll_reply(request_id, cx.waker())).await,
            }
        };
        guard.armed = false;
        shared.record_latency(sent.elapsed());
        reply
    }

    /// Lets calls on this connection poll for their replies for up to `limit` instead of
    /// sleeping, while its round trips average within `limit` (adaptive polling; see
    /// `Shared::spin_budget`). Only on a connection made on a `current_thread` runtime, where
    /// a yield polls the sockets; zero (the default) turns it off.
    pub fn set_spin_limit(&self, limit: Duration) {
        let limit_ns = u64::try_from(limit.as_nanos()).unwrap_or(u64::MAX);
        self.handle.shared.spin_limit_ns.store(limit_ns, Ordering::Relaxed);
    }

    /// Whether a call made now would poll for its reply before sleeping.
    #[cfg(test)]
    pub(crate) fn spins(&self) -> bool {
        !self.handle.shared.spin_budget().is_zero()
    }

    /// Whether the connection has closed; every call on it then fails at once.
    pub fn is_closed(&self) -> bool {
        self.handle.shared.link.is_closed()
    }

    /// Closes the connection: calls in flight and later calls fail with `reason`.
    pub fn close(&self, reason: &str) {
        self.handle.shared.close(&format!("closed by this side: {reason}"));
    }

    /// The peer's address, as given to [`connect`].
    pub fn peer(&self) -> &str {
        self.handle.shared.link.peer()
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").field("peer", &self.peer()).field("closed", &self.is_closed()).finish()
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.close("closed by this side: every handle was dropped");
    }
}

/// Releases a call's slot if the call ends before taking its reply (an error or a drop).
struct SlotGuard<'a> {
    shared: &'a Shared,
    request_id: u64,
    armed: bool,
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            let mut pending = self.shared.lock();
            self.shared.release(&mut pending, self.request_id);
        }
    }
}

impl Shared {
    /// How long a call may poll for its reply before it lets the thread sleep: the spin limit
    /// (`Connection::set_spin_limit`) while this connection's calls come back within it on average, zero
    /// otherwise. A wake-up costs tens of microseconds on the machines measured, so a reply
    /// expected within the limit is cheaper to catch awake; a slower one (a replicated write)
    /// would burn CPU the peers on the same cores need.
    fn spin_budget(&self) -> Duration {
        let limit_ns = self.spin_limit_ns.load(Ordering::Relaxed);
        if !self.same_thread || limit_ns == 0 || self.latency_average_ns.load(Ordering::Relaxed) > limit_ns {
            return Duration::ZERO;
        }
        Duration::from_nanos(limit_ns)
    }

    fn record_latency(&self, latency: Duration) {
        let sample_ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        let average_ns = self.latency_average_ns.load(Ordering::Relaxed);
        // Weight 1/8: a few slow calls switch spinning off, a few fast ones back on.
        let updated_ns = average_ns - average_ns / 8 + sample_ns / 8;
        self.latency_average_ns.store(updated_ns, Ordering::Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().expect("pending table lock poisoned")
    }

    /// Takes a free slot, waiting while all `CALLS_IN_FLIGHT_MAX` are in use. Returns its
    /// request id and the number of calls in flight, this one included.
    async fn reserve(&self) -> Result<(u64, usize), NetError> {
        loop {
            let notified = self.slot_freed.notified();
            {
                let mut pending = self.lock();
                if let Some(error) = &pending.closed {
                    return Err(error.clone());
                }
                if let Ok(request_id) = pending.slots.insert(SlotState::Waiting(None)) {
                    return Ok((request_id, pending.slots.len()));
                }
            }
            // A release stores a permit if no call waits yet, so this wait cannot miss it.
            notified.await;
        }
    }

    /// Frees the slot of `request_id`, which must be the caller's own, and returns its state.
    fn release(&self, pending: &mut Pending, request_id: u64) -> SlotState {
        let state = pending.slots.remove(request_id).expect("a call releases only its own slot");
        // Calls wait for a slot only once the table has grown to its capacity.
        if pending.slots.allocated() == CALLS_IN_FLIGHT_MAX {
            self.slot_freed.notify_one();
        }
        state
    }

    fn poll_reply(&self, request_id: u64, waker: &Waker) -> Poll<Result<Reply, NetError>> {
        let mut pending = self.lock();
        match pending.slots.get_mut(request_id).expect("a call polls only its own reserved slot") {
            SlotState::Waiting(slot_waker) => {
                match slot_waker {
                    Some(existing) if existing.will_wake(waker) => {}
                    _ => *slot_waker = Some(waker.clone()),
                }
                Poll::Pending
            }
            SlotState::Done(_) => {
                let SlotState::Done(result) = self.release(&mut pending, request_id) else {
                    unreachable!("matched Done above");
                };
                Poll::Ready(result)
            }
        }
    }

    /// Hands a reply to its call. A reply whose call was abandoned is dropped.
    fn complete(&self, request_id: u64, reply: Reply) {
        let mut pending = self.lock();
        let Some(state) = pending.slots.get_mut(request_id) else {
            tracing::debug!(peer = %self.link.peer(), request_id, "dropping a reply to an abandoned call");
            return;
        };
        match std::mem::replace(state, SlotState::Done(Ok(reply))) {
            SlotState::Waiting(waker) => {
                drop(pending);
                if let Some(waker) = waker {
                    waker.wake();
                }
            }
            previous @ SlotState::Done(_) => {
                // A second reply with the same id, which a correct peer never sends.
                *state = previous;
                tracing::debug!(peer = %self.link.peer(), request_id, "dropping an unexpected reply");
            }
        }
    }

    /// Closes the link and fails every call in flight with `reason`.
    fn close(&self, reason: &str) {
        self.link.close(reason);
        let error = self.link.closed_error();
        let mut wakers = Vec::new();
        {
            let mut pending = self.lock();
            if pending.closed.is_some() {
                return;
            }
            pending.closed = Some(error.clone());
            for state in pending.slots.values_mut() {
                if let SlotState::Waiting(waker) = state {
                    wakers.extend(waker.take());
                    *state = SlotState::Done(Err(error.clone()));
                }
            }
        }
        for waker in wakers {
            waker.wake();
        }
        self.slot_freed.notify_waiters();
    }
}

/// The reader task: completes calls until the connection closes, then fails the rest.
async fn read_replies(shared: Arc<Shared>, mut reader: FrameReader) {
    let reason = loop {
        match reader.next().await {
            Ok(Some(Frame { request_id, epoch, body: Body::Response(response) })) => {
                shared.complete(request_id, Reply { epoch, response });
            }
            Ok(Some(Frame { request_id, body: Body::Request(request), .. })) => {
                break format!(
                    "protocol violation: the peer sent a {} request (request_id={request_id}) on a connection that only carries replies to it",
                    request.opcode()
                );
            }
            Ok(None) => break "the peer closed the connection".to_string(),
            // The link is closed already; `close` keeps its reason.
            Err(error) => break error.to_string(),
        }
    };
    shared.close(&reason);
}
