//! Routes and workload-interface settings over rtnetlink, modelled on Calico Felix's route
//! manager.
//!
//! [`RouteManager`] owns the routes of the main IPv4 table that carry its protocol number
//! ([`RouteConfig::protocol`]) and nothing else. Each [`RouteManager::apply`] diffs the desired
//! routes against a cached picture of the main table (every protocol, so foreign routes are
//! seen) and sends only the differences: a no-change apply costs no netlink round trip,
//! except for routes still pending on an unreachable gateway, which are retried every time.
//! Routes to interfaces that do not exist yet, or are down, wait for a link event: a second
//! netlink socket subscribed to `RTMGRP_LINK` wakes [`RouteManager::link_event`], the links are
//! read again on the next apply, and if any of them appeared, vanished, changed index or went
//! up or down the route picture is read again too (the kernel drops routes with their link).
//!
//! Both netlink sockets belong to the network namespace of the thread that called
//! [`RouteManager::new`], and sysctls are written synchronously from the thread that runs
//! `apply`, because `/proc/sys/net` shows the namespace of the thread that opens it (a
//! blocking-pool thread would see another one).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::PathBuf;

use futures_util::stream::BoxStream;
use futures_util::{FutureExt, StreamExt, TryStreamExt};
use ipnet::Ipv4Net;
use netlink_packet_route::AddressFamily;
use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteHeader, RouteMessage, RouteProtocol, RouteScope,
    RouteType,
};
use rtnetlink::{Handle, MulticastGroup, RouteMessageBuilder};
use tokio::task::AbortHandle;
use tracing::{debug, warn};

use super::{ApplyStats, DataplaneError, RouteTarget};

/// The protocol number the agent stamps on its routes unless configured otherwise (Calico's
/// `RTPROT_FELIX`).
pub const DEFAULT_PROTOCOL: u8 = 80;

// errno values the kernel answers route requests with (Linux, all architectures we build for).
const ESRCH: i32 = 3;
const EEXIST: i32 = 17;
const ENODEV: i32 = 19;
const ENETDOWN: i32 = 100;
const ENETUNREACH: i32 = 101;
const EHOSTUNREACH: i32 = 113;

/// Settings of a [`RouteManager`].
#[derive(Debug, Clone)]
pub struct RouteConfig {
    /// The agent's route protocol number; only routes with it are ever changed or removed.
    /// Default [`DEFAULT_PROTOCOL`] (80).
    pub protocol: u8,
    /// Root of the sysctl tree, default `/proc/sys`.
    pub sysctl_root: PathBuf,
}

impl Default for RouteConfig {
    fn default() -> Self {
        Self {
            protocol: DEFAULT_PROTOCOL,
            sysctl_root: PathBuf::from("/proc/sys"),
        }
    }
}

/// Where a kernel route sends traffic, with interfaces by index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Dev(u32),
    Via(Ipv4Addr),
    Blackhole,
    /// Anything the agent never programs (multipath, unreachable, wrong scope, ...).
    Other,
}

/// One route of the main table, as far as reconciling needs it.
#[derive(Debug, Clone)]
struct KernelRoute {
    protocol: u8,
    target: Target,
    priority: u32,
    tos: u8,
}

impl KernelRoute {
    /// Whether this route has the key (tos 0, metric 0) the agent's own routes have, so a
    /// replace of the agent's route hits it.
    fn has_our_key(&self) -> bool {
        self.priority == 0 && self.tos == 0
    }
}

/// The links of the namespace: index and administrative state (up) by name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Links {
    by_name: HashMap<String, (u32, bool)>,
}

impl Links {
    fn index(&self, name: &str) -> Option<u32> {
        self.by_name.get(name).map(|&(index, _)| index)
    }
}

/// The `RTMGRP_LINK` subscription: its message stream and the task driving its socket.
struct Monitor {
    events: BoxStream<'static, ()>,
    task: AbortHandle,
}

/// What one apply learnt besides its stats.
#[derive(Default)]
struct Pass {
    stats: ApplyStats,
    pending: usize,
    first_error: Option<DataplaneError>,
    /// The route picture may be wrong (an unexpected EEXIST, a failed request).
    reread_routes: bool,
    /// A link vanished under us.
    reread_links: bool,
}

