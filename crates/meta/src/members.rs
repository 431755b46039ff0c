//! The members of a replicated store a client was given, which of them to ask, and the loop
//! that asks one after another (the etcd client's, and the simulator's model of it).
//!
//! Every request goes to one member, the current one, until it fails to answer (refused,
//! reset, no leader, or silent past [`ATTEMPT_TIMEOUT`]); then that member is set aside for
//! [`SET_ASIDE`] and the request is retried on the next, so a dead, hung or cut-off member
//! costs a request one attempt and later requests nothing. A member set aside is asked again
//! once its time is up, or when every member is set aside (the one whose time ends first).
//! Sticking to one member rather than spreading requests keeps a client's requests in order
//! on one connection and makes a failing member show at once.
//!
//! An answer that is a refusal (a failed compare, a missing lease) ends the request as it is:
//! only [`MetaError::Unavailable`] means the member did not answer. A caller that gives up on
//! an attempt (drops it) after [`ABANDONED_SLOW`] counts as no answer too: callers with
//! deadlines shorter than [`ATTEMPT_TIMEOUT`] (an OSD renews its lease within a sixth of its
//! TTL) would otherwise keep asking a hung member, never reaching the timeout that passes it
//! over; a healthy member answers in milliseconds, and passing one over costs nothing but a
//! request to another member.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::{timeout_at, Instant};

use crate::MetaError;

/// How long a request may take, over every member it is tried on, before it fails with
/// `MetaError::Unavailable`.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one member may take to answer before the request goes to the next: a request
/// takes milliseconds; a member silent this long is hung or cut off.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
/// The pause before trying again once every member has failed to answer.
pub const ALL_FAILED_PAUSE: Duration = Duration::from_millis(200);
/// How long a member that failed to answer is passed over.
pub const SET_ASIDE: Duration = Duration::from_secs(10);
/// An attempt its caller gave up on after this long counts as unanswered.
pub const ABANDONED_SLOW: Duration = Duration::from_millis(250);

/// Which member to ask, by index into the list the client was given.
pub struct Members {
    /// Each member's address, for errors.
    urls: Vec<String>,
    state: Mutex<State>,
}

struct State {
    current: usize,
    /// Per member: until when it is passed over.
    set_aside_until: Vec<Option<Instant>>,
}

impl Members {
    pub fn new(urls: Vec<String>) -> Members {
        assert!(!urls.is_empty(), "a client of a replicated store needs a member");
        let count = urls.len();
        Members { urls, state: Mutex::new(State { current: 0, set_aside_until: vec![None; count] }) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("the members' lock is never held across a panic")
    }

    /// Member `index`'s address.
    pub fn url(&self, index: usize) -> &str {
        &self.urls[index]
    }

    /// The member to ask now: the current one unless it is set aside, else the next one that
    /// is not, else the one whose time is up first.
    pub fn pick(&self) -> usize {
        let mut state = self.lock();
        let now = Instant::now();
        let count = state.set_aside_until.len();
        let available = |state: &State, index: usize| state.set_aside_until[index].is_none_or(|until| until <= now);
        let chosen = (0..count)
            .map(|offset| (state.current + offset) % count)
            .find(|&index| available(&state, index))
            .unwrap_or_else(|| {
                (0..count).min_by_key(|&index| state.set_aside_until[index]).expect("at least one member")
            });
        state.current = chosen;
        chosen
    }

    /// Member `index` did not answer: passed over for [`SET_ASIDE`].
    pub fn failed(&self, index: usize) {
        let mut state = self.lock();
        state.set_aside_until[index] = Some(Instant::now() + SET_ASIDE);
        if state.current == index {
            state.current = (index + 1) % state.set_aside_until.len();
        }
    }

    /// Member `index` answered.
    pub fn answered(&self, index: usize) {
        self.lock().set_aside_until[index] = None;
    }

    /// Starts an attempt on the member to ask now ([`Members::pick`]).
    pub fn attempt(&self) -> Attempt<'_> {
        Attempt { members: self, member: self.pick(), started: Instant::now(), settled: false }
    }

    /// Whether every member is set aside now.
    pub fn all_set_aside(&self) -> bool {
        let now = Instant::now();
        self.lock().set_aside_until.iter().all(|until| until.is_some_and(|until| until > now))
    }

