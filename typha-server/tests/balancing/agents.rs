//! The agents: typha-client instances in this process, each with a full store and a consumer
//! that keeps its own copy of the state and digest from the callbacks alone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use typha_client::metrics::ClientMetrics;
use typha_client::{ClientConfig, Discovery, Store, SyncClient, SyncerCallbacks};
use typha_protocol::digest::StateDigest;
use typha_protocol::model::{EncodedValue, KeyPath, SyncStatus, Update, UpdateKind};

use super::replicas::Tls;
use super::{REPLICAS, SYNC_PORT};

/// What an agent's consumer holds, from the callbacks alone.
#[derive(Default)]
pub(crate) struct View {
    pub(crate) status: Option<SyncStatus>,
    pub(crate) kvs: HashMap<KeyPath, EncodedValue>,
    pub(crate) digest: StateDigest,
    /// Updates whose kind contradicted what the consumer had been told before.
    pub(crate) wrong_kinds: u64,
    /// Updates delivered.
    pub(crate) updates: u64,
}

#[derive(Clone)]
pub(crate) struct Agent(pub(crate) Arc<Mutex<View>>);

impl SyncerCallbacks for Agent {
    fn on_status_updated(&mut self, status: SyncStatus) {
        self.0.lock().unwrap().status = Some(status);
    }

    fn on_updates(&mut self, updates: Vec<Update>) {
        let mut v = self.0.lock().unwrap();
        v.updates += updates.len() as u64;
        for u in updates {
            let old = match &u.value {
                Some(new) => v.kvs.insert(u.key.clone(), new.clone()),
                None => v.kvs.remove(&u.key),
            };
            let consistent = match u.kind {
                UpdateKind::New => old.is_none() && u.value.is_some(),
                UpdateKind::Updated => old.is_some() && u.value.is_some(),
                UpdateKind::Deleted => old.is_some() && u.value.is_none(),
            };
            if !consistent {
                v.wrong_kinds += 1;
            }
            v.digest.apply(
                u.key.as_str(),
                old.as_ref().map(EncodedValue::as_bytes),
                u.value.as_ref().map(EncodedValue::as_bytes),
            );
        }
    }
}

pub(crate) struct Agents {
    pub(crate) views: Vec<Arc<Mutex<View>>>,
    pub(crate) metrics: Arc<ClientMetrics>,
    pub(crate) stop: tokio::sync::watch::Sender<bool>,
    pub(crate) tasks: Vec<tokio::task::JoinHandle<(Agent, Store)>>,
}

impl Agents {
    /// `n` agents finding the servers by the three addresses (as FELIX_TYPHAADDR would list
    /// them, or a Service's DNS name resolve to), one set of metrics shared by all.
    pub(crate) fn start(n: usize, tls: &Tls) -> Self {
        let metrics = ClientMetrics::unregistered();
        let (stop, rx) = tokio::sync::watch::channel(false);
        let servers: Vec<String> = REPLICAS
            .iter()
            .map(|a| format!("{a}:{SYNC_PORT}"))
            .collect();
        let mut views = Vec::new();
        let mut tasks = Vec::new();
        for i in 0..n {
            let mut cfg = ClientConfig::new(
                format!("node-{i:03}"),
                Discovery::addresses(servers.clone()),
            );
            cfg.tls = Some(typha_client::tls::ClientTls {
                ca_file: tls.ca.clone(),
                cert_file: tls.client_cert.clone(),
                key_file: tls.client_key.clone(),
                server_cn: Some("typha-server".into()),
                server_uri_san: None,
            });
            let client = SyncClient::new(cfg, metrics.clone()).unwrap();
            let view = Arc::new(Mutex::new(View::default()));
            views.push(view.clone());
            let mut rx = rx.clone();
            tasks.push(tokio::spawn(client.run(Agent(view), async move {
                let _ = rx.wait_for(|s| *s).await;
            })));
        }
        Agents {
            views,
            metrics,
            stop,
            tasks,
        }
    }

    /// How many agents are in sync with exactly `digest`.
    pub(crate) fn at(&self, digest: u64) -> usize {
        self.views
            .iter()
            .filter(|v| {
                let v = v.lock().unwrap();
                v.status == Some(SyncStatus::InSync) && v.digest.combined() == digest
            })
            .count()
    }

    pub(crate) async fn all_at(&self, digest: u64, what: &str, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let n = self.at(digest);
            if n == self.views.len() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: {n} of {} agents in sync at {digest:016x}",
                self.views.len()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Updates delivered to the consumers so far.
    pub(crate) fn updates(&self) -> u64 {
        self.views.iter().map(|v| v.lock().unwrap().updates).sum()
    }

    /// The bytes of a hello that offers agent 0's state for a resume (cursor and digest): what
    /// an agent sends a server to be resumed instead of snapshotted.
    pub(crate) fn resume_offer_bytes(&self) -> usize {
        use typha_protocol::handshake::{ClientHandshake, ClientOffer};
        use typha_protocol::message::{Cursor, Epoch, Message, Resume, Seq};
        let resume = Resume {
            cursor: Some(Cursor {
                epoch: Epoch(1),
                seq: Seq(1),
            }),
            digest: Some(self.views[0].lock().unwrap().digest.clone()),
        };
        let offer = ClientOffer {
            resume: Some(resume),
            ..ClientOffer::new("node-000")
        };
        let hello = ClientHandshake::new(offer, std::time::Instant::now()).hello();
        typha_protocol::frame::FrameEncoder::uncompressed()
            .encode(&Message::ClientHello(hello))
            .unwrap()
            .len()
    }

    /// Stops every agent; their consumers and stores.
    pub(crate) async fn stop(self) -> Vec<(Agent, Store)> {
        let _ = self.stop.send(true);
        let mut out = Vec::new();
        for t in self.tasks {
            out.push(t.await.unwrap());
        }
        out
    }
}