impl Pass {
    fn fail(&mut self, e: DataplaneError) {
        if self.first_error.is_none() {
            self.first_error = Some(e);
        }
    }

    /// A route request failed in a way that leaves the kernel's state unknown.
    fn route_failed(&mut self, what: String, source: rtnetlink::Error) {
        self.reread_routes = true;
        self.fail(DataplaneError::Netlink { what, source });
    }
}

/// Keeps the agent's routes in the main IPv4 table and the sysctls of workload interfaces in
/// line with what the calc graph wants. See the module docs.
pub struct RouteManager {
    cfg: RouteConfig,
    handle: Handle,
    conn_task: AbortHandle,
    /// `None` when the link subscription is lost and could not be reopened.
    monitor: Option<Monitor>,
    /// The links as last read; read again on the next apply unless `links_valid`.
    links: Links,
    links_valid: bool,
    /// The main table by destination; `None`: read on the next apply.
    table: Option<BTreeMap<Ipv4Net, Vec<KernelRoute>>>,
    /// Interfaces whose sysctls are set, with the index they had then.
    configured: HashMap<String, u32>,
    /// Routes the kernel refused because their interface is down; retried when links change.
    down: BTreeSet<Ipv4Net>,
    /// Destinations already warned about (foreign route in the way, bad prefix).
    warned: BTreeSet<Ipv4Net>,
    pending: usize,
}

impl std::fmt::Debug for RouteManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteManager")
            .field("cfg", &self.cfg)
            .field("monitoring", &self.monitor.is_some())
            .field("links", &self.links.by_name.len())
            .field("routes", &self.table.as_ref().map(BTreeMap::len))
            .field("configured", &self.configured.len())
            .field("pending", &self.pending)
            .finish()
    }
}

impl Drop for RouteManager {
    fn drop(&mut self) {
        self.conn_task.abort();
        if let Some(m) = &self.monitor {
            m.task.abort();
        }
    }
}

/// The errno of a NACK from the kernel, if that is what `e` is.
fn errno(e: &rtnetlink::Error) -> Option<i32> {
    match e {
        rtnetlink::Error::NetlinkError(m) => Some(m.raw_code().saturating_abs()),
        _ => None,
    }
}

fn open_monitor(rt: &tokio::runtime::Handle) -> Result<Monitor, DataplaneError> {
    let (conn, _handle, messages) = rtnetlink::new_multicast_connection(&[MulticastGroup::Link])
        .map_err(|source| DataplaneError::NetlinkSocket {
            what: "link monitor socket",
            source,
        })?;
    let task = rt.spawn(conn).abort_handle();
    Ok(Monitor {
        events: messages.map(|_| ()).boxed(),
        task,
    })
}

impl RouteManager {
    /// Opens the rtnetlink connection (spawned on the current tokio runtime, which may be a
    /// `current_thread` runtime on a dedicated thread, and must have IO enabled) and a second
    /// netlink socket subscribed to link events (`RTMGRP_LINK`). Both belong to the network
    /// namespace of the calling thread. Reads nothing yet: the first apply does.
    ///
    /// Errors: [`DataplaneError::NoRuntime`] when called outside a tokio runtime,
    /// [`DataplaneError::NetlinkSocket`] when a socket cannot be opened.
    pub fn new(cfg: RouteConfig) -> Result<Self, DataplaneError> {
        let rt =
            tokio::runtime::Handle::try_current().map_err(|source| DataplaneError::NoRuntime {
                what: "route manager needs a tokio runtime",
                source,
            })?;
        // The monitor first: a link that changes while the first apply reads links is then
        // still reported.
        let monitor = open_monitor(&rt)?;
        let (conn, handle, _) = match rtnetlink::new_connection() {
            Ok(c) => c,
            Err(source) => {
                monitor.task.abort();
                return Err(DataplaneError::NetlinkSocket {
                    what: "route socket",
                    source,
                });
            }
        };
        let conn_task = rt.spawn(conn).abort_handle();
        Ok(Self {
            cfg,
            handle,
            conn_task,
            monitor: Some(monitor),
            links: Links::default(),
            links_valid: false,
            table: None,
            configured: HashMap::new(),
            down: BTreeSet::new(),
            warned: BTreeSet::new(),
            pending: 0,
        })
    }

