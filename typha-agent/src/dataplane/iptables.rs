//! iptables: the filter table's `cali-*` chains and the hook rules that jump into them, kept
//! in step with [`Desired`](super::Desired) by `iptables-restore --noflush` transactions.
//!
//! The design is Felix's: every rule the agent writes carries a comment `cali:<hash>`, and
//! the agent recognises its rules in `iptables-save` output by those hashes alone, never by
//! comparing rule texts (iptables prints rules normalised: `-s 1.2.3.4` comes back as
//! `-s 1.2.3.4/32`, options reordered). A rule's hash covers its chain, the previous rule's
//! hash and its text, so it also pins the rule's position.
//!
//! [`IptablesManager`] caches what it last wrote and diffs the next desired state against
//! that cache; [`IptablesManager::invalidate`] drops the cache so the next apply re-reads the
//! kernel (periodic resync, and automatically after any failure). Each apply is a single
//! `iptables-restore` transaction, which the kernel applies all or nothing (verified on
//! iptables-nft 1.8.9: a failing line leaves no earlier line applied).
//!
//! Ownership: chains whose names start with [`CHAIN_PREFIX`] belong to the agent entirely;
//! in any other chain only rules carrying a [`RULE_COMMENT_PREFIX`] comment (the hooks) are
//! ever deleted or inserted. Foreign chains and foreign rules are never touched.

use std::collections::{BTreeMap, BTreeSet};

use super::command::run_command;
use super::error::DataplaneError;
pub use super::error::InvalidChains;
use super::names::{CHAIN_PREFIX, MAX_CHAIN_NAME, RULE_COMMENT_PREFIX};
use super::{ApplyStats, Hook, hash_b64};

/// Length of the hash in a rule's `cali:<hash>` comment.
const HASH_LEN: usize = 16;

/// How to run the iptables helpers.
#[derive(Debug, Clone)]
pub struct IptablesConfig {
    /// Words put before every command (tests use `["ip", "netns", "exec", "<ns>"]`); empty
    /// by default.
    pub command_prefix: Vec<String>,
    /// The restore program; `iptables-restore` by default.
    pub restore: String,
    /// The save program; `iptables-save` by default.
    pub save: String,
}

impl Default for IptablesConfig {
    fn default() -> Self {
        Self {
            command_prefix: Vec::new(),
            restore: "iptables-restore".to_owned(),
            save: "iptables-save".to_owned(),
        }
    }
}

/// Keeps the filter table's `cali-*` chains and hook rules equal to a desired state.
///
/// A chain whose rules differ in any way is rewritten whole (declared again, which flushes
/// it, then all its rules appended) rather than edited rule by rule as Felix does: simpler,
/// and the transaction makes the rewrite atomic.
#[derive(Debug)]
pub struct IptablesManager {
    cfg: IptablesConfig,
    /// What the kernel holds, as of the last successful apply; `None`: read it again.
    cache: Option<TableState>,
    /// Whether `iptables-restore` takes `--wait` (older versions reject it).
    restore_waits: bool,
}

/// The part of the filter table that concerns the agent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct TableState {
    /// Each `cali-*` chain: its rules' hashes in order, `None` for a rule without our comment.
    chains: BTreeMap<String, Vec<Option<String>>>,
    /// Each other chain holding rules of ours (the hooks).
    hooks: BTreeMap<String, HookChain>,
}

/// Our rules in a chain we do not own.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HookChain {
    /// Our rules, in order.
    ours: Vec<OurRule>,
    /// Whether ours are the first rules of the chain, with no foreign rule before or among them.
    at_top: bool,
}

/// One rule of ours in a chain we do not own.
#[derive(Debug, Clone, PartialEq, Eq)]
struct OurRule {
    /// The hash in its comment.
    hash: String,
    /// The rule as `iptables-save` printed it (or as we wrote it), after the chain name:
    /// what `-D <chain>` takes to delete it.
    spec: String,
}

/// One transaction, and the state the kernel will be in once it succeeds.
#[derive(Debug)]
struct Plan {
    /// `iptables-restore` input; empty when there is nothing to do.
    text: String,
    chains_written: u64,
    chains_deleted: u64,
    after: TableState,
}

impl IptablesManager {
    /// A manager with no cache: the first apply reads the kernel.
    pub fn new(cfg: IptablesConfig) -> Self {
        Self {
            cfg,
            cache: None,
            restore_waits: true,
        }
    }

