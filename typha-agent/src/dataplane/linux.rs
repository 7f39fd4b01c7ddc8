//! The real dataplane: ipsets, iptables and routes of the network namespace the agent runs in.
//!
//! Order of an apply, so nothing ever refers to what does not exist yet or no longer:
//! 1. ipsets created and filled (nothing destroyed);
//! 2. iptables: one `iptables-restore --noflush` transaction for every changed `cali-*` chain
//!    and hook;
//! 3. routes and workload interface settings;
//! 4. ipsets no longer referenced destroyed.

use std::path::PathBuf;

use super::ipsets::{IpsetConfig, IpsetManager};
use super::iptables::{IptablesConfig, IptablesManager};
use super::routes::{RouteConfig, RouteManager};
use super::{ApplyStats, Dataplane, DataplaneError, Desired, Dirty};

/// Settings of the Linux dataplane.
#[derive(Debug, Clone)]
pub struct LinuxConfig {
    /// Words put before every helper command (tests use `ip netns exec <ns>`).
    pub command_prefix: Vec<String>,
    /// The agent's route protocol number.
    pub route_protocol: u8,
    /// Root of the sysctl tree.
    pub sysctl_root: PathBuf,
}

impl Default for LinuxConfig {
    fn default() -> Self {
        Self {
            command_prefix: Vec::new(),
            route_protocol: 80,
            sysctl_root: PathBuf::from("/proc/sys"),
        }
    }
}

/// ipsets, iptables and routes, applied in a safe order.
#[derive(Debug)]
pub struct LinuxDataplane {
    ipsets: IpsetManager,
    iptables: IptablesManager,
    routes: RouteManager,
}

impl LinuxDataplane {
    /// Opens the netlink sockets (in the current network namespace, on the current tokio
    /// runtime).
    pub fn new(cfg: &LinuxConfig) -> Result<Self, DataplaneError> {
        Ok(Self {
            ipsets: IpsetManager::new(IpsetConfig {
                command_prefix: cfg.command_prefix.clone(),
                ..IpsetConfig::default()
            }),
            iptables: IptablesManager::new(IptablesConfig {
                command_prefix: cfg.command_prefix.clone(),
                ..IptablesConfig::default()
            }),
            routes: RouteManager::new(RouteConfig {
                protocol: cfg.route_protocol,
                sysctl_root: cfg.sysctl_root.clone(),
            })?,
        })
    }

    /// What a first apply of `desired` would do on a node without any of the agent's state:
    /// the `ipset restore` input, the `iptables-restore` input and the routes.
    pub fn plan(desired: &Desired, route_protocol: u8) -> String {
        let ipsets = IpsetManager::new(IpsetConfig::default()).plan(&desired.ipsets);
        let iptables =
            IptablesManager::new(IptablesConfig::default()).plan(&desired.chains, &desired.hooks);
        let routes = RouteManager::plan(&desired.routes, route_protocol);
        format!(
            "# ipset restore\n{ipsets}\n# iptables-restore --noflush\n{iptables}\n# routes\n{routes}"
        )
    }
}

impl Dataplane for LinuxDataplane {
    async fn apply(
        &mut self,
        desired: &Desired,
        dirty: &Dirty,
    ) -> Result<ApplyStats, DataplaneError> {
        let mut stats = ApplyStats::default();
        let sets = dirty.all_ipsets || !dirty.ipsets.is_empty();
        if sets {
            stats.add(&self.ipsets.apply_updates(&desired.ipsets, dirty).await?);
        }
        if dirty.chains {
            stats.add(&self.iptables.apply(&desired.chains, &desired.hooks).await?);
        }
        if dirty.routes {
            stats.add(
                &self
                    .routes
                    .apply(&desired.routes, &desired.interfaces)
                    .await?,
            );
        }
        if sets {
            stats.add(&self.ipsets.apply_deletions(&desired.ipsets).await?);
        }
        Ok(stats)
    }

    fn resync(&mut self) {
        self.ipsets.invalidate();
        self.iptables.invalidate();
        self.routes.invalidate();
    }

    async fn event(&mut self) {
        self.routes.link_event().await;
    }
}
