//! ipsets: the agent's IPv4 ipsets kept in step with [`Desired`](super::Desired) through
//! `ipset restore`.
//!
//! Felix's design: [`IpsetManager`] caches the sets of ours it knows the kernel holds (read
//! once with `ipset save`, then kept up to date by each successful apply) and writes only the
//! difference. Updates and deletions are separate calls because iptables sits between them:
//! sets are created and filled first, iptables then refers to them, and only once iptables no
//! longer does are sets destroyed ([`IpsetManager::apply_deletions`]).
//!
//! A set whose contents change a lot is rebuilt beside the live one and swapped in (`ipset
//! swap` keeps iptables' references on the name), so a rule matching on the set never sees
//! it empty or half-filled. Ownership is by name: only sets starting with [`IPSET_PREFIX`] or
//! [`IPSET_TEMP_PREFIX`] are ever changed or destroyed.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

use super::command::{failed_line, run_command};
use super::error::DataplaneError;
pub use super::error::InvalidIpset;
use super::names::{IPSET_PREFIX, IPSET_TEMP_PREFIX, MAX_IPSET_NAME};
use super::{ApplyStats, Dirty, IpSet, IpSetKind, canonical_net};

/// `maxelem` of every set the agent creates.
const MAX_ELEMENTS: u32 = 1_048_576;

/// How to run `ipset`.
#[derive(Debug, Clone)]
pub struct IpsetConfig {
    /// Words put before every command (tests use `["ip", "netns", "exec", "<ns>"]`); empty
    /// by default.
    pub command_prefix: Vec<String>,
    /// The program; `ipset` by default.
    pub ipset: String,
}

impl Default for IpsetConfig {
    fn default() -> Self {
        Self {
            command_prefix: Vec::new(),
            ipset: "ipset".to_owned(),
        }
    }
}

/// Keeps the agent's ipsets equal to a desired state.
#[derive(Debug)]
pub struct IpsetManager {
    cfg: IpsetConfig,
    /// Every set of ours the kernel holds, as of the last successful call; `None`: read again.
    cache: Option<BTreeMap<String, KernelSet>>,
}

/// A set of ours as the kernel holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct KernelSet {
    /// Type as `ipset save` prints it (`hash:net`).
    kind: String,
    /// Members, in canonical form where they parse (see [`canonical_member`]), else as printed.
    members: BTreeSet<String>,
}

/// One `ipset restore` input and what the kernel will hold once it succeeds.
#[derive(Debug, Default)]
struct Plan {
    text: String,
    /// `add`/`del` lines.
    members_changed: u64,
    /// Sets that will hold exactly this.
    written: Vec<(String, KernelSet)>,
    /// Sets that will be gone.
    gone: Vec<String>,
}

impl IpsetManager {
    /// A manager with no cache: the first call reads the kernel.
    pub fn new(cfg: IpsetConfig) -> Self {
        Self { cfg, cache: None }
    }

    /// Creates missing sets and brings every dirty set's members to the desired ones, in one
    /// `ipset restore`. Never destroys a set that is in `sets`, nor any other set (temporary
    /// sets of its own aside).
    ///
    /// The sets looked at are all of `sets` when `dirty.all_ipsets` is set or the cache had
    /// been dropped, else those of `dirty.ipsets` that are in `sets`. For each:
    /// - missing: created (`maxelem` 1048576) and filled;
    /// - same type, diff no larger than the set: `del` then `add` lines;
    /// - same type, larger diff: a temporary set is filled and swapped with the live one, so
    ///   the live set is never seen half-updated;
    /// - other type: ipset cannot swap across types, so the set is destroyed and created again.
    ///   That fails, naming the set, when iptables still refers to it; the calc graph names sets
    ///   by content, so a type change under the same name does not happen in practice.
    ///
    /// A set's `kind` of `None` means: the kernel set's type if it exists, else `hash:ip,port`
    /// when a member holds a `,`, else `hash:net`. A member that is not valid for the type is
    /// skipped with a warning; a `hash:net` `0.0.0.0/0` (which ipset rejects) is written as the
    /// two /1 halves.
    ///
    /// # Errors
    ///
    /// [`DataplaneError::Command`], [`DataplaneError::Run`] or [`DataplaneError::Timeout`]
    /// when `ipset` fails or cannot run (the cache is dropped); [`DataplaneError::InvalidIpsets`]
    /// when a set name does not start with [`IPSET_PREFIX`], is longer than [`MAX_IPSET_NAME`]
    /// or is not printable ASCII (then nothing is written).
    pub async fn apply_updates(
        &mut self,
        sets: &BTreeMap<String, IpSet>,
        dirty: &Dirty,
    ) -> Result<ApplyStats, DataplaneError> {
        let (kernel, fresh) = match self.cache.take() {
            Some(cache) => (cache, false),
            None => (self.read_kernel().await?, true),
        };
        let names: Vec<&String> = if dirty.all_ipsets || fresh {
            sets.keys().collect()
        } else {
            dirty
                .ipsets
                .iter()
                .filter(|n| sets.contains_key(*n))
                .collect()
        };
        let plan = match plan_updates(&kernel, sets, names) {
            Ok(plan) => plan,
            Err(source) => {
                self.cache = Some(kernel);
                return Err(DataplaneError::InvalidIpsets {
                    program: self.cfg.ipset.clone(),
                    source,
                });
            }
        };
        self.run_plan(kernel, plan).await
    }