    /// Brings the filter table's `cali-*` chains and the hook rules to `chains`/`hooks`.
    ///
    /// `chains` maps chain names (each starting with [`CHAIN_PREFIX`]) to rule texts, what
    /// follows `-A <chain>`; `hooks` are inserted at the top of their (built-in) chains, in the
    /// order given. `cali-*` chains not in `chains` are deleted, and so are rules of ours in
    /// other chains that are not in `hooks`. Nothing is run when the cache shows nothing to do.
    ///
    /// # Errors
    ///
    /// [`DataplaneError::Command`], [`DataplaneError::Run`] or [`DataplaneError::Timeout`]
    /// when `iptables-save` or `iptables-restore` fails or cannot run (the cache is dropped:
    /// the next apply re-reads the kernel); [`DataplaneError::InvalidChains`] when the desired
    /// state is malformed (a chain name without the prefix or too long, a control character in
    /// a rule text, a hook into a `cali-*` chain), and then nothing is written.
    pub async fn apply(
        &mut self,
        chains: &BTreeMap<String, Vec<String>>,
        hooks: &[Hook],
    ) -> Result<ApplyStats, DataplaneError> {
        // Taken, not borrowed: if this future is dropped half-way, the next apply re-reads.
        let kernel = match self.cache.take() {
            Some(cache) => cache,
            None => self.read_kernel().await?,
        };
        let plan = match diff(&kernel, chains, hooks) {
            Ok(plan) => plan,
            Err(source) => {
                self.cache = Some(kernel);
                return Err(DataplaneError::InvalidChains {
                    program: self.cfg.restore.clone(),
                    source,
                });
            }
        };
        if plan.text.is_empty() {
            self.cache = Some(plan.after);
            return Ok(ApplyStats::default());
        }
        self.restore(&plan.text).await?;
        tracing::debug!(
            bytes = plan.text.len(),
            chains_written = plan.chains_written,
            chains_deleted = plan.chains_deleted,
            "iptables updated"
        );
        self.cache = Some(plan.after);
        Ok(ApplyStats {
            iptables_bytes: plan.text.len() as u64,
            chains_written: plan.chains_written,
            chains_deleted: plan.chains_deleted,
            ..ApplyStats::default()
        })
    }

    /// Forgets the cache: the next apply re-reads the kernel with `iptables-save`, and so
    /// repairs anything changed behind the agent's back.
    pub fn invalidate(&mut self) {
        self.cache = None;
    }

    /// The `iptables-restore` input that [`IptablesManager::apply`] would write now: against
    /// the cache, or with no cache as if the kernel had none of our chains or hooks. Empty when
    /// there is nothing to do; a single `# invalid desired state: ...` comment line when
    /// `apply` would refuse the desired state. For `--dry-run`.
    pub fn plan(&self, chains: &BTreeMap<String, Vec<String>>, hooks: &[Hook]) -> String {
        let empty = TableState::default();
        match diff(self.cache.as_ref().unwrap_or(&empty), chains, hooks) {
            Ok(plan) => plan.text,
            Err(e) => format!("# invalid desired state: {e}\n"),
        }
    }

    async fn read_kernel(&self) -> Result<TableState, DataplaneError> {
        let out = run_command(
            &self.cfg.command_prefix,
            &self.cfg.save,
            &["-t", "filter"],
            None,
        )
        .await?;
        Ok(parse_save(&String::from_utf8_lossy(&out)))
    }

    /// Runs one transaction; on failure drops the cache.
    async fn restore(&mut self, input: &str) -> Result<(), DataplaneError> {
        let mut result = self.run_restore(input).await;
        if let Err(DataplaneError::Command { message, .. }) = &result {
            // iptables before 1.6.2 has no --wait for restore; it then takes no lock either.
            if self.restore_waits
                && message.contains("unrecognized option")
                && message.contains("wait")
            {
                tracing::debug!("iptables-restore rejects --wait; running without it");
                self.restore_waits = false;
                result = self.run_restore(input).await;
            }
        }
        if result.is_err() {
            self.cache = None;
        }
        result
    }

