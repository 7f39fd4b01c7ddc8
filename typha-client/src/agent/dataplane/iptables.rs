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
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use super::{
    ApplyStats, CHAIN_PREFIX, DataplaneError, Hook, MAX_CHAIN_NAME, RULE_COMMENT_PREFIX, hash_b64,
};

/// Length of the hash in a rule's `cali:<hash>` comment.
const HASH_LEN: usize = 16;
/// How long a helper program may run before it is killed.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// Cap on the helper output kept in an error message.
const MAX_MESSAGE: usize = 2048;

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
    /// [`DataplaneError::Command`] when `iptables-save` or `iptables-restore` cannot run or
    /// fails (the cache is dropped: the next apply re-reads the kernel), or when the desired
    /// state is malformed (a chain name without the prefix or too long, a control character in
    /// a rule text, a hook into a `cali-*` chain); then nothing is written.
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
            Err(message) => {
                self.cache = Some(kernel);
                return Err(DataplaneError::Command {
                    program: self.cfg.restore.clone(),
                    message: format!("invalid desired state: {message}"),
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
            Err(message) => format!("# invalid desired state: {message}\n"),
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

fn check_chain_name(name: &str) -> Result<(), String> {
    if name.len() > MAX_CHAIN_NAME || !name.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "chain name {name:?} is longer than {MAX_CHAIN_NAME} or not printable ASCII"
        ));
    }
    Ok(())
}