    /// Makes the main table's routes with our protocol equal to `routes` and configures
    /// `interfaces` (`proxy_arp` and `forwarding` on, `proxy_delay` 0) once per interface
    /// index.
    ///
    /// Routes that cannot be programmed yet do not fail the apply; they are counted in
    /// [`RouteManager::pending`]: a `Dev` route whose interface is missing or down (retried
    /// after a link event), a `Via` route whose gateway is unreachable (retried on every
    /// apply), a destination held by a route of another protocol (never touched; warned about
    /// once). Other kernel refusals are returned as [`DataplaneError::Netlink`] after the rest
    /// of the routes were handled, and the next apply reads the kernel again. A sysctl that
    /// cannot be written is [`DataplaneError::Sysctl`], unless its interface vanished
    /// meanwhile.
    pub async fn apply(
        &mut self,
        routes: &BTreeMap<Ipv4Net, RouteTarget>,
        interfaces: &BTreeSet<String>,
    ) -> Result<ApplyStats, DataplaneError> {
        if !self.links_valid {
            self.refresh_links().await?;
        }
        let mut table = match self.table.take() {
            Some(t) => t,
            None => self.read_routes().await?,
        };
        let links = std::mem::take(&mut self.links);
        let mut pass = Pass::default();
        self.reconcile(routes, &links, &mut table, &mut pass).await;
        self.configure_interfaces(interfaces, &links, &mut pass)
            .await;
        self.links = links;
        self.pending = pass.pending;
        if pass.reread_links {
            self.links_valid = false;
        }
        if !pass.reread_routes {
            self.table = Some(table);
        }
        match pass.first_error {
            Some(e) => Err(e),
            None => Ok(pass.stats),
        }
    }

    /// Routes the last apply could not program yet (missing or down interface, unreachable
    /// gateway, destination held by a foreign route).
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// Drops the caches: the next apply re-reads links and routes from the kernel and writes
    /// the interface sysctls again.
    pub fn invalidate(&mut self) {
        self.links_valid = false;
        self.table = None;
        self.configured.clear();
        self.down.clear();
    }

    /// Completes when a link was added, removed or changed since the last call (a burst of
    /// events completes it once). Cancel-safe. Marks the links for re-reading on the next
    /// apply. If the subscription is lost, completes once (everything is re-read) after trying
    /// to reopen it, and never again if that failed.
    pub async fn link_event(&mut self) {
        let Some(monitor) = self.monitor.as_mut() else {
            return std::future::pending().await;
        };
        if monitor.events.next().await.is_some() {
            // Coalesce whatever else is already queued.
            while let Some(Some(())) = monitor.events.next().now_or_never() {}
            self.links_valid = false;
            return;
        }
        warn!("link monitor closed; reopening it and re-reading all routes");
        monitor.task.abort();
        self.monitor = None;
        self.invalidate();
        match tokio::runtime::Handle::try_current()
            .map_err(|source| DataplaneError::NoRuntime {
                what: "link monitor",
                source,
            })
            .and_then(|rt| open_monitor(&rt))
        {
            Ok(m) => self.monitor = Some(m),
            Err(e) => {
                warn!(error = %e, "cannot reopen link monitor; new links are seen on resync only")
            }
        }
    }

    /// `ip route`-style lines (each ending in a newline) of what apply would program, for
    /// `--dry-run`.
    pub fn plan(routes: &BTreeMap<Ipv4Net, RouteTarget>, protocol: u8) -> String {
        let mut out = String::new();
        for (dst, target) in routes {
            // Writing to a String cannot fail.
            let _ = match target {
                RouteTarget::Dev(dev) => {
                    writeln!(out, "{dst} dev {dev} scope link proto {protocol}")
                }
                RouteTarget::Via(gw) => writeln!(out, "{dst} via {gw} proto {protocol}"),
                RouteTarget::Blackhole => writeln!(out, "blackhole {dst} proto {protocol}"),
            };
        }
        out
    }