    async fn run_restore(&self, input: &str) -> Result<(), DataplaneError> {
        let mut args = vec!["--noflush"];
        if self.restore_waits {
            args.extend(["--wait", "10"]);
        }
        run_command(
            &self.cfg.command_prefix,
            &self.cfg.restore,
            &args,
            Some(input.as_bytes()),
        )
        .await
        .map(drop)
    }
}

/// The hashes of a chain's rules, each covering the chain, the previous hash and the rule.
fn chain_hashes(chain: &str, rules: &[String]) -> Vec<String> {
    let mut prev = String::new();
    rules
        .iter()
        .map(|rule| {
            let hash = hash_b64(&[chain, &prev, rule], HASH_LEN);
            prev.clone_from(&hash);
            hash
        })
        .collect()
}

/// The hash of a hook rule.
fn hook_hash(hook: &Hook) -> String {
    hash_b64(&[&hook.chain, &hook.rule], HASH_LEN)
}

/// A rule's text followed by its comment, as written after `-A <chain>`.
fn with_comment(rule: &str, hash: &str) -> String {
    if rule.is_empty() {
        format!("-m comment --comment \"{RULE_COMMENT_PREFIX}{hash}\"")
    } else {
        format!("{rule} -m comment --comment \"{RULE_COMMENT_PREFIX}{hash}\"")
    }
}

fn check_chain_name(name: &str) -> Result<(), InvalidChains> {
    if name.len() > MAX_CHAIN_NAME || !name.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(InvalidChains::ChainName(name.to_owned()));
    }
    Ok(())
}

fn check_rule(chain: &str, rule: &str) -> Result<(), InvalidChains> {
    if rule.chars().any(char::is_control) {
        return Err(InvalidChains::ControlCharacter {
            chain: chain.to_owned(),
            rule: rule.to_owned(),
        });
    }
    Ok(())
}

/// The transaction that takes the kernel from `kernel` to `chains`/`hooks`.
///
/// Order inside it: every chain to write is declared first (so rules may jump to chains
/// created in the same transaction; iptables-nft rejects forward references), then the
/// rewritten chains' rules, then stale chains are flushed, then stale hooks deleted and
/// desired ones inserted, and only then stale chains deleted, once nothing refers to them.
fn diff(
    kernel: &TableState,
    chains: &BTreeMap<String, Vec<String>>,
    hooks: &[Hook],
) -> Result<Plan, InvalidChains> {
    let mut decls = String::new();
    let mut body = String::new();
    let mut hook_lines = String::new();
    let mut deletes = String::new();
    let mut after = TableState::default();
    let mut chains_written = 0;
    let mut chains_deleted = 0;

    for (name, rules) in chains {
        if !name.starts_with(CHAIN_PREFIX) {
            return Err(InvalidChains::NotOurs(name.clone()));
        }
        check_chain_name(name)?;
        for rule in rules {
            check_rule(name, rule)?;
        }
        let want = chain_hashes(name, rules);
        let same = kernel.chains.get(name).is_some_and(|have| {
            have.iter()
                .map(Option::as_deref)
                .eq(want.iter().map(|h| Some(h.as_str())))
        });
        if !same {
            // A declaration of an existing chain flushes it, with --noflush too (verified on
            // iptables-nft 1.8.9; iptables-legacy's restore does the same).
            decls.push_str(&format!(":{name} - [0:0]\n"));
            for (rule, hash) in rules.iter().zip(&want) {
                body.push_str(&format!("-A {name} {}\n", with_comment(rule, hash)));
            }
            chains_written += 1;
        }
        after
            .chains
            .insert(name.clone(), want.into_iter().map(Some).collect());
    }
    for name in kernel.chains.keys() {
        if !chains.contains_key(name) {
            body.push_str(&format!("-F {name}\n"));
            deletes.push_str(&format!("-X {name}\n"));
            chains_deleted += 1;
        }
    }

    let mut wanted: BTreeMap<&str, Vec<(&Hook, String)>> = BTreeMap::new();
    for hook in hooks {
        if hook.chain.starts_with(CHAIN_PREFIX)
            || hook.chain.is_empty()
            || hook.chain.starts_with('-')
        {
            return Err(InvalidChains::HookChain(hook.chain.clone()));
        }
        check_chain_name(&hook.chain)?;
        check_rule(&hook.chain, &hook.rule)?;
        wanted
            .entry(&hook.chain)
            .or_default()
            .push((hook, hook_hash(hook)));
    }
    let hook_chains: BTreeSet<&str> = kernel
        .hooks
        .keys()
        .map(String::as_str)
        .chain(wanted.keys().copied())
        .collect();
    for chain in hook_chains {
        let want = wanted.get(chain).map(Vec::as_slice).unwrap_or_default();
        let have = kernel.hooks.get(chain);
        let in_place = have.is_none_or(|h| h.at_top)
            && have
                .map(|h| h.ours.as_slice())
                .unwrap_or_default()
                .iter()
                .map(|r| r.hash.as_str())
                .eq(want.iter().map(|(_, hash)| hash.as_str()));
        let ours: Vec<OurRule> = want
            .iter()
            .map(|(hook, hash)| OurRule {
                hash: hash.clone(),
                spec: with_comment(&hook.rule, hash),
            })
            .collect();
        if !in_place {
            for rule in have.map(|h| h.ours.as_slice()).unwrap_or_default() {
                hook_lines.push_str(&format!("-D {chain} {}\n", rule.spec));
            }
            for rule in ours.iter().rev() {
                hook_lines.push_str(&format!("-I {chain} 1 {}\n", rule.spec));
            }
        }
        if !ours.is_empty() {
            after
                .hooks
                .insert(chain.to_owned(), HookChain { ours, at_top: true });
        }
    }

    let text = if decls.is_empty() && body.is_empty() && hook_lines.is_empty() && deletes.is_empty()
    {
        String::new()
    } else {
        format!("*filter\n{decls}{body}{hook_lines}{deletes}COMMIT\n")
    };
    Ok(Plan {
        text,
        chains_written,
        chains_deleted,
        after,
    })
}

