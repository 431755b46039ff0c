//! The direction of dependencies between the workspace's crates (`docs/ARCHITECTURE.md`,
//! "Dependency rules"), checked on the resolved graph `cargo metadata` prints.
//!
//! The deterministic crates (the engine, placement, the wire codec, the cluster records and the
//! shared nouns and helpers) must never reach a runtime, io_uring, a gRPC stack or an HTTP
//! server, not even through another crate: that is what lets the engine run on a simulated disk
//! and the data-path math be tested without sockets. And `basalt`, the binary, sits on top:
//! nothing depends on it.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

/// Crates that must stay free of any runtime or edge dependency.
const DETERMINISTIC: &[&str] = &["stdx", "types", "engine", "placement", "wire", "cluster", "platform"];

/// Crates the deterministic ones must not reach, by normal or build dependencies.
const EDGE: &[&str] = &["tokio", "io-uring", "tonic", "prost", "axum", "hyper", "mio"];

struct Graph {
    /// Package id to name, for the workspace members and everything they pull in.
    names: BTreeMap<String, String>,
    /// Package id to the ids it depends on, with the kinds of dependency ("normal", "build", "dev").
    edges: BTreeMap<String, Vec<(String, BTreeSet<String>)>>,
    members: Vec<String>,
}

fn graph() -> Graph {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let host = host_triple();
    let output = Command::new(cargo)
        .current_dir(root)
        .args(["metadata", "--format-version", "1", "--locked", "--filter-platform", &host])
        .output()
        .expect("run cargo metadata");
    assert!(output.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&output.stderr));
    let metadata: Value = serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON");

    let names = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|package| (package["id"].as_str().unwrap().to_string(), package["name"].as_str().unwrap().to_string()))
        .collect();
    let mut edges = BTreeMap::new();
    for node in metadata["resolve"]["nodes"].as_array().expect("resolve nodes") {
        let deps = node["deps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|dep| {
                let kinds = dep["dep_kinds"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|kind| kind["kind"].as_str().unwrap_or("normal").to_string())
                    .collect();
                (dep["pkg"].as_str().unwrap().to_string(), kinds)
            })
            .collect();
        edges.insert(node["id"].as_str().unwrap().to_string(), deps);
    }
    let members =
        metadata["workspace_members"].as_array().unwrap().iter().map(|m| m.as_str().unwrap().into()).collect();
    Graph { names, edges, members }
}

fn host_triple() -> String {
    let output = Command::new("rustc").arg("-vV").output().expect("run rustc -vV");
    let text = String::from_utf8(output.stdout).expect("rustc prints UTF-8");
    text.lines().find_map(|line| line.strip_prefix("host: ")).expect("rustc -vV names the host").to_string()
}

impl Graph {
    fn id(&self, name: &str) -> &str {
        let ids: Vec<&String> = self.members.iter().filter(|id| self.names[*id] == name).collect();
        assert_eq!(ids.len(), 1, "workspace member {name} not found exactly once");
        ids[0]
    }

    /// Every package `from` reaches through normal and build dependencies, with the path that
    /// first reached it.
    fn reachable(&self, from: &str) -> BTreeMap<String, Vec<String>> {
        let mut seen = BTreeMap::new();
        let mut queue = vec![(from.to_string(), vec![self.names[from].clone()])];
        while let Some((id, path)) = queue.pop() {
            for (dep, kinds) in &self.edges[&id] {
                if !kinds.iter().any(|kind| kind == "normal" || kind == "build") || seen.contains_key(dep) {
                    continue;
                }
                let mut dep_path = path.clone();
                dep_path.push(self.names[dep].clone());
                seen.insert(dep.clone(), dep_path.clone());
                queue.push((dep.clone(), dep_path));
            }
        }
        seen
    }
}

#[test]
fn deterministic_crates_reach_no_runtime_or_edge_crate() {
    let graph = graph();
    let mut violations = Vec::new();
    for name in DETERMINISTIC {
        for (dep, path) in graph.reachable(graph.id(name)) {
            if EDGE.contains(&graph.names[&dep].as_str()) {
                violations.push(path.join(" -> "));
            }
        }
    }
    assert!(violations.is_empty(), "deterministic crates reach edge crates:\n{}", violations.join("\n"));
}

#[test]
fn nothing_depends_on_the_binary() {
    let graph = graph();
    let basalt = graph.id("basalt");
    let dependents: Vec<&String> = graph
        .members
        .iter()
        .filter(|member| graph.edges[*member].iter().any(|(dep, _)| dep == basalt))
        .map(|member| &graph.names[member])
        .collect();
    assert!(dependents.is_empty(), "crates depend on basalt: {dependents:?}");
}

/// The OSD knows disks only through the `platform` traits: opening a real drive (io_uring)
/// belongs to the binary, so the OSD runs the same on a simulated one.
#[test]
fn the_osd_reaches_no_io_uring() {
    let graph = graph();
    let paths: Vec<String> = graph
        .reachable(graph.id("osd"))
        .into_iter()
        .filter(|(dep, _)| ["io-uring", "platform-linux"].contains(&graph.names[dep].as_str()))
        .map(|(_, path)| path.join(" -> "))
        .collect();
    assert!(paths.is_empty(), "the osd crate reaches io_uring:\n{}", paths.join("\n"));
}

#[test]
fn the_checker_sees_edges() {
    // The rules above would pass vacuously on an empty or misread graph: the daemons must be
    // seen to reach tokio, and the engine its platform crate.
    let graph = graph();
    let names_reached = |from: &str| -> BTreeSet<String> {
        graph.reachable(graph.id(from)).keys().map(|id| graph.names[id].clone()).collect()
    };
    assert!(names_reached("osd").contains("tokio"));
    assert!(names_reached("basalt").contains("io-uring"));
    assert!(names_reached("engine").contains("platform"));
    assert!(!names_reached("engine").contains("tokio"));
}

/// The features `package` is built with when it is built alone (`cargo build -p package`),
/// as `cargo tree` resolves them: `crate feature "name"` lines.
fn features_of(package: &str) -> BTreeSet<String> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .current_dir(root)
        .args(["tree", "--locked", "-p", package, "-e", "features", "--prefix", "none", "--target", &host_triple()])
        .output()
        .expect("run cargo tree");
    assert!(output.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).expect("cargo tree prints UTF-8").lines().map(str::to_string).collect()
}

/// Test machinery (planted bugs, the simulated network, coverage counts) is behind features only the
/// simulator enables: the binary built alone, as a release is, has none of it.
#[test]
fn the_binary_leaves_the_test_machinery_out() {
    let machinery = [r#"net feature "sim""#, r#"osd feature "planted""#, r#"stdx feature "coverage-marks""#];
    let binary = features_of("basalt");
    for feature in machinery {
        assert!(!binary.contains(feature), "basalt is built with {feature}");
    }
    // The checker sees the features where they are on.
    let simulator = features_of("sim-cluster");
    for feature in machinery {
        assert!(simulator.contains(feature), "sim-cluster is built without {feature}");
    }
}
