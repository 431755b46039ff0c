//! The etcd members a client was given, and which of them to ask.
//!
//! Every request goes to one member, the current one, until it fails to answer (refused,
//! reset, no leader, or silent past the attempt timeout); then that member is set aside for
//! [`SET_ASIDE`] and the request is retried on the next, so a dead, hung or cut-off member
//! costs a request one attempt and later requests nothing. A member set aside is asked again
//! once its time is up, or when every member is set aside (the one whose time ends first).
//! Sticking to one member rather than spreading requests keeps a client's requests in order
//! on one connection and makes a failing member show at once.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// How long a member that failed to answer is passed over.
pub(crate) const SET_ASIDE: Duration = Duration::from_secs(10);

/// Which member to ask, by index into the list the client was given.
pub(crate) struct Members {
    state: Mutex<State>,
}

struct State {
    current: usize,
    /// Per member: until when it is passed over.
    set_aside_until: Vec<Option<Instant>>,
}

impl Members {
    pub(crate) fn new(count: usize) -> Members {
        assert!(count > 0, "an etcd client needs a member");
        Members { state: Mutex::new(State { current: 0, set_aside_until: vec![None; count] }) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("the members' lock is never held across a panic")
    }

    /// The member to ask now: the current one unless it is set aside, else the next one that
    /// is not, else the one whose time is up first.
    pub(crate) fn pick(&self) -> usize {
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
    pub(crate) fn failed(&self, index: usize) {
        let mut state = self.lock();
        state.set_aside_until[index] = Some(Instant::now() + SET_ASIDE);
        if state.current == index {
            state.current = (index + 1) % state.set_aside_until.len();
        }
    }

    /// Member `index` answered.
    pub(crate) fn answered(&self, index: usize) {
        self.lock().set_aside_until[index] = None;
    }

    /// Whether every member is set aside now.
    pub(crate) fn all_set_aside(&self) -> bool {
        let now = Instant::now();
        self.lock().set_aside_until.iter().all(|until| until.is_some_and(|until| until > now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_failed_member_is_passed_over_until_its_time_is_up() {
        let members = Members::new(3);
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
}
