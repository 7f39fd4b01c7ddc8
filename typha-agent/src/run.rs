//! The agent's loop: stream → validation → calc graph → dataplane, with resyncs and retries.
//!
//! The sync client's callbacks ([`Feeder`]) only queue what they hear. The loop drains the
//! queue into the calc graph, and whenever the graph changed and the stream is in sync, flushes
//! it and applies the result; updates that arrive during an apply are batched into the next
//! one. Nothing is applied before the first InSync, and nothing while a resync is in progress
//! (the last programmed state stays in place). A failed apply is retried after a back-off with
//! the kernel state re-read; every `refresh_interval` the kernel is re-read anyway, so drift
//! (a chain or route deleted by hand) is repaired.
//!
//! While the server says its view of the datastore is stale, the agent keeps its dataplane
//! exactly as it is: updates that still arrive are held, not programmed, until the view is
//! current again (drift repair goes on, of the state last programmed). It says so once each
//! way in the log and on `/status`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tracing::{debug, info, warn};
use typha_protocol::model::{SyncStatus, Update};

use crate::calc::CalcGraph;
use crate::calc::render::RenderConfig;
use crate::dataplane::{Dataplane, Dirty};
use crate::metrics::AgentMetrics;
use crate::validate::validate;
use typha_client::{Staleness, SyncerCallbacks};

/// Settings of the loop.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// This node's name, as in workload endpoint keys and block affinities.
    pub nodename: String,
    /// Rendering settings.
    pub render: RenderConfig,
    /// How often the kernel state is re-read and repaired (Felix: 90 s).
    pub refresh_interval: Duration,
    /// First wait before retrying a failed apply (doubles up to 30 s).
    pub retry_min: Duration,
}

impl AgentConfig {
    /// Defaults for `nodename`.
    pub fn new(nodename: impl Into<String>) -> Self {
        Self {
            nodename: nodename.into(),
            render: RenderConfig::default(),
            refresh_interval: Duration::from_secs(90),
            retry_min: Duration::from_millis(500),
        }
    }
}

/// What the loop hears from the sync client.
#[derive(Debug)]
pub enum Input {
    /// A status change.
    Status(SyncStatus),
    /// A batch of updates.
    Updates(Vec<Update>),
    /// What the server says of its view of the datastore.
    Staleness(Staleness),
}

/// The sync client's callbacks: forward everything to the loop.
#[derive(Debug, Clone)]
pub struct Feeder {
    tx: mpsc::UnboundedSender<Input>,
}

impl Feeder {
    /// A feeder and the receiving end for [`run`].
    pub fn new() -> (Self, mpsc::UnboundedReceiver<Input>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Self { tx }, rx)
    }
}

impl SyncerCallbacks for Feeder {
    fn on_status_updated(&mut self, status: SyncStatus) {
        let _ = self.tx.send(Input::Status(status));
    }

    fn on_updates(&mut self, updates: Vec<Update>) {
        let _ = self.tx.send(Input::Updates(updates));
    }

    fn on_staleness(&mut self, staleness: &Staleness) {
        let _ = self.tx.send(Input::Staleness(staleness.clone()));
    }
}

/// State the health endpoints read.
#[derive(Debug)]
pub struct Shared {
    /// The metrics.
    pub metrics: AgentMetrics,
    /// In sync with the server, and the dataplane programmed from that state.
    pub ready: AtomicBool,
    /// Milliseconds since `started` at the loop's last turn.
    pub last_turn_ms: AtomicU64,
    /// When the agent started.
    pub started: Instant,
    /// While the server's view of the datastore is stale: what it said, and when.
    pub server_stale: std::sync::Mutex<Option<(Staleness, Instant)>>,
    /// Updates held while the server's view is stale.
    pub held_updates: AtomicU64,
}

impl Shared {
    /// New shared state with these metrics.
    pub fn new(metrics: AgentMetrics) -> Self {
        Self {
            metrics,
            ready: AtomicBool::new(false),
            last_turn_ms: AtomicU64::new(0),
            started: Instant::now(),
            server_stale: std::sync::Mutex::new(None),
            held_updates: AtomicU64::new(0),
        }
    }

    fn turn(&self) {
        let ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_turn_ms.store(ms, Ordering::Relaxed);
    }

    /// While the server's view is stale: how old it is now, and why.
    pub fn server_stale(&self) -> Option<(Duration, String)> {
        let g = self.server_stale.lock().unwrap_or_else(|p| p.into_inner());
        g.as_ref()
            .map(|(s, at)| (s.age() + at.elapsed(), s.reason.clone()))
    }

    /// How long since the loop last made progress.
    pub fn since_last_turn(&self) -> Duration {
        let last = Duration::from_millis(self.last_turn_ms.load(Ordering::Relaxed));
        self.started.elapsed().saturating_sub(last)
    }
}

/// Validates updates into the graph (an invalid value is applied as a deletion).
fn feed(graph: &mut CalcGraph, updates: &[Update], shared: &Shared) {
    for u in updates {
        let c = validate(u);
        if let Some(e) = &c.invalid {
            warn!(error = %e, "invalid update: applied as a deletion");
            shared.metrics.invalid_updates.inc();
        }
        graph.on_update(&c.key, c.value);
    }
}