fn check_rule(chain: &str, rule: &str) -> Result<(), String> {
    if rule.chars().any(char::is_control) {
        return Err(format!(
            "a rule of chain {chain} holds a control character: {rule:?}"
        ));
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
) -> Result<Plan, String> {
    let mut decls = String::new();
    let mut body = String::new();
    let mut hook_lines = String::new();
    let mut deletes = String::new();
    let mut after = TableState::default();
    let mut chains_written = 0;
    let mut chains_deleted = 0;

    for (name, rules) in chains {
        if !name.starts_with(CHAIN_PREFIX) {
            return Err(format!("chain {name:?} does not start with {CHAIN_PREFIX}"));
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
            return Err(format!(
                "hook chain {:?} is not a chain outside {CHAIN_PREFIX}*",
                hook.chain
            ));
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

/// Runs `prefix... program args...`, writing `input` to its stdin (concurrently with reading
/// its output, so a large input cannot deadlock), and returns its stdout.
///
/// # Errors
///
/// [`DataplaneError::Command`] naming `program` when it cannot start, times out
/// ([`COMMAND_TIMEOUT`]) or exits with failure; the message is its stderr, trimmed, with the
/// input line it complains about (`line N`) appended, capped at about 2 KB.
pub(super) async fn run_command(
    prefix: &[String],
    program: &str,
    args: &[&str],
    input: Option<&[u8]>,
) -> Result<Vec<u8>, DataplaneError> {
    let fail = |message: String| DataplaneError::Command {
        program: program.to_owned(),
        message: cap(message),
    };
    let (exe, pre_args) = match prefix.split_first() {
        Some((exe, rest)) => (exe.as_str(), rest),
        None => (program, &[][..]),
    };
    let mut cmd = tokio::process::Command::new(exe);
    cmd.args(pre_args);
    if !prefix.is_empty() {
        cmd.arg(program);
    }
    cmd.args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .map_err(|e| fail(format!("cannot run {exe}: {e}")))?;
    let stdin = child.stdin.take();
    let write = async move {
        if let (Some(mut pipe), Some(data)) = (stdin, input) {
            pipe.write_all(data).await?;
            pipe.shutdown().await?;
        }
        Ok::<(), std::io::Error>(())
    };
    let both = async { tokio::join!(write, child.wait_with_output()) };
    let (written, output) = tokio::time::timeout(COMMAND_TIMEOUT, both)
        .await
        .map_err(|_| fail(format!("timed out after {}s", COMMAND_TIMEOUT.as_secs())))?;
    let output = output.map_err(|e| fail(format!("waiting for {exe}: {e}")))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let mut message = stderr.trim().to_owned();
        if message.is_empty() {
            message = format!("exited with {}", output.status);
        }
        if let Some(text) = input.map(String::from_utf8_lossy)
            && let Some(n) = failed_line(&message)
            && let Some(line) = n.checked_sub(1).and_then(|i| text.lines().nth(i))
        {
            let line: String = line.chars().take(300).collect();
            message.push_str(&format!(" (input line {n}: {line})"));
        }
        return Err(fail(message));
    }
    written.map_err(|e| fail(format!("writing to stdin: {e}")))?;
    Ok(output.stdout)
}

/// The input line a restore program complains about: the number after the first `line`
/// (`Error in line 2:`, `line 5 failed`, `Error occurred at line: 7`).
pub(super) fn failed_line(message: &str) -> Option<usize> {
    message.match_indices("line").find_map(|(i, word)| {
        let rest = message.get(i + word.len()..)?;
        let digits: String = rest
            .trim_start_matches([' ', ':'])
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    })
}

/// Cuts a message to [`MAX_MESSAGE`] bytes, on a character boundary.
fn cap(mut message: String) -> String {
    if message.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push_str("...");
    }
    message
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    /// `iptables-save -t filter` on this machine (iptables 1.8.9, nf_tables), after a restore
    /// of our chains, two hooks, a foreign chain and foreign rules (one with a comment that
    /// quotes `cali:`).
    const SAVE: &str = r#"# Generated by iptables-save v1.8.9 (nf_tables) on Sun Nov 22 05:56:33 2026
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:FOO-chain - [0:0]
:cali-FORWARD - [0:0]
:cali-pi-web - [0:0]
-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT
-A INPUT -m comment --comment "cali:In1In2In3In4In5I" -j cali-FORWARD
-A FORWARD -m comment --comment "cali:Hk1Hk2Hk3Hk4Hk5H" -j cali-FORWARD
-A FORWARD -j FOO-chain
-A FORWARD -s 1.2.3.4/32 -m comment --comment "not ours" -j ACCEPT
-A OUTPUT -m comment --comment "say \"cali:fake\" here" -j ACCEPT
-A FOO-chain -s 10.9.0.0/16 -j ACCEPT
-A cali-FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment "cali:Ab3-_xYz0123456a" -j ACCEPT
-A cali-FORWARD -m comment --comment "cali:Qw9_Rt-7Yu8Io0Pa" -j cali-pi-web
-A cali-FORWARD -j DROP
-A cali-pi-web -m set --match-set cali40s:abc src -m comment --comment "cali:Zx1Cv2Bn3Mm4Ll5K" -j ACCEPT
COMMIT
# Completed on Sun Nov 22 05:56:33 2026
"#;

    fn some(hashes: &[&str]) -> Vec<Option<String>> {
        hashes.iter().map(|h| Some((*h).to_owned())).collect()
    }

    fn chains(list: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        list.iter()
            .map(|(name, rules)| {
                (
                    (*name).to_owned(),
                    rules.iter().map(|r| (*r).to_owned()).collect(),
                )
            })
            .collect()
    }

    fn hook(chain: &str, rule: &str) -> Hook {
        Hook {
            chain: chain.to_owned(),
            rule: rule.to_owned(),
        }
    }

    /// The state a successful apply of `chains`/`hooks` leaves in the cache.
    fn applied(chains: &BTreeMap<String, Vec<String>>, hooks: &[Hook]) -> TableState {
        diff(&TableState::default(), chains, hooks).unwrap().after
    }

    #[test]
    fn parses_real_save_output() {
        let state = parse_save(SAVE);
        assert_eq!(
            state.chains,
            BTreeMap::from([
                (
                    "cali-FORWARD".to_owned(),
                    vec![
                        Some("Ab3-_xYz0123456a".to_owned()),
                        Some("Qw9_Rt-7Yu8Io0Pa".to_owned()),
                        None
                    ]
                ),
                ("cali-pi-web".to_owned(), some(&["Zx1Cv2Bn3Mm4Ll5K"])),
            ])
        );
        // INPUT's hook follows a foreign rule: not at the top. OUTPUT's comment only
        // mentions cali: inside a longer text, so it is not ours.
        assert_eq!(
            state.hooks,
            BTreeMap::from([
                (
                    "FORWARD".to_owned(),
                    HookChain {
                        ours: vec![OurRule {
                            hash: "Hk1Hk2Hk3Hk4Hk5H".to_owned(),
                            spec: "-m comment --comment \"cali:Hk1Hk2Hk3Hk4Hk5H\" -j cali-FORWARD"
                                .to_owned(),
                        }],
                        at_top: true,
                    }
                ),
                (
                    "INPUT".to_owned(),
                    HookChain {
                        ours: vec![OurRule {
                            hash: "In1In2In3In4In5I".to_owned(),
                            spec: "-m comment --comment \"cali:In1In2In3In4In5I\" -j cali-FORWARD"
                                .to_owned(),
                        }],
                        at_top: false,
                    }
                ),
            ])
        );
    }

    #[test]
    fn parses_unquoted_comments_and_ignores_other_tables() {
        let text = "*nat\n:cali-nat - [0:0]\n-A cali-nat -m comment --comment cali:NAT -j ACCEPT\nCOMMIT\n\
                    *filter\n:cali-x - [0:0]\n-A cali-x -m comment --comment cali:abc -j ACCEPT\n\
                    -A cali-x -m comment --comment \"cali:\" -j DROP\nCOMMIT\n";
        let state = parse_save(text);
        assert_eq!(
            state.chains,
            BTreeMap::from([("cali-x".to_owned(), vec![Some("abc".to_owned()), None])])
        );
        assert!(parse_save("").chains.is_empty());
        assert!(
            parse_save("garbage\n-A\n:\n*filter\n-A \n-A x\n:cali-")
                .chains
                .contains_key("cali-")
        );
    }

    #[test]
    fn splits_words_like_restore() {
        assert_eq!(
            split_words(r#"-m comment --comment "a \"b\" c"  -j X"#),
            ["-m", "comment", "--comment", "a \"b\" c", "-j", "X"]
        );
        assert_eq!(split_words(r#"--comment """#), ["--comment", ""]);
    }

    #[test]
    fn hashes_chain_by_position() {
        let a = chain_hashes("cali-a", &["-j ACCEPT".to_owned(), "-j DROP".to_owned()]);
        let b = chain_hashes("cali-a", &["-j DROP".to_owned()]);
        let c = chain_hashes("cali-b", &["-j ACCEPT".to_owned(), "-j DROP".to_owned()]);
        assert_eq!(a.len(), 2);
        assert_ne!(a[1], b[0], "a rule's hash depends on the rules before it");
        assert_ne!(a[0], c[0], "and on its chain");
    }

    #[test]
    fn new_chains_and_hooks_from_nothing() {
        let want = chains(&[
            ("cali-FORWARD", &["-j cali-pi-web", "-j DROP"]),
            (
                "cali-pi-web",
                &["-m set --match-set cali40s:abc src -j ACCEPT"],
            ),
        ]);
        let hooks = [
            hook("FORWARD", "-j cali-FORWARD"),
            hook("FORWARD", "-j cali-log"),
        ];
        let plan = diff(&TableState::default(), &want, &hooks).unwrap();
        let h = chain_hashes("cali-FORWARD", &want["cali-FORWARD"]);
        let w = chain_hashes("cali-pi-web", &want["cali-pi-web"]);
        let h1 = hook_hash(&hooks[0]);
        let h2 = hook_hash(&hooks[1]);
        assert_eq!(
            plan.text,
            format!(
                "*filter\n:cali-FORWARD - [0:0]\n:cali-pi-web - [0:0]\n\
                 -A cali-FORWARD -j cali-pi-web -m comment --comment \"cali:{}\"\n\
                 -A cali-FORWARD -j DROP -m comment --comment \"cali:{}\"\n\
                 -A cali-pi-web -m set --match-set cali40s:abc src -j ACCEPT -m comment --comment \"cali:{}\"\n\
                 -I FORWARD 1 -j cali-log -m comment --comment \"cali:{h2}\"\n\
                 -I FORWARD 1 -j cali-FORWARD -m comment --comment \"cali:{h1}\"\n\
                 COMMIT\n",
                h[0], h[1], w[0]
            )
        );
        assert_eq!((plan.chains_written, plan.chains_deleted), (2, 0));
    }

    #[test]
    fn no_change_is_an_empty_plan() {
        let want = chains(&[("cali-a", &["-j ACCEPT"]), ("cali-empty", &[])]);
        let hooks = [hook("INPUT", "-j cali-a")];
        let state = applied(&want, &hooks);
        let plan = diff(&state, &want, &hooks).unwrap();
        assert_eq!(plan.text, "");
        assert_eq!(plan.after, state);
        assert_eq!(
            diff(&TableState::default(), &BTreeMap::new(), &[])
                .unwrap()
                .text,
            ""
        );
    }

    #[test]
    fn changed_chain_is_rewritten_alone() {
        let before = chains(&[("cali-a", &["-j ACCEPT"]), ("cali-b", &["-j DROP"])]);
        let state = applied(&before, &[]);
        let after = chains(&[
            ("cali-a", &["-j ACCEPT"]),
            ("cali-b", &["-s 10.0.0.1 -j DROP", "-j DROP"]),
        ]);
        let plan = diff(&state, &after, &[]).unwrap();
        let b = chain_hashes("cali-b", &after["cali-b"]);
        assert_eq!(
            plan.text,
            format!(
                "*filter\n:cali-b - [0:0]\n\
                 -A cali-b -s 10.0.0.1 -j DROP -m comment --comment \"cali:{}\"\n\
                 -A cali-b -j DROP -m comment --comment \"cali:{}\"\nCOMMIT\n",
                b[0], b[1]
            )
        );
        assert_eq!(plan.chains_written, 1);
    }

    #[test]
    fn foreign_rule_in_our_chain_gets_it_rewritten() {
        let want = chains(&[("cali-a", &["-j ACCEPT"])]);
        let mut state = applied(&want, &[]);
        // Someone appended a rule without our comment: the hashes before it still match.
        state.chains.get_mut("cali-a").unwrap().push(None);
        let plan = diff(&state, &want, &[]).unwrap();
        assert!(
            plan.text
                .starts_with("*filter\n:cali-a - [0:0]\n-A cali-a -j ACCEPT")
        );
        assert_eq!(plan.chains_written, 1);
    }

    #[test]
    fn stale_chains_are_flushed_then_deleted_last() {
        let state = parse_save(SAVE);
        let plan = diff(&state, &BTreeMap::new(), &[]).unwrap();
        assert_eq!(
            plan.text,
            "*filter\n-F cali-FORWARD\n-F cali-pi-web\n\
             -D FORWARD -m comment --comment \"cali:Hk1Hk2Hk3Hk4Hk5H\" -j cali-FORWARD\n\
             -D INPUT -m comment --comment \"cali:In1In2In3In4In5I\" -j cali-FORWARD\n\
             -X cali-FORWARD\n-X cali-pi-web\nCOMMIT\n"
        );
        assert_eq!((plan.chains_written, plan.chains_deleted), (0, 2));
        assert_eq!(plan.after, TableState::default());
    }

    #[test]
    fn hooks_missing_stale_or_out_of_place_are_redone() {
        let want = chains(&[("cali-a", &["-j ACCEPT"])]);
        let a = hook("FORWARD", "-j cali-a");
        let b = hook("FORWARD", "-j cali-b");
        let (ha, hb) = (hook_hash(&a), hook_hash(&b));
        let ok = applied(&want, std::slice::from_ref(&a));

        // Missing: kernel has no hooks.
        let mut missing = ok.clone();
        missing.hooks.clear();
        assert_eq!(
            diff(&missing, &want, std::slice::from_ref(&a))
                .unwrap()
                .text,
            format!("*filter\n-I FORWARD 1 -j cali-a -m comment --comment \"cali:{ha}\"\nCOMMIT\n")
        );

        // Stale: an old hook of ours is deleted by its spec; the wanted ones go back in order.
        let stale = applied(&want, std::slice::from_ref(&b));
        assert_eq!(
            diff(&stale, &want, &[a.clone(), b.clone()]).unwrap().text,
            format!(
                "*filter\n-D FORWARD -j cali-b -m comment --comment \"cali:{hb}\"\n\
                 -I FORWARD 1 -j cali-b -m comment --comment \"cali:{hb}\"\n\
                 -I FORWARD 1 -j cali-a -m comment --comment \"cali:{ha}\"\nCOMMIT\n"
            )
        );

        // Out of order.
        let reversed = applied(&want, &[b.clone(), a.clone()]);
        assert!(
            !diff(&reversed, &want, &[a.clone(), b.clone()])
                .unwrap()
                .text
                .is_empty()
        );

        // Below a foreign rule.
        let mut buried = ok.clone();
        buried.hooks.get_mut("FORWARD").unwrap().at_top = false;
        let text = diff(&buried, &want, std::slice::from_ref(&a)).unwrap().text;
        assert!(text.contains("-D FORWARD -j cali-a") && text.contains("-I FORWARD 1 -j cali-a"));

        // No hooks wanted any more.
        assert_eq!(
            diff(&ok, &want, &[]).unwrap().text,
            format!("*filter\n-D FORWARD -j cali-a -m comment --comment \"cali:{ha}\"\nCOMMIT\n")
        );
    }

    #[test]
    fn malformed_desired_state_is_refused() {
        let empty = TableState::default();
        assert!(diff(&empty, &chains(&[("FOO", &[])]), &[]).is_err());
        assert!(
            diff(
                &empty,
                &chains(&[("cali-0123456789012345678901234", &[])]),
                &[]
            )
            .is_err()
        );
        assert!(diff(&empty, &chains(&[("cali-a b", &[])]), &[]).is_err());
        assert!(
            diff(
                &empty,
                &chains(&[("cali-a", &["-j ACCEPT\n-F FOO-chain"])]),
                &[]
            )
            .is_err()
        );
        assert!(diff(&empty, &BTreeMap::new(), &[hook("cali-x", "-j ACCEPT")]).is_err());
        assert!(diff(&empty, &BTreeMap::new(), &[hook("", "-j ACCEPT")]).is_err());
        assert!(diff(&empty, &BTreeMap::new(), &[hook("FORWARD", "-j A\rB")]).is_err());
        let manager = IptablesManager::new(IptablesConfig::default());
        assert!(
            manager
                .plan(&chains(&[("FOO", &[])]), &[])
                .starts_with("# invalid desired state")
        );
    }

    #[test]
    fn plan_without_cache_assumes_nothing_of_ours() {
        let manager = IptablesManager::new(IptablesConfig::default());
        let want = chains(&[("cali-a", &["-j ACCEPT"])]);
        let text = manager.plan(&want, &[]);
        assert!(text.starts_with("*filter\n:cali-a - [0:0]\n-A cali-a -j ACCEPT -m comment"));
        assert_eq!(manager.plan(&BTreeMap::new(), &[]), "");
    }

    #[test]
    fn finds_the_failing_line() {
        assert_eq!(
            failed_line("iptables-restore: line 5 failed: No chain"),
            Some(5)
        );
        assert_eq!(
            failed_line(
                "iptables-restore v1.8.9 (nf_tables): Chain 'x' does not exist\nError occurred at line: 7"
            ),
            Some(7)
        );
        assert_eq!(
            failed_line("ipset v7.17: Error in line 2: Set cannot be destroyed"),
            Some(2)
        );
        assert_eq!(failed_line("no number here, pipeline"), None);
    }

    #[test]
    fn caps_long_messages_on_a_char_boundary() {
        let long = "é".repeat(3000);
        let capped = cap(long);
        assert!(capped.len() <= MAX_MESSAGE + 3);
        assert!(capped.ends_with("..."));
    }

    #[tokio::test]
    async fn missing_binary_is_a_command_error_naming_it() {
        let cfg = IptablesConfig {
            save: "/nonexistent/iptables-save".to_owned(),
            ..IptablesConfig::default()
        };
        let mut manager = IptablesManager::new(cfg);
        let err = manager.apply(&BTreeMap::new(), &[]).await.unwrap_err();
        match err {
            DataplaneError::Command { program, message } => {
                assert_eq!(program, "/nonexistent/iptables-save");
                assert!(message.contains("/nonexistent/iptables-save"), "{message}");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[tokio::test]
    async fn failing_program_reports_stderr_and_the_input_line() {
        let out = run_command(
            &[],
            "sh",
            &[
                "-c",
                "cat >/dev/null; echo 'Error in line 2: nope' >&2; exit 3",
            ],
            Some(b"first\nsecond\n"),
        )
        .await;
        match out {
            Err(DataplaneError::Command { program, message }) => {
                assert_eq!(program, "sh");
                assert_eq!(message, "Error in line 2: nope (input line 2: second)");
            }
            other => panic!("unexpected {other:?}"),
        }
        let out = run_command(&["env".to_owned()], "cat", &[], Some(b"hello"))
            .await
            .unwrap();
        assert_eq!(out, b"hello");
    }
}
