//! Bad peers and limits: ping/pong, pong and handshake timeouts, garbage and oversized frames,
//! the connection limit, a client that never reads, graceful shutdown.
//!
//! The tests about timers run on a paused clock (`start_paused`): the server and the test's
//! clients share the test's runtime, so time moves only when every one of them waits, and a
//! loaded machine that stalls the process cannot make a pong or a write late.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::time::Duration;

use common::{Peer, cluster, expected_digest, server, settle};
use typha_protocol::message::{GoodbyeReason, Message};
use typha_server::config::Config;
use typha_server::metrics::DropReason;

/// Tests that write megabytes and time the result take turns, so they do not starve each other
/// on a small machine.
static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn fast_pings() -> Config {
    let mut cfg = Config::for_tests();
    cfg.conn.ping_interval = Duration::from_millis(100);
    // At most 2x the interval is widened to 6x (600 ms), as in Typha.
    cfg.conn.pong_timeout = Duration::from_millis(150);
    cfg
}

#[tokio::test(start_paused = true)]
async fn pings_are_answered_and_a_silent_client_is_dropped() {
    let (srv, store) = server(fast_pings()).await;
    store.bulk_load(cluster(1, 2));
    let mut good = Peer::connect(srv.addr).await;
    good.hello(Peer::offer("good", None)).await.unwrap();
    let mut silent = Peer::connect(srv.addr).await;
    silent.auto_pong = false;
    silent.hello(Peer::offer("silent", None)).await.unwrap();

    // Both are read (the silent one just never answers); the good one answers every ping.
    let mut bye = None;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(2500);
    while tokio::time::Instant::now() < deadline {
        if let Ok(m) = good.recv_within(Duration::from_millis(20)).await {
            good.apply(m).await.unwrap();
        }
        if bye.is_none() {
            match silent.recv_within(Duration::from_millis(20)).await {
                Ok(Message::Goodbye(g)) => bye = Some(g.reason),
                Ok(m) => silent.apply(m).await.unwrap(),
                Err(e) if e == "timeout" => {}
                Err(e) => panic!("silent client: {e}"),
            }
        }
    }
    assert_eq!(bye, Some(GoodbyeReason::PingTimeout));
    assert_eq!(
        srv.metrics.dropped_count(DropReason::ping_timeout),
        1,
        "only the silent one"
    );
    assert!(common::metric(&srv, "typha_ping_latency_count{syncer=\"felix\"}") > 3.0);
    srv.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn no_hello_within_the_handshake_timeout() {
    let mut cfg = Config::for_tests();
    cfg.conn.handshake_timeout = Duration::from_millis(300);
    let (srv, _store) = server(cfg).await;
    let mut p = Peer::connect(srv.addr).await;
    let start = tokio::time::Instant::now();
    let bye = p.until_closed().await;
    assert_eq!(bye.map(|g| g.reason), Some(GoodbyeReason::HandshakeTimeout));
    assert!(start.elapsed() < Duration::from_secs(3));
    assert_eq!(srv.metrics.dropped_count(DropReason::handshake), 1);
    srv.shutdown().await;
}

#[tokio::test]
async fn garbage_and_oversized_frames_close_only_that_connection() {
    let (srv, store) = server(Config::for_tests()).await;
    store.bulk_load(cluster(2, 5));
    let mut good = Peer::connect(srv.addr).await;
    good.hello(Peer::offer("good", None)).await.unwrap();
    good.sync_to(&srv).await;

    // Garbage instead of a hello.
    let mut g = Peer::connect(srv.addr).await;
    g.send_raw(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(
        g.until_closed().await.map(|g| g.reason),
        Some(GoodbyeReason::ProtocolError)
    );

    // A frame announcing 2 GiB after a valid handshake.
    let mut o = Peer::connect(srv.addr).await;
    o.hello(Peer::offer("big", None)).await.unwrap();
    o.send_raw(&[0x80, 0, 0, 0, 5, 0]).await.unwrap();
    assert_eq!(
        o.until_closed().await.map(|g| g.reason),
        Some(GoodbyeReason::ProtocolError)
    );

    // A message a client must not send.
    let mut w = Peer::connect(srv.addr).await;
    w.hello(Peer::offer("wrong", None)).await.unwrap();
    w.send(&Message::SyncStatus(
        typha_protocol::model::SyncStatus::InSync,
    ))
    .await
    .unwrap();
    assert_eq!(
        w.until_closed().await.map(|g| g.reason),
        Some(GoodbyeReason::ProtocolError)
    );

    // The good client still gets every update.
    let spec = typha_test_support::sample::Spec {
        nodes: 2,
        pods_per_node: 5,
        ..Default::default()
    };
    store.put(spec.workload_endpoint(1, 1, 9));
    settle(&srv, &store).await;
    good.sync_to(&srv).await;
    assert_eq!(good.digest.combined(), expected_digest(&store).0);
    assert!(
        srv.metrics.dropped_count(DropReason::protocol_error)
            + srv.metrics.dropped_count(DropReason::handshake)
            >= 3
    );
    srv.shutdown().await;
}

#[tokio::test]
async fn over_the_connection_limit_a_client_gets_a_goodbye() {
    let mut cfg = Config::for_tests();
    cfg.max_connections = 2;
    let (srv, store) = server(cfg).await;
    store.bulk_load(cluster(1, 1));
    let mut a = Peer::connect(srv.addr).await;
    a.hello(Peer::offer("a", None)).await.unwrap();
    let mut b = Peer::connect(srv.addr).await;
    b.hello(Peer::offer("b", None)).await.unwrap();
    common::eventually("two registered", || srv.connections() == 2).await;
    let mut c = Peer::connect(srv.addr).await;
    let err = c.hello(Peer::offer("c", None)).await.unwrap_err();
    assert!(err.contains("connection limit"), "{err}");
    assert_eq!(
        srv.metrics.dropped_count(DropReason::too_many_connections),
        1
    );
    // Room again once one leaves.
    drop(a);
    common::eventually("one left", || srv.connections() == 1).await;
    let mut d = Peer::connect(srv.addr).await;
    d.hello(Peer::offer("d", None)).await.unwrap();
    d.sync_to(&srv).await;
    srv.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_client_that_never_reads_does_not_hold_back_the_others() {
    let (srv, store) = server(Config::for_tests()).await;
    store.bulk_load(cluster(2, 5));
    let mut stuck = Peer::connect(srv.addr).await;
    stuck.hello(Peer::offer("stuck", None)).await.unwrap();
    let mut ok = Peer::connect(srv.addr).await;
    ok.hello(Peer::offer("ok", None)).await.unwrap();
    ok.sync_to(&srv).await;
    // Enough data to fill the stuck client's socket buffers many times over: large policies.
    for i in 0..400 {
        let big: Vec<serde_json::Value> = (0..60)
            .map(|r| serde_json::json!({"action": "Allow", "protocol": "TCP", "source": {"nets": [format!("10.{}.{}.0/24", i % 200, r)]}, "destination": {"ports": [1000 + r]}}))
            .collect();
        store.put(
            typha_server::calico::v3::Resource::from_json(serde_json::json!({
                "apiVersion": "projectcalico.org/v3", "kind": "GlobalNetworkPolicy",
                "metadata": {"name": format!("big-{}", i % 50)},
                "spec": {"selector": "all()", "ingress": big, "order": i}
            }))
            .unwrap(),
        );
    }
    settle(&srv, &store).await;
    let started = tokio::time::Instant::now();
    ok.sync_to(&srv).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        ok.digest.combined(),
        expected_digest(&store).0,
        "every update reached the reading client"
    );
    srv.shutdown().await;
    drop(stuck);
}

#[tokio::test(start_paused = true)]
async fn a_write_stalled_past_the_write_timeout_drops_only_that_client() {
    let _turn = HEAVY.lock().await;
    let mut cfg = Config::for_tests();
    cfg.conn.write_timeout = Duration::from_millis(500);
    let (srv, store) = server(cfg).await;
    store.bulk_load(cluster(1, 1));
    // A client with a tiny receive window that never reads after its hello.
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let tcp = sock.connect(srv.addr).await.unwrap();
    let mut stuck = Peer::over(Box::new(tcp));
    stuck.hello(Peer::offer("stuck", None)).await.unwrap();
    let mut ok = Peer::connect(srv.addr).await;
    ok.hello(Peer::offer("ok", None)).await.unwrap();
    // Incompressible values, megabytes of them, until the stuck client's writes stall.
    let mut rng = typha_protocol::sample::Rng::new(3);
    for i in 0..3000 {
        store.put(noisy_set(&mut rng, &format!("noise-{}", i % 100)));
        if srv.metrics.dropped_count(DropReason::write_timeout) > 0 {
            break;
        }
        if i % 100 == 0 {
            // Keep the reading client reading.
            settle(&srv, &store).await;
            ok.sync_to(&srv).await;
        }
    }
    common::eventually("the stalled client dropped", || {
        srv.metrics.dropped_count(DropReason::write_timeout) == 1
    })
    .await;
    settle(&srv, &store).await;
    ok.sync_to(&srv).await;
    assert_eq!(ok.digest.combined(), expected_digest(&store).0);
    srv.shutdown().await;
}

/// A network set of 300 random /32s (~4.5 KB, barely compressible).
fn noisy_set(
    rng: &mut typha_protocol::sample::Rng,
    name: &str,
) -> typha_server::calico::v3::Resource {
    let nets: Vec<String> = (0..300)
        .map(|_| {
            let a = rng.next_u64();
            format!(
                "{}.{}.{}.{}/32",
                a & 0xff,
                (a >> 8) & 0xff,
                (a >> 16) & 0xff,
                (a >> 24) & 0xff
            )
        })
        .collect();
    typha_server::calico::v3::Resource::from_json(serde_json::json!({
        "apiVersion": "projectcalico.org/v3", "kind": "GlobalNetworkSet",
        "metadata": {"name": name}, "spec": {"nets": nets}
    }))
    .unwrap()
}

/// `n` new noisy sets (distinct keys, so catch-up spans cannot coalesce them).
fn noise(store: &typha_server::datastore::embedded::Embedded, n: usize) {
    let mut rng = typha_protocol::sample::Rng::new(5);
    for i in 0..n {
        store.put(noisy_set(&mut rng, &format!("noise-{i}")));
    }
}

#[tokio::test(start_paused = true)]
async fn a_slow_but_steady_reader_is_not_dropped_for_pongs_our_own_writes_held_up() {
    let _turn = HEAVY.lock().await;
    // Pongs due within 1.5 s (generous, so a loaded machine does not starve the test client
    // past it); the catch-up below takes longer at this client's pace, and every ping waits
    // behind megabytes in the socket. Its acks show it is alive.
    let mut cfg = Config::for_tests();
    cfg.conn.ping_interval = Duration::from_millis(250);
    cfg.conn.pong_timeout = Duration::from_millis(1500);
    // Small breadcrumbs: frames of ~20 KB, each acknowledged.
    cfg.cache.max_batch = 5;
    let (srv, store) = server(cfg).await;
    store.bulk_load(cluster(1, 1));
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let tcp = sock.connect(srv.addr).await.unwrap();
    let mut slow = Peer::over(Box::new(tcp));
    slow.hello(Peer::offer("slow", None)).await.unwrap();
    slow.sync_to(&srv).await;
    // Written from another thread, so this runtime's server and client run meanwhile.
    let writer = {
        let store = store.clone();
        tokio::task::spawn_blocking(move || noise(&store, 2500))
    };
    // Read a frame every few milliseconds (answering pings as they come) until in step.
    let started = tokio::time::Instant::now();
    let mut acks = 0;
    while !writer.is_finished()
        || srv.cache.latest().revision < store.revision()
        || slow.seq != srv.cache.latest().seq
    {
        let m = slow.recv().await.unwrap_or_else(|e| {
            panic!(
                "{e} after {:?}, {acks} acks, seq {:?}; drops: {}",
                started.elapsed(),
                slow.seq,
                [
                    DropReason::ping_timeout,
                    DropReason::write_timeout,
                    DropReason::fell_behind
                ]
                .map(|r| srv.metrics.dropped_count(r))
                .map(|n| n.to_string())
                .join("/")
            )
        });
        assert!(
            !matches!(m, Message::Goodbye(_)),
            "dropped after {:?}, {acks} acks: {m:?}",
            started.elapsed()
        );
        let deltas = matches!(m, Message::Deltas(_));
        slow.apply(m).await.unwrap();
        if deltas {
            // As typha-client does (every ack interval; here every frame).
            let seq = slow.seq;
            slow.send(&Message::Ack(typha_protocol::message::Ack { seq }))
                .await
                .unwrap();
            acks += 1;
        }
        // The reader's pace, on the test's paused clock: each frame costs it 10 ms, however
        // fast or loaded the machine is.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        started.elapsed() > Duration::from_millis(1500),
        "the catch-up must outlast the pong timeout to test anything: {:?}",
        started.elapsed()
    );
    assert_eq!(srv.metrics.dropped_count(DropReason::ping_timeout), 0);
    assert_eq!(slow.digest.combined(), expected_digest(&store).0);
    srv.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn initial_syncs_take_turns_and_waiting_clients_are_pinged() {
    let _turn = HEAVY.lock().await;
    let mut cfg = fast_pings();
    cfg.conn.max_concurrent_syncs = 1;
    cfg.conn.write_timeout = Duration::from_millis(1500);
    let (srv, store) = server(cfg).await;
    noise(&store, 3000);
    settle(&srv, &store).await;
    // A client that takes the only turn and never reads its (megabytes of) snapshot.
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let mut stuck = Peer::over(Box::new(sock.connect(srv.addr).await.unwrap()));
    stuck.hello(Peer::offer("stuck", None)).await.unwrap();
    common::eventually("the stuck client to hold the turn", || {
        srv.metrics.snapshots_generated.felix().get() == 1
    })
    .await;
    let mut waiting = Vec::new();
    for i in 0..2 {
        let mut p = Peer::connect(srv.addr).await;
        p.hello(Peer::offer(&format!("waiting-{i}"), None))
            .await
            .unwrap();
        waiting.push(p);
    }
    common::eventually("two clients waiting their turn", || {
        common::metric(&srv, "typha_syncs_waiting") == 2.0
    })
    .await;
    // While they wait they are pinged (so their read timeouts do not fire), nothing else
    // (beyond the Staleness that follows every hello).
    for p in &mut waiting {
        let mut m = p.recv_within(Duration::from_secs(3)).await.unwrap();
        if let Message::Staleness(_) = m {
            p.apply(m).await.unwrap();
            m = p.recv_within(Duration::from_secs(3)).await.unwrap();
        }
        assert!(matches!(m, Message::Ping(_)), "{m:?}");
        p.apply(m).await.unwrap();
    }
    // The stuck one's write times out; the turn passes on and both get the whole state.
    let want = expected_digest(&store).0;
    for p in &mut waiting {
        p.sync_to(&srv).await;
        assert_eq!(p.digest.combined(), want);
    }
    assert_eq!(srv.metrics.dropped_count(DropReason::write_timeout), 1);
    assert_eq!(common::metric(&srv, "typha_syncs_waiting"), 0.0);
    srv.shutdown().await;
}

#[tokio::test]
async fn shutdown_says_goodbye_to_every_client() {
    let (srv, store) = server(Config::for_tests()).await;
    store.bulk_load(cluster(1, 1));
    let mut peers = Vec::new();
    for i in 0..3 {
        let mut p = Peer::connect(srv.addr).await;
        p.hello(Peer::offer(&format!("n{i}"), None)).await.unwrap();
        p.sync_to(&srv).await;
        peers.push(p);
    }
    let addr = srv.addr;
    let shutdown = tokio::spawn(srv.shutdown());
    for p in &mut peers {
        assert_eq!(
            p.until_closed().await.map(|g| g.reason),
            Some(GoodbyeReason::Shutdown)
        );
    }
    shutdown.await.unwrap();
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "no longer accepting"
    );
}

/// Connections stuck where the drain cannot finish them (each in a write to a client that
/// stopped reading, with an hour left on its write timeout) cost the shutdown one bound in
/// all, not a wait each: it ends within the drain and `SHUTDOWN_LEFTOVER_WAIT`, and closes
/// them. (Before, each was awaited for 2 s in turn: ten cost 20 s.)
#[tokio::test(start_paused = true)]
async fn shutdown_with_stuck_connections_ends_within_its_bound() {
    let _turn = HEAVY.lock().await;
    let mut cfg = Config::for_tests();
    cfg.conn.write_timeout = Duration::from_secs(3600);
    cfg.conn.ping_interval = Duration::from_secs(3600);
    cfg.conn.pong_timeout = Duration::from_secs(3600);
    let drain = cfg.shutdown_timeout;
    let (srv, store) = server(cfg).await;
    store.bulk_load(cluster(1, 1));
    // Clients with a tiny receive window that never read after their hello.
    let mut stuck = Vec::new();
    for i in 0..10 {
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.set_recv_buffer_size(4096).unwrap();
        let tcp = sock.connect(srv.addr).await.unwrap();
        let mut p = Peer::over(Box::new(tcp));
        p.hello(Peer::offer(&format!("stuck-{i}"), None))
            .await
            .unwrap();
        stuck.push(p);
    }
    let mut ok = Peer::connect(srv.addr).await;
    ok.hello(Peer::offer("ok", None)).await.unwrap();
    // About 9 MB of incompressible values: more than the stuck clients' windows and the
    // server's send buffers hold (Linux lets a send buffer grow to 4 MB), so each of their
    // connections is left in a write.
    let mut rng = typha_protocol::sample::Rng::new(7);
    for i in 0..2000 {
        store.put(noisy_set(&mut rng, &format!("noise-{i}")));
    }
    settle(&srv, &store).await;
    ok.sync_to(&srv).await;
    drop(ok);
    let began = tokio::time::Instant::now();
    srv.shutdown().await;
    let took = began.elapsed();
    assert!(
        took <= drain + typha_server::server::SHUTDOWN_LEFTOVER_WAIT + Duration::from_millis(100),
        "shutdown took {took:?} with 10 stuck connections"
    );
    // Closed: what was sent, then the end.
    for mut p in stuck {
        let end = loop {
            if let Err(e) = p.recv_within(Duration::from_secs(60)).await {
                break e;
            }
        };
        assert_ne!(end, "timeout", "a stuck connection was left open");
    }
}
