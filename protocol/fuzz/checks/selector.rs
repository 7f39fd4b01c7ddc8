//! Fuzz target for Calico's label selector language (`typha_protocol::selector::Selector`):
//! every policy, profile and network set the server reads carries selectors, written by
//! whoever can write those resources.
//!
//! The input is the selector's text (inputs that are not UTF-8 are skipped). It checks:
//!
//! 1. Nothing panics and nothing overflows the stack, whatever the text (nesting is bounded by
//!    `selector::MAX_NESTING`).
//! 2. Display round trip: a selector that parses displays as text that parses to the same
//!    selector, and that text displays as itself.
//! 3. The two agree on every label set tried: none; every label the selector names set to
//!    each string it mentions; and each such label absent in turn.
//!
//! Shared by the libFuzzer target (`fuzz_targets/selector.rs`) and the corpus replay test
//! (`protocol/tests/fuzz_corpus.rs`).

use std::collections::BTreeMap;

use typha_protocol::selector::Selector;

/// Checks one input (panics on a violation).
pub(crate) fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(sel) = Selector::parse(text) else {
        return;
    };
    let shown = sel.to_string();
    let again = match Selector::parse(&shown) {
        Ok(s) => s,
        Err(e) => panic!("{text:?} parses, but its display {shown:?} does not: {e}"),
    };
    assert_eq!(
        again, sel,
        "{text:?} displays as {shown:?}, which parses differently"
    );
    assert_eq!(again.to_string(), shown, "display is not stable");

    let names: Vec<String> = sel.labels().into_iter().map(str::to_owned).collect();
    // Candidate values: the quoted strings of the text, and a value nothing mentions.
    let mut values: Vec<String> = shown
        .split(['"', '\''])
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .take(8)
        .collect();
    values.push("\u{1}none".into());
    let mut sets = vec![BTreeMap::new()];
    for v in &values {
        let all: BTreeMap<String, String> = names.iter().map(|n| (n.clone(), v.clone())).collect();
        for n in names.iter().take(8) {
            let mut without = all.clone();
            without.remove(n);
            sets.push(without);
        }
        sets.push(all);
    }
    for labels in &sets {
        assert_eq!(
            sel.matches_map(labels),
            again.matches_map(labels),
            "{shown:?} and its reparse disagree on {labels:?}"
        );
    }
}