    /// Reads the links; if any appeared, vanished, changed index or went up or down, routes
    /// may have gone with them or become programmable: the route picture is read again too.
    async fn refresh_links(&mut self) -> Result<(), DataplaneError> {
        let mut links = Links::default();
        let mut stream = self.handle.link().get().execute();
        while let Some(msg) = stream
            .try_next()
            .await
            .map_err(|source| DataplaneError::Netlink {
                what: "list links".to_owned(),
                source,
            })?
        {
            if let Some(name) = link_name(&msg) {
                let up = msg.header.flags.contains(LinkFlags::Up);
                links
                    .by_name
                    .insert(name.to_owned(), (msg.header.index, up));
            }
        }
        if links != self.links {
            self.table = None;
            self.down.clear();
            self.links = links;
        }
        self.links_valid = true;
        Ok(())
    }

    /// Reads the main IPv4 table, every protocol.
    async fn read_routes(&self) -> Result<BTreeMap<Ipv4Net, Vec<KernelRoute>>, DataplaneError> {
        // Without NETLINK_GET_STRICT_CHK the kernel dumps every table whatever the header says;
        // the header is neutral anyway so strict checking would not filter on a protocol.
        let mut req = RouteMessageBuilder::<Ipv4Addr>::new().build();
        req.header.protocol = RouteProtocol::Unspec;
        req.header.kind = RouteType::Unspec;
        let mut table: BTreeMap<Ipv4Net, Vec<KernelRoute>> = BTreeMap::new();
        let mut stream = self.handle.route().get(req).execute();
        while let Some(msg) = stream
            .try_next()
            .await
            .map_err(|source| DataplaneError::Netlink {
                what: "list routes".to_owned(),
                source,
            })?
        {
            if let Some((dst, route)) = parse_route(&msg) {
                table.entry(dst).or_default().push(route);
            }
        }
        Ok(table)
    }

    async fn reconcile(
        &mut self,
        routes: &BTreeMap<Ipv4Net, RouteTarget>,
        links: &Links,
        table: &mut BTreeMap<Ipv4Net, Vec<KernelRoute>>,
        pass: &mut Pass,
    ) {
        let ours = self.cfg.protocol;
        let unwanted: Vec<(Ipv4Net, KernelRoute)> = table
            .iter()
            .filter(|(dst, _)| !routes.contains_key(*dst))
            .flat_map(|(dst, rs)| {
                rs.iter()
                    .filter(|r| r.protocol == ours)
                    .map(move |r| (*dst, r.clone()))
            })
            .collect();
        for (dst, r) in unwanted {
            self.delete(dst, &r, table, pass).await;
        }
        for (dst, want) in routes {
            self.reconcile_one(*dst, want, links, table, pass).await;
        }
        self.warned.retain(|d| routes.contains_key(d));
        self.down.retain(|d| routes.contains_key(d));
    }

    /// Brings the routes to `dst` to `want`: keeps our route if it is right, deletes our wrong
    /// ones (replacing the one with our key when the new target can be programmed), never
    /// touches a foreign one.
    async fn reconcile_one(
        &mut self,
        dst: Ipv4Net,
        want: &RouteTarget,
        links: &Links,
        table: &mut BTreeMap<Ipv4Net, Vec<KernelRoute>>,
        pass: &mut Pass,
    ) {
        let ours = self.cfg.protocol;
        if dst != dst.trunc() {
            // The kernel would refuse it (EINVAL); the calc graph should never produce it.
            if self.warned.insert(dst) {
                warn!(%dst, "route destination has host bits set; not programming it");
            }
            pass.pending += 1;
            return;
        }
        let want = match want {
            RouteTarget::Dev(name) => links.index(name).map(Target::Dev),
            RouteTarget::Via(gw) => Some(Target::Via(*gw)),
            RouteTarget::Blackhole => Some(Target::Blackhole),
        };
        let entries = table.get(&dst).map(Vec::as_slice).unwrap_or_default();
        let foreign = entries.iter().any(|r| r.protocol != ours);
        let mut right = false;
        let mut wrong = Vec::new();
        for r in entries.iter().filter(|r| r.protocol == ours) {
            if !right && want == Some(r.target) && r.has_our_key() {
                right = true;
            } else {
                wrong.push(r.clone());
            }
        }
        let target = match want {
            _ if right => None,
            None => {
                debug!(%dst, "route pending: interface missing");
                pass.pending += 1;
                None
            }
            Some(_) if foreign => {
                if self.warned.insert(dst) {
                    warn!(%dst, "another protocol's route holds this destination; left alone");
                }
                pass.pending += 1;
                None
            }
            Some(Target::Dev(_)) if self.down.contains(&dst) => {
                debug!(%dst, "route pending: interface down");
                pass.pending += 1;
                None
            }
            Some(t) => Some(t),
        };
        let Some(target) = target else {
            // Right already, or cannot be programmed now: either way ours that differ go.
            for r in wrong {
                self.delete(dst, &r, table, pass).await;
            }
            return;
        };
        let replaced = wrong
            .iter()
            .position(KernelRoute::has_our_key)
            .map(|i| wrong.swap_remove(i));
        for r in wrong {
            self.delete(dst, &r, table, pass).await;
        }
        let result = self.add(dst, target, replaced.is_some()).await;
        let pending = match result {
            Ok(()) => {
                pass.stats.routes_added += 1;
                if let Some(old) = &replaced {
                    forget(table, dst, old);
                }
                table.entry(dst).or_default().push(KernelRoute {
                    protocol: ours,
                    target,
                    priority: 0,
                    tos: 0,
                });
                self.down.remove(&dst);
                self.warned.remove(&dst);
                return;
            }
            Err(e) => match errno(&e) {
                Some(ENETUNREACH | EHOSTUNREACH) => "gateway unreachable",
                Some(ENETDOWN) => {
                    self.down.insert(dst);
                    "interface down"
                }
                Some(ENODEV) => {
                    pass.reread_links = true;
                    "interface vanished"
                }
                Some(EEXIST) => {
                    // Someone added a route since we last read the table.
                    pass.reread_routes = true;
                    "destination taken"
                }
                _ => {
                    pass.route_failed(format!("add route {dst}"), e);
                    return;
                }
            },
        };
        debug!(%dst, why = pending, "route pending");
        pass.pending += 1;
        // The old target is wrong whether or not the new one can be programmed yet.
        if let Some(old) = replaced {
            self.delete(dst, &old, table, pass).await;
        }
    }