    /// Destroys the sets of ours (names starting with [`IPSET_PREFIX`] or
    /// [`IPSET_TEMP_PREFIX`], so leftover temporary sets too) that are not in `sets`. Call it
    /// once iptables no longer refers to them.
    ///
    /// # Errors
    ///
    /// [`DataplaneError::Command`] when some sets could not be destroyed (still referenced by a
    /// rule the agent does not own, say): the others are destroyed anyway, and the message
    /// names each failure. [`DataplaneError::Run`] or [`DataplaneError::Timeout`] when `ipset`
    /// cannot run. Either way the cache is dropped.
    pub async fn apply_deletions(
        &mut self,
        sets: &BTreeMap<String, IpSet>,
    ) -> Result<ApplyStats, DataplaneError> {
        let mut kernel = match self.cache.take() {
            Some(cache) => cache,
            None => self.read_kernel().await?,
        };
        let plan = plan_deletions(&kernel, sets);
        if plan.gone.is_empty() {
            self.cache = Some(kernel);
            return Ok(ApplyStats::default());
        }
        // ipset restore stops at the first failing line, after applying those before it: go
        // on after it, so one set that cannot go does not keep the others.
        let lines: Vec<&str> = plan.text.lines().collect();
        let mut stats = ApplyStats::default();
        let mut failures = Vec::new();
        let mut start = 0;
        while let Some(rest) = lines.get(start..).filter(|rest| !rest.is_empty()) {
            let input = rest.iter().map(|l| format!("{l}\n")).collect::<String>();
            stats.ipset_bytes += input.len() as u64;
            match self.restore(&input).await {
                Ok(()) => break,
                Err(DataplaneError::Command { message, .. }) => {
                    let skip = failed_line(&message).filter(|n| *n >= 1 && *n <= rest.len());
                    failures.push(message);
                    match skip {
                        Some(n) => start += n,
                        None => break,
                    }
                }
                Err(other) => {
                    // ipset itself did not run (or not to the end): that is the error; the
                    // refusals before it go to the log.
                    if !failures.is_empty() {
                        tracing::warn!(
                            failures = %failures.join("; "),
                            "ipsets not destroyed before ipset failed to run"
                        );
                    }
                    return Err(other);
                }
            }
        }
        if !failures.is_empty() {
            return Err(DataplaneError::Command {
                program: self.cfg.ipset.clone(),
                message: failures.join("; "),
            });
        }
        for name in &plan.gone {
            kernel.remove(name);
        }
        tracing::debug!(destroyed = plan.gone.len(), "ipsets destroyed");
        self.cache = Some(kernel);
        Ok(stats)
    }

    /// Forgets the cache: the next call re-reads the kernel with `ipset save` and looks at
    /// every desired set, so it repairs anything changed behind the agent's back.
    pub fn invalidate(&mut self) {
        self.cache = None;
    }

    /// The `ipset restore` input that bringing the kernel to `sets` would take now, every set
    /// taken as dirty: [`IpsetManager::apply_updates`]'s, then
    /// [`IpsetManager::apply_deletions`]'s. Against the cache, or with no cache as if the
    /// kernel had no set of ours. A single `# invalid desired state: ...` comment line when
    /// `apply_updates` would refuse `sets`. For `--dry-run`.
    pub fn plan(&self, sets: &BTreeMap<String, IpSet>) -> String {
        let empty = BTreeMap::new();
        let kernel = self.cache.as_ref().unwrap_or(&empty);
        match plan_updates(kernel, sets, sets.keys().collect()) {
            Ok(updates) => updates.text + &plan_deletions(kernel, sets).text,
            Err(e) => format!("# invalid desired state: {e}\n"),
        }
    }