/// Runs the loop until the input closes or `shutdown` completes. Returns the graph (tests
/// look at it).
pub async fn run<D: Dataplane>(
    cfg: AgentConfig,
    mut rx: mpsc::UnboundedReceiver<Input>,
    dp: &mut D,
    shared: &Shared,
    shutdown: impl std::future::Future<Output = ()>,
) -> CalcGraph {
    let mut graph = CalcGraph::new(cfg.nodename.clone(), cfg.render.clone());
    let mut shutdown = std::pin::pin!(shutdown);
    let mut in_sync = false;
    let mut first_in_sync: Option<Instant> = None;
    let mut pending = Dirty::all();
    let mut retry_at: Option<tokio::time::Instant> = None;
    let mut backoff = cfg.retry_min;
    let mut refresh = tokio::time::interval(cfg.refresh_interval);
    refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    refresh.tick().await;
    let mut heartbeat = tokio::time::interval(Duration::from_secs(1));
    // Updates heard while the server's view is stale; `Some` while it is.
    let mut held: Option<Vec<Update>> = None;
    loop {
        shared.turn();
        let retry_sleep = async {
            match retry_at {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            () = &mut shutdown => break,
            input = rx.recv() => {
                let Some(input) = input else { break };
                let mut next = Some(input);
                // Drain what is queued, so one apply covers it all.
                let mut n = 0;
                while let Some(i) = next {
                    match i {
                        Input::Status(s) => {
                            debug!(status = %s, "sync status");
                            shared.metrics.resync_state.set(match s {
                                SyncStatus::WaitForDatastore => 1,
                                SyncStatus::ResyncInProgress => 2,
                                SyncStatus::InSync => 3,
                            });
                            in_sync = s == SyncStatus::InSync;
                            if in_sync && first_in_sync.is_none() {
                                first_in_sync = Some(Instant::now());
                                info!("in sync; programming the dataplane");
                            }
                        }
                        Input::Updates(us) => match held.as_mut() {
                            Some(h) => {
                                shared.held_updates.fetch_add(us.len() as u64, Ordering::Relaxed);
                                h.extend(us);
                            }
                            None => feed(&mut graph, &us, shared),
                        },
                        Input::Staleness(st) => {
                            *shared.server_stale.lock().unwrap_or_else(|p| p.into_inner()) =
                                st.stale.then(|| (st.clone(), Instant::now()));
                            match (st.stale, held.is_some()) {
                                (true, false) => {
                                    warn!(age = ?st.age(), reason = %st.reason,
                                        "the server's view of the datastore is stale; keeping the dataplane as it is until it is current again");
                                    held = Some(Vec::new());
                                }
                                (false, true) => {
                                    let h = held.take().unwrap_or_default();
                                    info!(held = h.len(), "the server's view of the datastore is current again; programming what it held");
                                    feed(&mut graph, &h, shared);
                                    shared.held_updates.store(0, Ordering::Relaxed);
                                }
                                _ => {}
                            }
                        }
                    }
                    n += 1;
                    next = if n < 10_000 { rx.try_recv().ok() } else { None };
                }
            }
            () = dp.event() => {
                debug!("dataplane event: routes and interfaces to re-check");
                pending.routes = true;
            }
            _ = refresh.tick() => {
                debug!("periodic resync with the kernel");
                dp.resync();
                pending = Dirty::all();
            }
            () = retry_sleep => {
                retry_at = None;
            }
            _ = heartbeat.tick() => {}
        }
        if !in_sync || retry_at.is_some() {
            continue;
        }
        if !graph.has_changes() && pending.is_clean() {
            continue;
        }
        let dirty = graph.flush();
        pending.merge(&dirty);
        shared.metrics.counts(&graph.counts());
        let t0 = Instant::now();
        match dp.apply(graph.desired(), &pending).await {
            Ok(stats) => {
                let took = t0.elapsed();
                shared.metrics.applied(&stats, took.as_secs_f64());
                debug!(
                    ?stats,
                    took_ms = took.as_millis() as u64,
                    "dataplane applied"
                );
                pending = Dirty::default();
                backoff = cfg.retry_min;
                if !shared.ready.swap(true, Ordering::Relaxed) {
                    let after = first_in_sync.map(|t| t.elapsed()).unwrap_or_default();
                    shared
                        .metrics
                        .programmed_after_ms
                        .set(i64::try_from(after.as_millis()).unwrap_or(i64::MAX));
                    info!(
                        after_in_sync_ms = after.as_millis() as u64,
                        "dataplane programmed"
                    );
                }
            }
            Err(e) => {
                shared.metrics.failures.inc();
                warn!(error = %e, retry_in_ms = backoff.as_millis() as u64,
                    "dataplane apply failed; will re-read the kernel and retry");
                dp.resync();
                pending = Dirty::all();
                retry_at = Some(tokio::time::Instant::now() + backoff);
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }
    }
    graph
}

#[cfg(test)]
mod tests;