    async fn add(
        &self,
        dst: Ipv4Net,
        target: Target,
        replace: bool,
    ) -> Result<(), rtnetlink::Error> {
        let b = RouteMessageBuilder::<Ipv4Addr>::new()
            .destination_prefix(dst.addr(), dst.prefix_len())
            .protocol(RouteProtocol::from(self.cfg.protocol));
        let msg = match target {
            Target::Dev(index) => b.output_interface(index).scope(RouteScope::Link),
            Target::Via(gw) => b.gateway(gw),
            Target::Blackhole => b.kind(RouteType::BlackHole),
            // Never wanted: `reconcile_one` only adds targets resolved from a `RouteTarget`.
            Target::Other => return Err(rtnetlink::Error::RequestFailed),
        }
        .build();
        let req = self.handle.route().add(msg);
        if replace {
            req.replace().execute().await
        } else {
            req.execute().await
        }
    }

    /// Deletes one of our routes, matched by destination, protocol, tos and metric.
    async fn delete(
        &self,
        dst: Ipv4Net,
        r: &KernelRoute,
        table: &mut BTreeMap<Ipv4Net, Vec<KernelRoute>>,
        pass: &mut Pass,
    ) {
        let mut b = RouteMessageBuilder::<Ipv4Addr>::new()
            .destination_prefix(dst.addr(), dst.prefix_len())
            .protocol(RouteProtocol::from(r.protocol))
            .scope(RouteScope::NoWhere)
            .kind(RouteType::Unspec)
            .tos(r.tos);
        if r.priority != 0 {
            b = b.priority(r.priority);
        }
        match self.handle.route().del(b.build()).execute().await {
            Ok(()) => {
                pass.stats.routes_removed += 1;
                forget(table, dst, r);
            }
            Err(e) if errno(&e) == Some(ESRCH) => forget(table, dst, r),
            Err(e) => pass.route_failed(format!("delete route {dst}"), e),
        }
    }

    /// Sets the sysctls of each wanted interface that exists, once per interface index.
    async fn configure_interfaces(
        &mut self,
        interfaces: &BTreeSet<String>,
        links: &Links,
        pass: &mut Pass,
    ) {
        self.configured
            .retain(|name, index| interfaces.contains(name) && links.index(name) == Some(*index));
        for name in interfaces {
            let Some(index) = links.index(name) else {
                continue;
            };
            if self.configured.get(name) == Some(&index) {
                continue;
            }
            match self.write_sysctls(name) {
                Ok(()) => {
                    self.configured.insert(name.clone(), index);
                }
                Err(e) => {
                    if self.link_exists(name, index).await {
                        pass.fail(e);
                    } else {
                        debug!(interface = %name, error = %e, "interface vanished meanwhile");
                        pass.reread_links = true;
                    }
                }
            }
        }
    }

