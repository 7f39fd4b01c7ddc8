#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::{Arc, Mutex};

use prometheus::Registry;
use typha_protocol::model::{
    EncodedValue, Key, KeyPath, Revision, UpdateKind, Value, WorkloadEndpoint, WorkloadEndpointKey,
};

use super::*;
use crate::dataplane::{ApplyStats, DataplaneError, Desired};

/// A dataplane that keeps every state it was asked to apply.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<Desired>>>);

impl Dataplane for Log {
    async fn apply(&mut self, desired: &Desired, _: &Dirty) -> Result<ApplyStats, DataplaneError> {
        self.0.lock().unwrap().push(desired.clone());
        Ok(ApplyStats::default())
    }
    fn resync(&mut self) {}
    async fn event(&mut self) {
        std::future::pending::<()>().await
    }
}

/// A workload endpoint of this node, named `pod`, at `ip`.
fn local_pod(pod: &str, ip: &str) -> Update {
    let key = Key::WorkloadEndpoint(WorkloadEndpointKey {
        hostname: "node-a".into(),
        orchestrator: "k8s".into(),
        workload: format!("ns/{pod}"),
        endpoint: "eth0".into(),
    });
    let value = Value::WorkloadEndpoint(WorkloadEndpoint {
        state: "active".into(),
        name: format!("cali{pod}"),
        active_instance_id: String::new(),
        mac: None,
        profile_ids: vec![],
        ipv4_nets: vec![format!("{ip}/32").parse().unwrap()],
        ipv6_nets: vec![],
        ipv4_nat: vec![],
        ipv6_nat: vec![],
        labels: Default::default(),
        ipv4_gateway: None,
        ipv6_gateway: None,
        ports: vec![],
        generate_name: String::new(),
        allow_spoofed_source_prefixes: vec![],
    });
    Update {
        key: KeyPath::from(&key),
        value: Some(EncodedValue::encode(&value)),
        revision: Revision(1),
        kind: UpdateKind::New,
    }
}

fn routed(d: &Desired, ip: &str) -> bool {
    d.routes.contains_key(&format!("{ip}/32").parse().unwrap())
}

#[tokio::test]
async fn while_the_server_is_stale_the_dataplane_stays_as_it_is() {
    let log = Log::default();
    let shared = Arc::new(Shared::new(AgentMetrics::new(&Registry::new())));
    let (mut feeder, rx) = Feeder::new();
    let task = {
        let (mut dp, shared) = (log.clone(), shared.clone());
        tokio::spawn(async move {
            let cfg = AgentConfig::new("node-a");
            run(cfg, rx, &mut dp, &shared, std::future::pending()).await;
        })
    };
    let applied = |n: usize| {
        let log = log.clone();
        async move {
            for _ in 0..500 {
                if log.0.lock().unwrap().len() >= n {
                    return log.0.lock().unwrap().last().cloned().unwrap();
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("no apply number {n}");
        }
    };
    // In sync with one pod; then the server's view goes stale and news of another pod comes.
    feeder.on_status_updated(SyncStatus::InSync);
    feeder.on_updates(vec![local_pod("a", "10.0.0.1")]);
    let first = applied(1).await;
    assert!(routed(&first, "10.0.0.1"));
    feeder.on_staleness(&Staleness::new(true, Duration::from_secs(12), "etcd down"));
    feeder.on_updates(vec![local_pod("b", "10.0.0.2")]);
    // The loop has taken the update once it says it holds it: from then on, an apply would
    // already have happened (no sleep standing in for "long enough").
    for _ in 0..1000 {
        if shared.held_updates.load(Ordering::Relaxed) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        log.0.lock().unwrap().len(),
        1,
        "nothing applied while stale"
    );
    let (age, reason) = shared.server_stale().expect("the agent says it is stale");
    assert!(age >= Duration::from_secs(12) && reason == "etcd down");
    assert_eq!(shared.held_updates.load(Ordering::Relaxed), 1);
    // Current again: what was held is programmed.
    feeder.on_staleness(&Staleness::new(false, Duration::ZERO, ""));
    let second = applied(2).await;
    assert!(routed(&second, "10.0.0.1") && routed(&second, "10.0.0.2"));
    assert!(shared.server_stale().is_none());
    drop(feeder);
    task.await.unwrap();
}
