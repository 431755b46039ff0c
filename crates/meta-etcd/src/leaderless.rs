//! Whether the etcd cluster has no leader anywhere (ADR 0028).
//!
//! A lease is revoked only by a leader, and a leader elected after a quorum loss gives every
//! lease its whole TTL again from its first entry (etcd's lessor promotion). Any leader needs
//! the votes of a majority of the voting members, and any two majorities share a member: so
//! when a majority of them each say, after some instant, that they know of no leader, no
//! leader elected before that instant still leads, and one elected later cannot revoke a lease
//! within a TTL of it. A member in a minority partition says the same as one in a cluster with
//! no quorum at all, which is why it takes a majority of every voting member, not of those
//! this client reaches.

use std::collections::BTreeSet;

use tokio::time::timeout;

use crate::{pb, Clients, ATTEMPT_TIMEOUT};

/// What one member said: its id, the leader it knows (0: none) and the voting members it
/// knows of.
struct Answer {
    member: u64,
    leader: u64,
    voters: BTreeSet<u64>,
}

/// Asks every member; `true` only if a majority of the voting members any of them names
/// answered, and every member that answered knows of no leader.
pub(crate) async fn leaderless(clients: &[Clients]) -> bool {
    let answers: Vec<Answer> =
        futures_util::future::join_all(clients.iter().cloned().map(ask)).await.into_iter().flatten().collect();
    judge(&answers)
}

fn judge(answers: &[Answer]) -> bool {
    if answers.is_empty() || answers.iter().any(|answer| answer.leader != 0) {
        return false;
    }
    // The widest view of the membership: a member's own list may lag a change.
    let voters: BTreeSet<u64> = answers.iter().flat_map(|answer| answer.voters.iter().copied()).collect();
    let without_leader: BTreeSet<u64> =
        answers.iter().map(|answer| answer.member).filter(|member| voters.contains(member)).collect();
    without_leader.len() * 2 > voters.len()
}

/// A member's status and its member list, both answered without a leader (no `hasleader`).
async fn ask(clients: Clients) -> Option<Answer> {
    let mut maintenance = clients.maintenance;
    let mut cluster = clients.cluster;
    let status = timeout(ATTEMPT_TIMEOUT, maintenance.status(pb::StatusRequest {})).await.ok()?.ok()?.into_inner();
    let list = timeout(ATTEMPT_TIMEOUT, cluster.member_list(pb::MemberListRequest { linearizable: false }))
        .await
        .ok()?
        .ok()?
        .into_inner();
    let member = status.header?.member_id;
    let voters = list.members.iter().filter(|member| !member.is_learner).map(|member| member.id).collect();
    Some(Answer { member, leader: status.leader, voters })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(member: u64, leader: u64, voters: &[u64]) -> Answer {
        Answer { member, leader, voters: voters.iter().copied().collect() }
    }

    #[test]
    fn a_majority_of_every_voter_must_say_it_has_no_leader() {
        assert!(judge(&[answer(1, 0, &[1, 2, 3]), answer(2, 0, &[1, 2, 3])]));
        // One of three: a minority partition says the same.
        assert!(!judge(&[answer(1, 0, &[1, 2, 3])]));
        // Any member that names a leader settles it.
        assert!(!judge(&[answer(1, 0, &[1, 2, 3]), answer(2, 0, &[1, 2, 3]), answer(3, 3, &[1, 2, 3])]));
        // Two endpoints of one member count once; a member's stale list does not shrink the
        // membership another reports.
        assert!(!judge(&[answer(1, 0, &[1, 2, 3]), answer(1, 0, &[1, 2, 3])]));
        assert!(!judge(&[answer(1, 0, &[1, 2]), answer(2, 0, &[1, 2, 3, 4, 5])]));
        assert!(!judge(&[]));
    }
}