    async fn read_kernel(&self) -> Result<BTreeMap<String, KernelSet>, DataplaneError> {
        let out = run_command(&self.cfg.command_prefix, &self.cfg.ipset, &["save"], None).await?;
        Ok(parse_save(&String::from_utf8_lossy(&out)))
    }

    /// Runs `plan` (if it has anything in it) and records its outcome in the cache.
    async fn run_plan(
        &mut self,
        mut kernel: BTreeMap<String, KernelSet>,
        plan: Plan,
    ) -> Result<ApplyStats, DataplaneError> {
        if !plan.text.is_empty() {
            self.restore(&plan.text).await?;
            tracing::debug!(
                bytes = plan.text.len(),
                members_changed = plan.members_changed,
                "ipsets updated"
            );
        }
        for name in &plan.gone {
            kernel.remove(name);
        }
        kernel.extend(plan.written);
        self.cache = Some(kernel);
        Ok(ApplyStats {
            ipset_bytes: plan.text.len() as u64,
            ipset_members_changed: plan.members_changed,
            ..ApplyStats::default()
        })
    }

    /// One `ipset -exist restore`; on failure drops the cache.
    async fn restore(&mut self, input: &str) -> Result<(), DataplaneError> {
        let result = run_command(
            &self.cfg.command_prefix,
            &self.cfg.ipset,
            &["-exist", "restore"],
            Some(input.as_bytes()),
        )
        .await;
        if result.is_err() {
            self.cache = None;
        }
        result.map(drop)
    }
}

fn is_ours(name: &str) -> bool {
    name.starts_with(IPSET_PREFIX) || name.starts_with(IPSET_TEMP_PREFIX)
}

/// The temporary set a set is rebuilt in: same name, [`IPSET_TEMP_PREFIX`] instead of
/// [`IPSET_PREFIX`] (so the same length).
fn temp_name(name: &str) -> String {
    format!(
        "{IPSET_TEMP_PREFIX}{}",
        name.strip_prefix(IPSET_PREFIX).unwrap_or(name)
    )
}

fn kind_of(printed: &str) -> Option<IpSetKind> {
    [IpSetKind::HashNet, IpSetKind::HashIpPort]
        .into_iter()
        .find(|k| k.as_str() == printed)
}

/// A member in the form `ipset save` prints it, or `None` if it is not valid for `kind`:
/// `a.b.c.d` or `a.b.c.d/n` (host bits cleared) for `hash:net`, `a.b.c.d,proto:port` for
/// `hash:ip,port` (protocol `tcp` when absent, numeric port).
fn canonical_member(kind: IpSetKind, member: &str) -> Option<String> {
    match kind {
        IpSetKind::HashNet => parse_net(member).map(|net| canonical_net(&net)),
        IpSetKind::HashIpPort => {
            let (ip, port) = member.split_once(',')?;
            let ip: Ipv4Addr = ip.parse().ok()?;
            let (proto, port) = port.split_once(':').unwrap_or(("tcp", port));
            let proto = proto.to_ascii_lowercase();
            if !["tcp", "udp", "sctp", "udplite"].contains(&proto.as_str()) {
                return None;
            }
            let port: u16 = port.parse().ok()?;
            Some(format!("{ip},{proto}:{port}"))
        }
    }
}

fn parse_net(text: &str) -> Option<Ipv4Net> {
    if text.contains('/') {
        text.parse().ok()
    } else {
        text.parse::<Ipv4Addr>().ok().map(Ipv4Net::from)
    }
}

/// A desired set's members as they will be written (and as `ipset save` will print them).
fn desired_members(name: &str, kind: IpSetKind, members: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for member in members {
        match canonical_member(kind, member) {
            // hash:net cannot hold a /0; two /1s match the same.
            Some(m) if kind == IpSetKind::HashNet && m.ends_with("/0") => {
                out.extend(["0.0.0.0/1".to_owned(), "128.0.0.0/1".to_owned()]);
            }
            Some(m) => {
                out.insert(m);
            }
            None => tracing::warn!(
                set = name,
                member,
                kind = kind.as_str(),
                "ipset member not valid for the set's type; skipped"
            ),
        }
    }
    out
}

