//! OSDs that also serve on a Unix socket (`--local-socket`, ADR 0013): they publish it, clients
//! and the other OSDs on this machine use it, a socket left by a killed OSD is replaced, and a
//! socket in use or a path that is not a socket is refused.

mod common;

use std::path::{Path, PathBuf};

use common::{format_engine, object_info, pattern, stripe_with_primary, Cluster, INODE, OBJECT_SIZE};
use osd::Stop;
use wire::{ObjectId, Request, Response};

fn socket_of(data_path: &Path) -> PathBuf {
    data_path.with_extension("sock")
}

/// Connected server-side sockets bound at `path`, from `/proc/net/unix` (this process's
/// network namespace; the OSDs are threads of this process).
fn connections_accepted_on(path: &Path) -> usize {
    let table = std::fs::read_to_string("/proc/net/unix").expect("read /proc/net/unix");
    let path = path.to_str().unwrap();
    // Columns: Num RefCount Protocol Flags Type St Inode Path; St 03 is connected.
    table.lines().skip(1).filter(|line| line.split_whitespace().nth(5) == Some("03") && line.ends_with(path)).count()
}

#[test]
fn osds_reach_each_other_and_clients_over_their_local_sockets() {
    // The map writes the addresses `net` reads.
    assert_eq!(cluster::map::UNIX_ADDRESS_PREFIX, net::UNIX_PREFIX);
    let mut cluster = Cluster::start_with(|config| config.local_socket = Some(socket_of(&config.data_path)));
    let sockets: Vec<PathBuf> = (1..=3).map(|osd| socket_of(&cluster.dir.path().join(format!("o{osd}")))).collect();
    for (index, socket) in sockets.iter().enumerate() {
        let live = cluster.live(index as u32 + 1).expect("registered");
        let local = live.local.expect("the local socket is published");
        assert_eq!(Some(local.machine.as_str()), cluster::machine_id());
        assert_eq!(Path::new(&local.path), socket.as_path());
        assert!(live.address.starts_with("127.0.0.1:"), "the TCP address stays published: {}", live.address);
    }

    // A client on the socket; the primary replicates to its peers over theirs.
    let (stripe, pg) = stripe_with_primary(1);
    let primary =
        cluster.runtime.block_on(net::connect(&format!("{}{}", net::UNIX_PREFIX, sockets[0].display()))).unwrap();
    let write =
        Request::Write { pg, inode: INODE, offset_bytes: stripe * u64::from(OBJECT_SIZE), data: pattern(3, 4096) };
    assert_eq!(cluster.call_settled(&primary, 1, write).response, Response::Write);
    let object = ObjectId { inode: INODE, stripe };
    let infos: Vec<Response> = (1..=3).map(|osd| object_info(&cluster, osd, pg, object)).collect();
    assert!(matches!(infos[0], Response::ObjectInfo { .. }), "{infos:?}");
    assert!(infos.iter().all(|info| *info == infos[0]), "replicas differ: {infos:?}");
    assert!(connections_accepted_on(&sockets[0]) >= 1, "the client is not on osd.1's socket");
    for replica in [1, 2] {
        assert!(connections_accepted_on(&sockets[replica]) >= 1, "osd.1 reached osd.{} over TCP", replica + 1);
    }

    // Killed, osd.1 leaves its socket behind; started again, it replaces it.
    drop(primary);
    cluster.stop(1, Stop::Abort);
    assert!(sockets[0].exists(), "an aborted OSD removes nothing");
    cluster.osds[0] = Some(common::spawn(cluster.config_with_local_socket(1)).expect("restart over a stale socket"));
    assert!(cluster.live(1).and_then(|live| live.local).is_some());
    // A clean stop removes it.
    cluster.stop(1, Stop::Graceful);
    assert!(!sockets[0].exists(), "a clean stop leaves the socket file");

    // Another OSD may not take a socket that osd.2 serves on, nor a path that is not a socket.
    let fourth = cluster.dir.path().join("o4");
    format_engine(&fourth);
    let mut config = cluster.config(4);
    config.local_socket = Some(sockets[1].clone());
    let error = common::spawn(config).map(|_| ()).unwrap_err().to_string();
    assert!(error.contains("is in use") && error.contains("o2.sock"), "{error}");
    let mut config = cluster.config(4);
    config.local_socket = Some(fourth.clone());
    let error = common::spawn(config).map(|_| ()).unwrap_err().to_string();
    assert!(error.contains("exists and is not a socket"), "{error}");
    assert!(fourth.exists(), "the refused path is left alone");
}
