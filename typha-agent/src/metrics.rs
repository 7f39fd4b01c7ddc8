//! The agent's metrics, under Felix's names where Felix has one (`felix_active_local_endpoints`,
//! `felix_int_dataplane_apply_time_seconds`, ...) so existing dashboards work. Served in the
//! Prometheus text format 0.0.4 (`typha_service::metrics`); counters are registered with the
//! `_total` names they were exposed under in the OpenMetrics form before. The `process_*`
//! metrics (CPU, memory, file descriptors) are registered with them.

use prometheus::{Histogram, IntCounter as Counter, IntGauge as Gauge, Registry};
use typha_service::metrics::{counter, gauge, histogram, register_process_metrics};

use crate::calc::Counts;
use crate::dataplane::ApplyStats;

/// The agent's metrics.
#[derive(Debug)]
pub struct AgentMetrics {
    /// `felix_active_local_endpoints`.
    pub local_endpoints: Gauge,
    /// `felix_active_local_policies`.
    pub active_policies: Gauge,
    /// `felix_ipsets_calico`.
    pub ipsets: Gauge,
    /// `felix_iptables_chains`.
    pub chains: Gauge,
    /// `typha_agent_routes`.
    pub routes: Gauge,
    /// `felix_resync_state`: 1 wait for datastore, 2 resync in progress, 3 in sync (what
    /// `/readiness` and `/status` read too).
    pub resync_state: Gauge,
    /// `felix_int_dataplane_apply_time_seconds`.
    pub apply_seconds: Histogram,
    /// `felix_int_dataplane_failures_total`.
    pub failures: Counter,
    /// `typha_agent_applies_total`.
    pub applies: Counter,
    /// `typha_agent_iptables_restore_bytes_total`.
    pub iptables_bytes: Counter,
    /// `typha_agent_ipset_restore_bytes_total`.
    pub ipset_bytes: Counter,
    /// `typha_agent_ipset_members_changed_total`.
    pub ipset_members: Counter,
    /// `typha_agent_route_changes_total`.
    pub route_changes: Counter,
    /// `typha_agent_invalid_updates_total`.
    pub invalid_updates: Counter,
    /// `typha_agent_unsupported_rules`.
    pub unsupported_rules: Gauge,
    /// `typha_agent_in_sync_to_programmed_milliseconds`: from the first InSync to the first
    /// fully programmed dataplane.
    pub programmed_after_ms: Gauge,
}

impl AgentMetrics {
    /// Registers the metrics, and the process' own (`process_cpu_seconds_total`, ...).
    pub fn new(registry: &Registry) -> Self {
        let r = registry;
        register_process_metrics(r);
        Self {
            local_endpoints: gauge(
                r,
                "felix_active_local_endpoints",
                "This node's workload endpoints",
            ),
            active_policies: gauge(
                r,
                "felix_active_local_policies",
                "Policies that select at least one of this node's endpoints",
            ),
            ipsets: gauge(r, "felix_ipsets_calico", "ipsets the agent programs"),
            chains: gauge(
                r,
                "felix_iptables_chains",
                "cali-* chains the agent programs",
            ),
            routes: gauge(r, "typha_agent_routes", "Routes the agent programs"),
            resync_state: gauge(
                r,
                "felix_resync_state",
                "Sync state: 1 waiting for the datastore, 2 resync in progress, 3 in sync",
            ),
            apply_seconds: histogram(
                r,
                "felix_int_dataplane_apply_time_seconds",
                "Time to bring the dataplane to the calculated state",
                vec![
                    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                ],
            ),
            failures: counter(
                r,
                "felix_int_dataplane_failures_total",
                "Dataplane applies that failed (retried with the kernel state re-read)",
            ),
            applies: counter(r, "typha_agent_applies_total", "Dataplane applies"),
            iptables_bytes: counter(
                r,
                "typha_agent_iptables_restore_bytes_total",
                "Bytes written to iptables-restore",
            ),
            ipset_bytes: counter(
                r,
                "typha_agent_ipset_restore_bytes_total",
                "Bytes written to ipset restore",
            ),
            ipset_members: counter(
                r,
                "typha_agent_ipset_members_changed_total",
                "ipset members added or removed",
            ),
            route_changes: counter(
                r,
                "typha_agent_route_changes_total",
                "Routes added, replaced or removed",
            ),
            invalid_updates: counter(
                r,
                "typha_agent_invalid_updates_total",
                "Updates that failed validation and were applied as deletions",
            ),
            unsupported_rules: gauge(
                r,
                "typha_agent_unsupported_rules",
                "Rules this dataplane cannot fully enforce (left out if they allow, kept broader if they deny)",
            ),
            programmed_after_ms: gauge(
                r,
                "typha_agent_in_sync_to_programmed_milliseconds",
                "Milliseconds from the first InSync to the first fully programmed dataplane",
            ),
        }
    }

    /// Records the calc graph's sizes.
    pub fn counts(&self, c: &Counts) {
        let g = |g: &Gauge, v: usize| {
            g.set(i64::try_from(v).unwrap_or(i64::MAX));
        };
        g(&self.local_endpoints, c.local_endpoints);
        g(&self.active_policies, c.active_policies);
        g(&self.ipsets, c.ipsets);
        g(&self.chains, c.chains);
        g(&self.routes, c.routes);
        self.unsupported_rules
            .set(i64::try_from(c.unsupported_rules).unwrap_or(i64::MAX));
    }

    /// Records one successful apply.
    pub fn applied(&self, s: &ApplyStats, seconds: f64) {
        self.apply_seconds.observe(seconds);
        self.applies.inc();
        self.iptables_bytes.inc_by(s.iptables_bytes);
        self.ipset_bytes.inc_by(s.ipset_bytes);
        self.ipset_members.inc_by(s.ipset_members_changed);
        self.route_changes.inc_by(s.routes_added + s.routes_removed);
    }
}
