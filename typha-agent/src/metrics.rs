//! The agent's metrics, under Felix's names where Felix has one (`felix_active_local_endpoints`,
//! `felix_int_dataplane_apply_time_seconds`, ...) so existing dashboards work.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

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
    /// `felix_int_dataplane_failures`.
    pub failures: Counter,
    /// `typha_agent_applies`.
    pub applies: Counter,
    /// `typha_agent_iptables_restore_bytes`.
    pub iptables_bytes: Counter,
    /// `typha_agent_ipset_restore_bytes`.
    pub ipset_bytes: Counter,
    /// `typha_agent_ipset_members_changed`.
    pub ipset_members: Counter,
    /// `typha_agent_route_changes`.
    pub route_changes: Counter,
    /// `typha_agent_invalid_updates`.
    pub invalid_updates: Counter,
    /// `typha_agent_unsupported_rules`.
    pub unsupported_rules: Gauge,
    /// `typha_agent_in_sync_to_programmed_milliseconds`: from the first InSync to the first
    /// fully programmed dataplane.
    pub programmed_after_ms: Gauge,
}

impl AgentMetrics {
    /// Registers the metrics.
    pub fn new(registry: &mut Registry) -> Self {
        let m = Self {
            local_endpoints: Gauge::default(),
            active_policies: Gauge::default(),
            ipsets: Gauge::default(),
            chains: Gauge::default(),
            routes: Gauge::default(),
            resync_state: Gauge::default(),
            apply_seconds: Histogram::new([
                0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ]),
            failures: Counter::default(),
            applies: Counter::default(),
            iptables_bytes: Counter::default(),
            ipset_bytes: Counter::default(),
            ipset_members: Counter::default(),
            route_changes: Counter::default(),
            invalid_updates: Counter::default(),
            unsupported_rules: Gauge::default(),
            programmed_after_ms: Gauge::default(),
        };
        let r = registry;
        r.register(
            "felix_active_local_endpoints",
            "This node's workload endpoints",
            m.local_endpoints.clone(),
        );
        r.register(
            "felix_active_local_policies",
            "Policies that select at least one of this node's endpoints",
            m.active_policies.clone(),
        );
        r.register(
            "felix_ipsets_calico",
            "ipsets the agent programs",
            m.ipsets.clone(),
        );
        r.register(
            "felix_iptables_chains",
            "cali-* chains the agent programs",
            m.chains.clone(),
        );
        r.register(
            "typha_agent_routes",
            "Routes the agent programs",
            m.routes.clone(),
        );
        r.register(
            "felix_resync_state",
            "Sync state: 1 waiting for the datastore, 2 resync in progress, 3 in sync",
            m.resync_state.clone(),
        );
        r.register(
            "felix_int_dataplane_apply_time_seconds",
            "Time to bring the dataplane to the calculated state",
            m.apply_seconds.clone(),
        );
        r.register(
            "felix_int_dataplane_failures",
            "Dataplane applies that failed (retried with the kernel state re-read)",
            m.failures.clone(),
        );
        r.register(
            "typha_agent_applies",
            "Dataplane applies",
            m.applies.clone(),
        );
        r.register(
            "typha_agent_iptables_restore_bytes",
            "Bytes written to iptables-restore",
            m.iptables_bytes.clone(),
        );
        r.register(
            "typha_agent_ipset_restore_bytes",
            "Bytes written to ipset restore",
            m.ipset_bytes.clone(),
        );
        r.register(
            "typha_agent_ipset_members_changed",
            "ipset members added or removed",
            m.ipset_members.clone(),
        );
        r.register(
            "typha_agent_route_changes",
            "Routes added, replaced or removed",
            m.route_changes.clone(),
        );
        r.register(
            "typha_agent_invalid_updates",
            "Updates that failed validation and were applied as deletions",
            m.invalid_updates.clone(),
        );
        r.register(
            "typha_agent_unsupported_rules",
            "Rules this dataplane cannot fully enforce (left out if they allow, kept broader if they deny)",
            m.unsupported_rules.clone(),
        );
        r.register(
            "typha_agent_in_sync_to_programmed_milliseconds",
            "Milliseconds from the first InSync to the first fully programmed dataplane",
            m.programmed_after_ms.clone(),
        );
        m
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
