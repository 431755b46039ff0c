//! Whether the etcd cluster has no leader anywhere (ADR 0028).
//!
//! Only a leader revokes leases, a member that stops leading stops expiring them, and a member
//! that becomes leader gives every lease its whole TTL again from then (etcd's lessor demotion
//! and promotion). So when every voting member says, after some instant, that it knows of no
//! leader, every leader before that instant has stepped down, and one elected later cannot
//! revoke a lease within a TTL of that instant. A majority would not do: a leader with its
//! quorum may be cut off from the members that answer for a while without stepping down, then
//! revoke a lease it saw expire. A member in a minority partition says what a member of a
//! cluster with no quorum says, which is why members that do not answer prove nothing.

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

/// Asks every member; `true` only if every voting member any of them names answered, and none
/// knows of a leader.
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
    let answered: BTreeSet<u64> = answers.iter().map(|answer| answer.member).collect();
    voters.is_subset(&answered)
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
    fn every_voter_must_say_it_has_no_leader() {
        assert!(judge(&[answer(1, 0, &[1, 2, 3]), answer(2, 0, &[1, 2, 3]), answer(3, 0, &[1, 2, 3])]));
        // A majority is not enough: the third may lead with a quorum the others lost a while.
        assert!(!judge(&[answer(1, 0, &[1, 2, 3]), answer(2, 0, &[1, 2, 3])]));
        // Any member that names a leader settles it.
        assert!(!judge(&[answer(1, 0, &[1, 2, 3]), answer(2, 0, &[1, 2, 3]), answer(3, 3, &[1, 2, 3])]));
        // Two endpoints of one member count once; a member's stale list does not shrink the
        // membership another reports; learners need not answer.
        assert!(!judge(&[answer(1, 0, &[1, 2]), answer(1, 0, &[1, 2])]));
        assert!(!judge(&[answer(1, 0, &[1, 2]), answer(2, 0, &[1, 2, 3])]));
        assert!(judge(&[answer(1, 0, &[1, 2]), answer(2, 0, &[1, 2])]));
        assert!(!judge(&[]));
    }
}
