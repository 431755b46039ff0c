//! The wire protocol's connections over the simulated network, on a paused clock: latency,
//! cuts that hold bytes until healed, kills, and the same timings from the same seed.

use std::time::Duration;

use tokio::time::Instant;
use wire::{Frame, Request, Response};

use crate::sim::{SimNet, SimNetOptions};
use crate::{connect, serve_connection, NetError};

fn network(seed: u64) -> SimNet {
    let network = SimNet::new(SimNetOptions {
        seed,
        latency_min: Duration::from_millis(1),
        latency_max: Duration::from_millis(5),
    });
    network.install();
    network
}

/// Serves pings at `sim:osd`, as node `osd`.
fn serve(network: &SimNet) {
    let listener = network.listen("osd", "sim:osd").expect("the address is free");
    tokio::spawn(async move {
        while let Ok(stream) = listener.accept().await {
            tokio::spawn(serve_connection(stream, |frame: Frame| async move {
                Frame::response(frame.request_id, frame.epoch, Response::Ping)
            }));
        }
    });
}

#[tokio::test(start_paused = true)]
async fn a_call_takes_a_round_trip_of_simulated_latency() {
    let network = network(1);
    serve(&network);
    SimNet::on_node("client", async {
        let connection = connect("sim:osd").await.expect("connect");
        for _ in 0..10 {
            let started = Instant::now();
            let reply = connection.call(3, Request::Ping).await.expect("a reply");
            assert_eq!((reply.epoch, reply.response), (3, Response::Ping));
            let took = started.elapsed();
            // tokio's timers fire on whole milliseconds: each way takes its latency, rounded up.
            assert!(took >= Duration::from_millis(2) && took <= Duration::from_millis(12), "{took:?}");
        }
    })
    .await;
    SimNet::uninstall();
}

#[tokio::test(start_paused = true)]
async fn a_cut_holds_the_bytes_until_it_heals() {
    let network = network(2);
    serve(&network);
    let connection = SimNet::on_node("client", connect("sim:osd")).await.expect("connect");
    // Replies cannot come back: the call waits as long as the cut lasts, then completes.
    network.cut("osd", "client");
    let call = tokio::spawn({
        let connection = connection.clone();
        async move { connection.call(0, Request::Ping).await }
    });
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(!call.is_finished(), "a reply crossed a cut");
    network.heal("osd", "client");
    let reply = call.await.expect("the call's task").expect("the reply after the heal");
    assert_eq!(reply.response, Response::Ping);
    // A connect across a partition waits for the heal too.
    network.partition("client", "osd");
    let connecting = tokio::spawn(SimNet::on_node("client", async { connect("sim:osd").await.map(|_| ()) }));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!connecting.is_finished(), "a connect crossed a partition");
    network.heal_all();
    connecting.await.expect("the connect's task").expect("connected after the heal");
    SimNet::uninstall();
}

