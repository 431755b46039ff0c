//! Partial partitions (ADR 0015, "peer reports"): links between OSDs cut with iptables inside the
//! test's network namespace while every OSD keeps its lease (the mon, the store and the gateway
//! stay reachable), and fio writing through NBD with every block verified soon after it is
//! written. The peer watch reports the cut, the mon marks one end down, and no write waits more
//! than 5 s; once the links heal the mark clears and every PG is clean on its full set.

mod common;

use std::time::{Duration, Instant};

use common::cluster::*;
use common::Store;
use serde_json::Value;
use testkit::wait_until;

/// The uid each OSD runs as in these tests, so a rule can name the packets one OSD sends.
fn uid(index: usize) -> u32 {
    64_000 + index as u32
}

/// The address OSD `index` listens on (`Cluster::start_osd_as`).
fn osd_ip(index: usize) -> String {
    format!("127.0.0.{}", index + 2)
}

/// Rules dropping what OSD `from` sends to each OSD of `to`, and what those send to it.
fn cut_rules(from: usize, to: &[usize]) -> Vec<Vec<String>> {
    let mut rules = Vec::new();
    for &other in to {
        for (sender, receiver) in [(from, other), (other, from)] {
            let rule = ["-I", "OUTPUT", "-m", "owner", "--uid-owner", &uid(sender).to_string()];
            let mut rule: Vec<String> = rule.iter().map(|part| part.to_string()).collect();
            rule.extend(["-d", &osd_ip(receiver), "-j", "DROP"].map(str::to_string));
            rules.push(rule);
        }
    }
    rules
}

fn apply(rules: &[Vec<String>], insert: bool) {
    for rule in rules {
        let mut rule = rule.clone();
        rule[0] = if insert { "-I" } else { "-D" }.to_string();
        let args: Vec<&str> = rule.iter().map(String::as_str).collect();
        testkit::run_ok("iptables", &args);
    }
}

/// A cluster whose every OSD runs as its own user.
fn cluster(name: &str, osd_count: usize) -> Cluster {
    Cluster::start_as(Store::Embedded, name, osd_count, 3, 2, "64M", Some(uid))
}

fn osd_listing() -> Vec<Value> {
    let listing: Value = serde_json::from_str(&cli(&["osd", "ls", "--json", "--api", API])).expect("json");
    listing["osds"].as_array().expect("osds").clone()
}

/// The OSDs the mon has marked down on their peers' reports.
fn marked_down() -> Vec<u64> {
    osd_listing().iter().filter(|osd| osd["marked_down"] == true).filter_map(|osd| osd["id"].as_u64()).collect()
}

#[test]
fn a_link_cut_between_two_osds_stalls_no_write_past_5_s_and_heals_clean() {
    isolated(|| {
        let cluster = cluster("partition-link", 3);
        let ids = [cluster.osd_id(0), cluster.osd_id(1)];
        let dir = cluster.scratch.path().to_path_buf();
        let writer = start_timed_fio(&dir, 21, 40);
        std::thread::sleep(Duration::from_secs(3));
        let rules = cut_rules(0, &[1]);
        apply(&rules, true);
        let cut_at = Instant::now();
        let marked = wait_until(Duration::from_secs(10), "one end of the cut marked down", || {
            let marked = marked_down();
            (!marked.is_empty()).then_some(marked)
        });
        eprintln!("partition: {marked:?} marked down {:?} after the cut", cut_at.elapsed());
        assert_eq!(marked.len(), 1, "{marked:?}");
        assert!(ids.contains(&marked[0]), "osd {} marked, not an end of the cut {ids:?}", marked[0]);
        std::thread::sleep(Duration::from_secs(20).saturating_sub(cut_at.elapsed()));
        assert_eq!(marked_down(), marked, "the marks changed during the cut");
        apply(&rules, false);
        let longest = finish_timed_fio(writer, "across a 20 s cut between two OSDs").longest_write;
        assert!(longest < Duration::from_secs(5), "a write waited {longest:?} across the cut");
        wait_until(Duration::from_secs(60), "the mark cleared", || marked_down().is_empty().then_some(()));
        assert_eq!(up_osds().len(), 3);
        wait_clean();
        replicas_equal();
        run_fio(&dir, "64M", 22, &[]);
        let log = cluster.mon.proc.log_tail(usize::MAX);
        assert!(log.contains("marked down: its peers cannot reach it"), "{log}");
        assert!(log.contains("mark down cleared"), "{log}");
    });
}

#[test]
fn an_osd_that_loses_its_links_to_every_peer_is_the_only_one_marked_down() {
    isolated(|| {
        let cluster = cluster("partition-own", 4);
        let lonely = cluster.osd_id(0);
        let dir = cluster.scratch.path().to_path_buf();
        let writer = start_timed_fio(&dir, 23, 25);
        std::thread::sleep(Duration::from_secs(3));
        let rules = cut_rules(0, &[1, 2, 3]);
        apply(&rules, true);
        let cut_at = Instant::now();
        wait_until(Duration::from_secs(10), "the lonely osd marked down", || {
            marked_down().contains(&lonely).then_some(())
        });
        eprintln!("partition: osd.{lonely} marked down {:?} after it lost its peers", cut_at.elapsed());
        // Its peers each accuse it, and it accuses each of them: only it is marked, and stays so.
        for _ in 0..20 {
            assert_eq!(marked_down(), [lonely]);
            std::thread::sleep(Duration::from_millis(500));
        }
        apply(&rules, false);
        let longest = finish_timed_fio(writer, "while one OSD lost its peers").longest_write;
        assert!(longest < Duration::from_secs(5), "a write waited {longest:?}");
        wait_until(Duration::from_secs(60), "the mark cleared", || marked_down().is_empty().then_some(()));
        wait_clean();
        replicas_equal();
    });
}
