//! The metadata store as an etcd cluster of three members (`SimOptions::control_plane`), as
//! its clients see it: each node's client asks one member at a time through the etcd client's
//! own failover loop (`meta::members`), and a member may be killed (it refuses at once), go
//! silent (SIGSTOPped, or cut off by dropped packets: no answer until the attempt times out),
//! or the members may be cut off from each other (every one answers, none has a leader).
//!
//! The elections follow etcd's rules as far as the clients can tell: while the leader is
//! silent or dead, or has lost its quorum, requests through the others wait for it (they are
//! forwarded to it); after [`ELECTION_TIMEOUT`] the followers elect one of them if a majority
//! is up, and otherwise every member answers "no leader" at once. Only a leader revokes
//! leases, and a new leader gives every lease its whole TTL again: the store's leases are held
//! from the moment the leader stops leading until one is elected (`EmbeddedMetaStore::
//! hold_leases`). A watch ends as etcd's client ends it: at once on a dead member, once a
//! silent one has missed its keep-alive pings, and once its member has had no leader for three
//! election timeouts (etcd cancels watches that require a leader); events wait while their
//! member is silent.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use meta::members::ATTEMPT_TIMEOUT;
use meta::MetaError;
use meta_embedded::EmbeddedMetaStore;
use tokio::sync::watch;
use tokio::time::Instant;

/// The members of the store.
pub(crate) const MEMBERS: usize = 3;
/// How long followers wait for a leader that went silent before they elect another (etcd's
/// default election timeout).
pub(crate) const ELECTION_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a watch on a silent member lasts: the client pings every 3 s and gives up on a
/// ping unanswered for 3 s.
const WATCH_SILENCE_LIMIT: Duration = Duration::from_secs(6);
/// How long a watch lasts on a member that knows no leader.
const WATCH_NO_LEADER_LIMIT: Duration = Duration::from_secs(3);

/// A member as its clients find it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Health {
    Up,
    /// Stopped or cut off: it answers nothing, since the instant given.
    Silent(Instant),
    /// Killed: its address refuses connections.
    Dead,
}

struct State {
    health: [Health; MEMBERS],
    /// The leader the members know. While it is silent or dead, or without its quorum, the
    /// others still take it for the leader until their election timeout.
    leader: Option<usize>,
    /// Whether the members are cut off from one another.
    split: bool,
    /// Since when no member has known a leader.
    leaderless_since: Option<Instant>,
    /// Whether an election is due (one at a time).
    election_due: bool,
}

impl State {
    fn up(&self) -> usize {
        self.health.iter().filter(|health| **health == Health::Up).count()
    }

    /// Whether the leader can commit: it answers, it reaches a majority.
    fn serving(&self) -> bool {
        self.leader.is_some_and(|leader| self.health[leader] == Health::Up) && !self.split && self.up() * 2 > MEMBERS
    }
}

/// The members' state, shared by every node's view of the store.
#[derive(Clone)]
pub(crate) struct StoreMembers {
    state: Arc<Mutex<State>>,
    /// Bumped by every change, for calls waiting on one.
    changed: Arc<watch::Sender<u64>>,
    /// The store whose leases the elections hold and release.
    store: EmbeddedMetaStore,
}

impl StoreMembers {
    pub(crate) fn new(store: EmbeddedMetaStore) -> StoreMembers {
        let state = State {
            health: [Health::Up; MEMBERS],
            leader: Some(0),
            split: false,
            leaderless_since: None,
            election_due: false,
        };
        StoreMembers { state: Arc::new(Mutex::new(state)), changed: Arc::new(watch::channel(0).0), store }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("the members' lock is never held across a panic")
    }

    /// The member that leads, if one does and can commit.
    pub(crate) fn leader(&self) -> Option<usize> {
        let state = self.lock();
        state.leader.filter(|_| state.serving())
    }

    /// Whether every member answers.
    pub(crate) fn all_up(&self) -> bool {
        self.lock().up() == MEMBERS
    }

    pub(crate) fn kill(&self, member: usize) {
        self.change(|state| state.health[member] = Health::Dead);
    }

    /// Member `member` stops answering (SIGSTOP, or a cut that drops its packets).
    pub(crate) fn silence(&self, member: usize) {
        self.change(|state| {
            if state.health[member] == Health::Up {
                state.health[member] = Health::Silent(Instant::now());
            }
        });
    }

    /// Member `member` answers again (restarted, resumed or healed).
    pub(crate) fn revive(&self, member: usize) {
        self.change(|state| state.health[member] = Health::Up);
    }

    /// Whether the members are cut off from one another.
    pub(crate) fn is_split(&self) -> bool {
        self.lock().split
    }