fn check_name(name: &str) -> Result<(), InvalidIpset> {
    if !name.starts_with(IPSET_PREFIX) {
        return Err(InvalidIpset::NotOurs(name.to_owned()));
    }
    if name.len() > MAX_IPSET_NAME || !name.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(InvalidIpset::Name(name.to_owned()));
    }
    Ok(())
}

fn create_line(name: &str, kind: IpSetKind) -> String {
    format!(
        "create {name} {} family inet maxelem {MAX_ELEMENTS}\n",
        kind.as_str()
    )
}

/// The restore input that brings the sets `names` (each in `sets`) from `kernel` to `sets`.
fn plan_updates(
    kernel: &BTreeMap<String, KernelSet>,
    sets: &BTreeMap<String, IpSet>,
    names: Vec<&String>,
) -> Result<Plan, InvalidIpset> {
    let mut plan = Plan::default();
    let mut text = String::new();
    for name in names {
        let Some(set) = sets.get(name) else { continue };
        check_name(name)?;
        let have = kernel.get(name);
        let inferred = if set.members.iter().any(|m| m.contains(',')) {
            IpSetKind::HashIpPort
        } else {
            IpSetKind::HashNet
        };
        let kind = set
            .kind
            .or_else(|| have.and_then(|h| kind_of(&h.kind)))
            .unwrap_or(inferred);
        let want = desired_members(name, kind, &set.members);
        let mut line = |text: &mut String, verb: &str, set_name: &str, member: &str| {
            text.push_str(&format!("{verb} {set_name} {member}\n"));
            plan.members_changed += 1;
        };
        match have {
            None => {
                text.push_str(&create_line(name, kind));
                for m in &want {
                    line(&mut text, "add", name, m);
                }
            }
            Some(have) if have.kind == kind.as_str() => {
                let dels: Vec<&String> = have.members.difference(&want).collect();
                let adds: Vec<&String> = want.difference(&have.members).collect();
                if dels.len() + adds.len() > want.len() {
                    let temp = temp_name(name);
                    if kernel.contains_key(&temp) {
                        text.push_str(&format!("destroy {temp}\n"));
                    }
                    text.push_str(&create_line(&temp, kind));
                    for m in &want {
                        line(&mut text, "add", &temp, m);
                    }
                    text.push_str(&format!("swap {temp} {name}\ndestroy {temp}\n"));
                    plan.gone.push(temp);
                } else {
                    for m in dels {
                        line(&mut text, "del", name, m);
                    }
                    for m in adds {
                        line(&mut text, "add", name, m);
                    }
                }
            }
            Some(_) => {
                text.push_str(&format!("destroy {name}\n"));
                text.push_str(&create_line(name, kind));
                for m in &want {
                    line(&mut text, "add", name, m);
                }
            }
        }
        plan.written.push((
            name.clone(),
            KernelSet {
                kind: kind.as_str().to_owned(),
                members: want,
            },
        ));
    }
    plan.text = text;
    Ok(plan)
}

/// `destroy` lines for the sets of ours in `kernel` that are not in `sets`.
fn plan_deletions(kernel: &BTreeMap<String, KernelSet>, sets: &BTreeMap<String, IpSet>) -> Plan {
    let mut plan = Plan::default();
    for name in kernel.keys() {
        if is_ours(name) && !sets.contains_key(name) {
            plan.text.push_str(&format!("destroy {name}\n"));
            plan.gone.push(name.clone());
        }
    }
    plan
}

/// Reads `ipset save` output: the sets of ours, with their members normalised. Lines it does
/// not understand are skipped.
fn parse_save(text: &str) -> BTreeMap<String, KernelSet> {
    let mut sets = BTreeMap::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("create"), Some(name), Some(kind)) if is_ours(name) => {
                sets.insert(
                    name.to_owned(),
                    KernelSet {
                        kind: kind.to_owned(),
                        members: BTreeSet::new(),
                    },
                );
            }
            (Some("add"), Some(name), Some(member)) => {
                if let Some(set) = sets.get_mut(name) {
                    let member = kind_of(&set.kind)
                        .and_then(|k| canonical_member(k, member))
                        .unwrap_or_else(|| member.to_owned());
                    set.members.insert(member);
                }
            }
            _ => {}
        }
    }
    sets
}

#[cfg(test)]
mod tests;