/// Reads `iptables-save` output (its `*filter` table): our chains, and our rules elsewhere.
/// Lines it does not understand are skipped.
fn parse_save(text: &str) -> TableState {
    let mut state = TableState::default();
    // For each chain we do not own: whether a foreign rule has been seen in it yet.
    let mut foreign_seen: BTreeMap<&str, bool> = BTreeMap::new();
    let mut in_filter = false;
    for line in text.lines() {
        let line = line.trim_end();
        if let Some(table) = line.strip_prefix('*') {
            in_filter = table == "filter";
        } else if !in_filter {
            // Another table's line: not ours to read.
        } else if line == "COMMIT" {
            in_filter = false;
        } else if let Some(decl) = line.strip_prefix(':') {
            let name = decl.split_whitespace().next().unwrap_or_default();
            if name.starts_with(CHAIN_PREFIX) {
                state.chains.entry(name.to_owned()).or_default();
            }
        } else if let Some(rule) = line.strip_prefix("-A ") {
            let (chain, spec) = rule.split_once(' ').unwrap_or((rule, ""));
            let hash = comment_hash(spec);
            if chain.starts_with(CHAIN_PREFIX) {
                state.chains.entry(chain.to_owned()).or_default().push(hash);
                continue;
            }
            let seen = foreign_seen.entry(chain).or_insert(false);
            match hash {
                Some(hash) => {
                    let hooks = state.hooks.entry(chain.to_owned()).or_insert(HookChain {
                        ours: Vec::new(),
                        at_top: true,
                    });
                    hooks.at_top &= !*seen;
                    hooks.ours.push(OurRule {
                        hash,
                        spec: spec.to_owned(),
                    });
                }
                None => *seen = true,
            }
        }
    }
    state
}

/// The hash of the first `cali:` comment in a rule spec, quoted or not.
fn comment_hash(spec: &str) -> Option<String> {
    let words = split_words(spec);
    let mut words = words.iter();
    while let Some(word) = words.next() {
        if word == "--comment"
            && let Some(hash) = words
                .next()
                .and_then(|c| c.strip_prefix(RULE_COMMENT_PREFIX))
            && !hash.is_empty()
        {
            return Some(hash.to_owned());
        }
    }
    None
}

/// Splits a rule spec into words as iptables-restore does: whitespace separates, double
/// quotes group, a backslash inside quotes escapes the next character.
fn split_words(spec: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quoted = false;
    let mut chars = spec.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                quoted = !quoted;
                in_word = true;
            }
            '\\' if quoted => {
                if let Some(next) = chars.next() {
                    word.push(next);
                }
            }
            c if c.is_whitespace() && !quoted => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

#[cfg(test)]
mod tests;