    /// Cuts the members off from one another, or heals that.
    pub(crate) fn set_split(&self, split: bool) {
        self.change(|state| state.split = split);
    }

    /// Every member up and together again.
    pub(crate) fn heal(&self) {
        self.change(|state| {
            state.health = [Health::Up; MEMBERS];
            state.split = false;
        });
    }

    /// Applies `change`, then what follows from it: a leader that stopped serving stops
    /// revoking leases at once and is replaced after the election timeout; members with no
    /// leader elect one once a majority of them reach each other.
    fn change(&self, change: impl FnOnce(&mut State)) {
        let mut state = self.lock();
        change(&mut state);
        let due = match state.leader {
            Some(_) => !state.serving(),
            None => !state.split && state.up() * 2 > MEMBERS,
        };
        if due {
            self.store.hold_leases();
            if !state.election_due {
                state.election_due = true;
                let members = self.clone();
                tokio::task::spawn_local(async move {
                    tokio::time::sleep(ELECTION_TIMEOUT).await;
                    members.elect();
                });
            }
        }
        drop(state);
        self.changed.send_modify(|generation| *generation += 1);
    }

    /// The followers' election timeout has passed: the first member up after the old leader
    /// leads if a majority reach each other, else none does.
    fn elect(&self) {
        let mut state = self.lock();
        state.election_due = false;
        let previous = state.leader.unwrap_or(MEMBERS - 1);
        let electable = !state.split && state.up() * 2 > MEMBERS;
        if state.serving() {
            // The leader came back within the timeout: it expires leases as before.
            self.store.release_leases(false);
        } else if electable {
            let leader = (1..=MEMBERS)
                .map(|offset| (previous + offset) % MEMBERS)
                .find(|&member| state.health[member] == Health::Up)
                .expect("a majority is up");
            state.leader = Some(leader);
            state.leaderless_since = None;
            self.store.release_leases(true);
        } else {
            state.leader = None;
            state.leaderless_since.get_or_insert(Instant::now());
        }
        drop(state);
        self.changed.send_modify(|generation| *generation += 1);
    }

    /// Waits until a request sent to `member` can be served there: an error at once if it is
    /// dead or knows no leader; no answer while it is silent or its leader cannot commit.
    pub(crate) async fn through(&self, member: usize) -> Result<(), MetaError> {
        let mut changed = self.changed.subscribe();
        loop {
            {
                let state = self.lock();
                match state.health[member] {
                    Health::Dead => return Err(MetaError::unavailable(url(member), "connection refused")),
                    Health::Silent(_) => {}
                    Health::Up if state.serving() => return Ok(()),
                    Health::Up if state.leader.is_none() => {
                        return Err(MetaError::unavailable(url(member), "etcdserver: no leader"))
                    }
                    Health::Up => {}
                }
            }
            changed.changed().await.expect("the members outlive their clients");
        }
    }

    /// `MetaStore::leaderless` as the etcd client finds it: every member asked; `true` only if
    /// every one answered and none knows a leader. A silent member costs the attempt timeout.
    pub(crate) async fn leaderless(&self) -> bool {
        let silent = self.lock().health.iter().any(|health| matches!(health, Health::Silent(_)));
        if silent {
            tokio::time::sleep(ATTEMPT_TIMEOUT).await;
        }
        let state = self.lock();
        state.up() == MEMBERS && state.leader.is_none()
    }

    /// Whether events for a watch on `member` wait: the member is silent.
    pub(crate) fn holds_events(&self, member: usize) -> bool {
        matches!(self.lock().health[member], Health::Silent(_))
    }

    /// Why a watch on `member` ends now, if it does.
    pub(crate) fn ends_watch(&self, member: usize) -> Option<MetaError> {
        let state = self.lock();
        let now = Instant::now();
        match state.health[member] {
            Health::Dead => Some(MetaError::unavailable(url(member), "the watch's connection was reset")),
            Health::Silent(since) if now - since >= WATCH_SILENCE_LIMIT => {
                Some(MetaError::unavailable(url(member), "the watch's connection missed its keep-alive pings"))
            }
            Health::Up if state.leaderless_since.is_some_and(|since| now - since >= WATCH_NO_LEADER_LIMIT) => {
                Some(MetaError::unavailable(url(member), "etcdserver: no leader (the watch was canceled)"))
            }
            _ => None,
        }
    }
}

/// Member `index`'s name in errors and logs.
pub(crate) fn url(index: usize) -> String {
    format!("store-member-{index}")
}

/// The member list each node's client is given.
pub(crate) fn urls() -> Vec<String> {
    (0..MEMBERS).map(url).collect()
}
