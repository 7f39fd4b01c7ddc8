//! Which breadcrumbs Calico's clients are woken for.
//!
//! Typha keeps breadcrumbs per syncer type, so its confd (bgp), tunnel-address and
//! status-reporter connections never wake for a policy change. Ours are shared by every
//! client, so without this every Calico connection would wake for every breadcrumb, whatever
//! its syncer type, only to find nothing in it for it: three of a calico-node's four
//! connections, thousands of useless wake-ups a breadcrumb in a large cluster.
//!
//! The herald reads each breadcrumb once, in order, while any Calico connection follows the
//! breadcrumbs: it translates it (as the first Calico connection to reach it would have; the
//! translation is kept with the breadcrumb for every connection's frames) and publishes its
//! sequence number to the syncer types it concerns ([`Cache::wake_on`]): those with a change
//! in it, or all four when the sync status changed (every client is told a new status). A
//! Calico connection woken for a breadcrumb goes through the ones before it that had nothing
//! for it at no cost (their frames are `None`), and it also wakes at each ping, which moves
//! its cursor, and so its hold on the history, past them.

use std::sync::Arc;

use typha_protocol::message::Seq;

use super::Cache;
use crate::calico::libcalico::SyncerSet;

/// Breadcrumbs heralded between two yields to the runtime (a translation is a few
/// microseconds an update; a long backlog must not hold a worker thread).
const BATCH: usize = 64;

/// Heralds every breadcrumb published from now on, until the cache's writer is gone.
pub async fn run(cache: Arc<Cache>) {
    let mut every = cache.wake_on(None);
    let first = cache.latest();
    let (mut at, mut status) = (first.seq, first.status);
    drop(first);
    loop {
        let latest = cache.latest().seq;
        let mut done = 0;
        while at < latest {
            let next = Seq(at.0 + 1);
            let concerns = match cache.get(next) {
                // Left the history before it was heralded: whoever it concerned finds out.
                None => SyncerSet::ALL,
                Some(c) if std::mem::replace(&mut status, c.status) != c.status => SyncerSet::ALL,
                // Nobody to wake: not worth a translation.
                Some(_) if cache.calico_followers() == 0 => SyncerSet::NONE,
                Some(c) => c.calico_syncers(&cache.metrics),
            };
            for t in concerns.iter() {
                cache.news(t).send_replace(next);
            }
            at = next;
            done += 1;
            if done % BATCH == 0 {
                tokio::task::yield_now().await;
            }
        }
        if every.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use typha_protocol::message::Epoch;
    use typha_protocol::model::{Revision, SyncStatus};

    use super::*;
    use crate::cache::CacheConfig;
    use crate::cache::writer::CacheWriter;
    use crate::calico::libcalico::SyncerType;
    use crate::calico::v3::Resource;
    use crate::datastore::WatchEvent;
    use crate::metrics::Metrics;
    use crate::syncer::SyncerEvent;

    fn put(w: &mut CacheWriter, rev: u64, doc: serde_json::Value) {
        w.handle(SyncerEvent::Change(WatchEvent::Put {
            revision: Revision(rev),
            item: Ok(Resource::from_json(doc).unwrap().into()),
        }));
        w.flush();
    }

    fn netset(name: &str) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "projectcalico.org/v3", "kind": "GlobalNetworkSet",
            "metadata": {"name": name}, "spec": {"nets": ["10.0.0.0/8"]}
        })
    }

    fn peer(name: &str) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "projectcalico.org/v3", "kind": "BGPPeer",
            "metadata": {"name": name}, "spec": {"peerIP": "10.0.0.1", "asNumber": 64512}
        })
    }

    /// What each syncer type's channel says after the herald has caught up.
    async fn told(cache: &Arc<Cache>) -> [u64; 4] {
        let latest = cache.latest().seq;
        tokio::time::sleep(Duration::from_millis(50)).await;
        let _ = latest;
        SyncerType::ALL.map(|t| cache.wake_on(Some(t)).borrow().0)
    }

    #[tokio::test(start_paused = true)]
    async fn each_syncer_type_is_told_only_of_what_concerns_it() {
        let (mut w, cache) =
            CacheWriter::new(CacheConfig::default(), Epoch(1), Metrics::unregistered());
        w.handle(SyncerEvent::Status(SyncStatus::InSync));
        w.flush();
        tokio::spawn(run(cache.clone()));
        tokio::task::yield_now().await;
        let _calico = cache.follow(SyncerType::Bgp, true);
        put(&mut w, 2, netset("a"));
        let policy = cache.latest().seq.0;
        assert_eq!(
            told(&cache).await,
            [policy, 0, 0, 0],
            "a network set is felix's alone"
        );
        put(&mut w, 3, peer("p"));
        let bgp = cache.latest().seq.0;
        assert_eq!(
            told(&cache).await,
            [bgp, bgp, 0, 0],
            "a BGP peer is felix's and confd's, not the others'"
        );
        w.handle(SyncerEvent::Status(SyncStatus::ResyncInProgress));
        w.flush();
        let status = cache.latest().seq.0;
        assert_eq!(
            told(&cache).await,
            [status; 4],
            "a new status is everyone's"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn without_calico_connections_nothing_is_translated() {
        let (mut w, cache) =
            CacheWriter::new(CacheConfig::default(), Epoch(1), Metrics::unregistered());
        tokio::spawn(run(cache.clone()));
        tokio::task::yield_now().await;
        let _ours = cache.follow(SyncerType::Felix, false);
        put(&mut w, 2, netset("a"));
        assert_eq!(told(&cache).await, [0; 4]);
    }
}