    /// Runs `attempt` on one member after another until one answers, each attempt bounded by
    /// [`ATTEMPT_TIMEOUT`] and all of them by [`REQUEST_TIMEOUT`]. `what` names the request
    /// in the error of an attempt that timed out.
    pub async fn call<T, F, Fut>(&self, what: &str, attempt: F) -> Result<T, MetaError>
    where
        F: Fn(usize) -> Fut,
        Fut: Future<Output = Result<T, MetaError>>,
    {
        let deadline = Instant::now() + REQUEST_TIMEOUT;
        loop {
            let started = self.attempt();
            let member = started.member();
            let attempt_deadline = deadline.min(Instant::now() + ATTEMPT_TIMEOUT);
            let error = match timeout_at(attempt_deadline, attempt(member)).await {
                Ok(Err(error @ MetaError::Unavailable { .. })) => error,
                Ok(answer) => {
                    started.answered();
                    return answer;
                }
                Err(_) => {
                    MetaError::unavailable(self.url(member), format!("no answer within {ATTEMPT_TIMEOUT:?} to {what}"))
                }
            };
            self.next_member(started, error, deadline).await?;
        }
    }

    /// Passes over the member of `attempt`, which did not answer (with `error`); the error once
    /// `deadline` has passed, else after a pause if every member is passed over.
    pub async fn next_member(
        &self,
        attempt: Attempt<'_>,
        error: MetaError,
        deadline: Instant,
    ) -> Result<(), MetaError> {
        let member = attempt.unanswered();
        tracing::debug!(%error, member = %self.url(member), "a member did not answer; trying the next");
        if Instant::now() >= deadline {
            return Err(error);
        }
        if self.all_set_aside() {
            tokio::time::sleep_until(deadline.min(Instant::now() + ALL_FAILED_PAUSE)).await;
        }
        Ok(())
    }
}

/// One request's attempt on one member, from [`Members::attempt`]: settled by an answer or
/// by its absence; dropped unsettled after [`ABANDONED_SLOW`], it counts as no answer.
pub struct Attempt<'a> {
    members: &'a Members,
    member: usize,
    started: Instant,
    settled: bool,
}

impl Attempt<'_> {
    /// The member asked.
    pub fn member(&self) -> usize {
        self.member
    }

    /// The member answered.
    pub fn answered(mut self) {
        self.settled = true;
        self.members.answered(self.member);
    }

    /// The member did not answer: passed over for [`SET_ASIDE`]. Returns it.
    pub fn unanswered(mut self) -> usize {
        self.settled = true;
        self.members.failed(self.member);
        self.member
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if !self.settled && self.started.elapsed() >= ABANDONED_SLOW {
            tracing::debug!(member = %self.members.url(self.member), "a request was given up on a slow member; trying the next from now on");
            self.members.failed(self.member);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_failed_member_is_passed_over_until_its_time_is_up() {
        let members = Members::new(["a", "b", "c"].map(String::from).to_vec());
        assert_eq!(members.pick(), 0);
        members.failed(0);
        assert_eq!(members.pick(), 1, "the next member");
        assert_eq!(members.pick(), 1, "sticks to it");
        members.failed(1);
        assert_eq!(members.pick(), 2);
        members.failed(2);
        assert!(members.all_set_aside());
        assert_eq!(members.pick(), 0, "all set aside: the one whose time is up first");
        tokio::time::advance(SET_ASIDE + Duration::from_millis(1)).await;
        assert!(!members.all_set_aside());
        members.answered(0);
        assert_eq!(members.pick(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_given_up_on_a_slow_member_passes_it_over() {
        let members = Members::new(["a", "b", "c"].map(String::from).to_vec());
        let hung = |_member: usize| std::future::pending::<Result<(), MetaError>>();
        // Given up quickly: nothing is known of the member.
        let _ = tokio::time::timeout(ABANDONED_SLOW / 2, members.call("a get", hung)).await;
        assert_eq!(members.pick(), 0);
        // Given up after the member kept it waiting, as a lease renewal with a short deadline is.
        let _ = tokio::time::timeout(ABANDONED_SLOW * 2, members.call("a get", hung)).await;
        assert_eq!(members.pick(), 1, "the next request goes to the next member");
        // An answer settles the attempt: nothing is set aside on drop.
        members.call("a get", |_| async { Ok(()) }).await.unwrap();
        assert_eq!(members.pick(), 1);
    }
}