    fn write_sysctls(&self, name: &str) -> Result<(), DataplaneError> {
        // `name` is a kernel link name, so it holds no '/' and is not "." or "..".
        let conf = self.cfg.sysctl_root.join("net/ipv4/conf").join(name);
        let neigh = self.cfg.sysctl_root.join("net/ipv4/neigh").join(name);
        for (path, value) in [
            (conf.join("proxy_arp"), "1"),
            (conf.join("forwarding"), "1"),
            (neigh.join("proxy_delay"), "0"),
        ] {
            // Synchronous on purpose: /proc/sys/net is the namespace of the writing thread.
            std::fs::write(&path, value).map_err(|source| DataplaneError::Sysctl {
                path: path.display().to_string(),
                source,
            })?;
        }
        Ok(())
    }

    /// Whether the link `name` still exists with `index`; when the kernel cannot tell, yes
    /// (so the error is reported rather than hidden).
    async fn link_exists(&self, name: &str, index: u32) -> bool {
        let mut stream = self.handle.link().get().match_name(name).execute();
        match stream.try_next().await {
            Ok(Some(msg)) => msg.header.index == index,
            Ok(None) => false,
            Err(e) => errno(&e) != Some(ENODEV),
        }
    }
}

/// Removes one route like `r` (same protocol, target, metric and tos) from the picture.
fn forget(table: &mut BTreeMap<Ipv4Net, Vec<KernelRoute>>, dst: Ipv4Net, r: &KernelRoute) {
    if let Some(rs) = table.get_mut(&dst) {
        if let Some(i) = rs.iter().position(|x| {
            x.protocol == r.protocol
                && x.target == r.target
                && x.priority == r.priority
                && x.tos == r.tos
        }) {
            rs.swap_remove(i);
        }
        if rs.is_empty() {
            table.remove(&dst);
        }
    }
}

fn link_name(msg: &LinkMessage) -> Option<&str> {
    msg.attributes.iter().find_map(|a| match a {
        LinkAttribute::IfName(name) => Some(name.as_str()),
        _ => None,
    })
}

/// A route of the main IPv4 table, or `None` for anything else.
fn parse_route(msg: &RouteMessage) -> Option<(Ipv4Net, KernelRoute)> {
    let h = &msg.header;
    if h.address_family != AddressFamily::Inet {
        return None;
    }
    let mut table = u32::from(h.table);
    let mut dst = Ipv4Addr::UNSPECIFIED;
    let (mut gateway, mut oif, mut priority, mut multipath) = (None, None, 0, false);
    for attr in &msg.attributes {
        match attr {
            RouteAttribute::Table(t) => table = *t,
            RouteAttribute::Destination(RouteAddress::Inet(a)) => dst = *a,
            RouteAttribute::Gateway(RouteAddress::Inet(a)) => gateway = Some(*a),
            RouteAttribute::Oif(i) => oif = Some(*i),
            RouteAttribute::Priority(p) => priority = *p,
            RouteAttribute::MultiPath(_) => multipath = true,
            _ => {}
        }
    }
    if table != u32::from(RouteHeader::RT_TABLE_MAIN) {
        return None;
    }
    let dst = Ipv4Net::new(dst, h.destination_prefix_length).ok()?;
    let onlink = h.flags.contains(RouteFlags::Onlink);
    let target = match (h.kind, gateway, oif) {
        (RouteType::BlackHole, _, _) => Target::Blackhole,
        (RouteType::Unicast, _, _) if multipath || onlink => Target::Other,
        (RouteType::Unicast, Some(gw), _) if h.scope == RouteScope::Universe => Target::Via(gw),
        (RouteType::Unicast, None, Some(i)) if h.scope == RouteScope::Link => Target::Dev(i),
        _ => Target::Other,
    };
    let route = KernelRoute {
        protocol: u8::from(h.protocol),
        target,
        priority,
        tos: h.tos,
    };
    Some((dst, route))
}

#[cfg(test)]
mod tests;