#[tokio::test(start_paused = true)]
async fn a_killed_node_resets_its_connections_and_refuses_new_ones() {
    let network = network(3);
    serve(&network);
    let connection = SimNet::on_node("client", connect("sim:osd")).await.expect("connect");
    network.cut("client", "osd");
    let call = tokio::spawn({
        let connection = connection.clone();
        async move { connection.call(0, Request::Ping).await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    network.kill("osd");
    let error = call.await.expect("the call's task").expect_err("the node is gone");
    assert!(matches!(error, NetError::Closed { .. }), "{error}");
    network.heal_all();
    let error = SimNet::on_node("client", connect("sim:osd")).await.expect_err("nothing listens");
    assert!(error.is_refusal(), "{error}");
    // Outside any node there is no source to connect from.
    let error = connect("sim:osd").await.expect_err("no node");
    assert!(error.to_string().contains("outside any simulated node"), "{error}");
    SimNet::uninstall();
}

/// Pipelined calls' completion times, from a fresh network with `seed`.
async fn timings(seed: u64) -> Vec<Duration> {
    let network = network(seed);
    serve(&network);
    let started = Instant::now();
    let connection = SimNet::on_node("client", connect("sim:osd")).await.expect("connect");
    let calls = (0..20).map(|_| {
        let connection = connection.clone();
        async move {
            connection.call(0, Request::Ping).await.expect("a reply");
            started.elapsed()
        }
    });
    let times = futures_util::future::join_all(calls).await;
    drop(connection);
    drop(network);
    SimNet::uninstall();
    times
}

#[tokio::test(start_paused = true)]
async fn the_same_seed_gives_the_same_timings() {
    let first = timings(7).await;
    assert_eq!(first, timings(7).await);
    assert_ne!(first, timings(8).await);
}

#[tokio::test(start_paused = true)]
async fn a_stream_reads_and_writes_through_tokio_io_with_cuts_and_resets() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let network = network(4);
    let listener = network.listen("server", "sim:server").expect("the address is free");
    // An echo server: what it reads it writes back, until the end.
    tokio::spawn(async move {
        let mut stream = listener.accept().await.expect("a connection");
        let mut buffer = vec![0u8; 64 << 10];
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(read) => stream.write_all(&buffer[..read]).await.expect("echoed"),
            }
        }
        AsyncWriteExt::shutdown(&mut stream).await.expect("shut down");
    });
    let mut stream = SimNet::on_node("client", crate::sim::connect("sim:server")).await.expect("connect");
    // More than the pipe holds, so both ends wait for room as well as for bytes.
    let sent: Vec<u8> = (0..(9u32 << 20)).map(|index| (index % 251) as u8).collect();
    let mut received = vec![0u8; sent.len()];
    let (mut reader, mut writer) = tokio::io::split(&mut stream);
    let write = async {
        writer.write_all(&sent).await.expect("written");
        writer.shutdown().await.expect("shut down");
    };
    let read = async { reader.read_exact(&mut received).await.expect("read back") };
    tokio::join!(write, read);
    assert!(received == sent, "the echo differs from what was sent");
    let mut end = [0u8; 1];
    assert_eq!(stream.read(&mut end).await.expect("the end"), 0);

    // A cut holds the bytes; a kill resets the stream.
    let listener = network.listen("server", "sim:other").expect("the address is free");
    let mut stream = SimNet::on_node("client", crate::sim::connect("sim:other")).await.expect("connect");
    let mut accepted = listener.accept().await.expect("a connection");
    network.cut("client", "server");
    stream.write_all(b"held").await.expect("written");
    let mut held = [0u8; 4];
    assert!(
        tokio::time::timeout(Duration::from_secs(10), accepted.read_exact(&mut held)).await.is_err(),
        "read across a cut"
    );
    network.heal_all();
    accepted.read_exact(&mut held).await.expect("read after the heal");
    assert_eq!(&held, b"held");
    network.kill("server");
    let error = stream.read(&mut held).await.expect_err("the peer was killed");
    assert_eq!(error.kind(), std::io::ErrorKind::ConnectionReset, "{error}");
    SimNet::uninstall();
}

#[tokio::test(start_paused = true)]
async fn a_paused_node_runs_none_of_its_tasks_until_resumed() {
    let ticks = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counter = ticks.clone();
    let task = tokio::spawn(SimNet::on_node("mon", async move {
        // A task the node spawns onto the runtime, as the mon's tasks are, pauses with it.
        tokio::spawn(SimNet::inherit(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(10)).await;
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }))
        .await
    }));
    tokio::time::sleep(Duration::from_millis(105)).await;
    let before = ticks.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(before, 10);
    SimNet::pause_node("mon");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(ticks.load(std::sync::atomic::Ordering::Relaxed), before, "no tick while paused");
    SimNet::resume_node("mon");
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(ticks.load(std::sync::atomic::Ordering::Relaxed), before + 1, "the missed timer fires at once");
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(ticks.load(std::sync::atomic::Ordering::Relaxed) > before + 1);
    task.abort();
    SimNet::uninstall();
}
