//! Calico's label selector language: parse, print canonically, evaluate.
//!
//! ```text
//! expr    := or
//! or      := and ( "||" and )*
//! and     := unary ( "&&" unary )*
//! unary   := "!" unary | primary
//! primary := "(" expr ")" | "all()" | "global()" | "has(" label ")"
//!          | label ( "==" | "!=" ) string
//!          | label "in" set | label "not" "in" set
//!          | label "contains" string | label "starts" "with" string | label "ends" "with" string
//! set     := "{" [ string ( "," string )* ] "}"
//! string  := '...' | "..."
//! ```
//!
//! An empty selector selects everything. `!=` and `not in` also match when the label is absent,
//! as in Calico. `global()` matches what has no `projectcalico.org/namespace` label. Errors
//! carry the byte position where parsing failed.

use std::collections::BTreeSet;
use std::fmt;

/// The label Calico puts on namespaced things; `global()` tests for its absence.
pub const NAMESPACE_LABEL: &str = "projectcalico.org/namespace";

/// A parsed selector.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Selector {
    /// `all()`: matches everything.
    All,
    /// `global()`: matches things without a namespace label.
    Global,
    /// `has(k)`.
    Has(String),
    /// `k == "v"`.
    Eq(String, String),
    /// `k != "v"` (also true when `k` is absent).
    Ne(String, String),
    /// `k in {...}`.
    In(String, BTreeSet<String>),
    /// `k not in {...}` (also true when `k` is absent).
    NotIn(String, BTreeSet<String>),
    /// `k contains "s"`.
    Contains(String, String),
    /// `k starts with "s"`.
    StartsWith(String, String),
    /// `k ends with "s"`.
    EndsWith(String, String),
    /// `!e`.
    Not(Box<Selector>),
    /// `a && b && ...` (two or more).
    And(Vec<Selector>),
    /// `a || b || ...` (two or more).
    Or(Vec<Selector>),
}

/// A selector that does not parse: where and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid selector at position {position}: {message} (in {selector:?})")]
pub struct SelectorError {
    /// Byte offset of the problem.
    pub position: usize,
    /// What was expected or found.
    pub message: String,
    /// The selector (truncated to 200 bytes).
    pub selector: String,
}

impl Selector {
    /// Parses a selector. The empty string (or only whitespace) is [`Selector::All`].
    ///
    /// # Errors
    ///
    /// [`SelectorError`], with the byte offset and what was expected there, for anything Calico's
    /// parser refuses, and for expressions nested deeper than [`MAX_NESTING`].
    pub fn parse(s: &str) -> Result<Selector, SelectorError> {
        let mut p = Parser {
            src: s,
            pos: 0,
            depth: 0,
        };
        p.skip_ws();
        if p.at_end() {
            return Ok(Selector::All);
        }
        let e = p.or()?;
        p.skip_ws();
        if !p.at_end() {
            return Err(p.error("unexpected text after the end of the expression"));
        }
        Ok(e)
    }

    /// Evaluates against labels given by a lookup function.
    pub fn matches<'a>(&self, label: &impl Fn(&str) -> Option<&'a str>) -> bool {
        match self {
            Selector::All => true,
            Selector::Global => label(NAMESPACE_LABEL).is_none(),
            Selector::Has(k) => label(k).is_some(),
            Selector::Eq(k, v) => label(k) == Some(v.as_str()),
            Selector::Ne(k, v) => label(k) != Some(v.as_str()),
            Selector::In(k, set) => label(k).is_some_and(|v| set.contains(v)),
            Selector::NotIn(k, set) => !label(k).is_some_and(|v| set.contains(v)),
            Selector::Contains(k, s) => label(k).is_some_and(|v| v.contains(s.as_str())),
            Selector::StartsWith(k, s) => label(k).is_some_and(|v| v.starts_with(s.as_str())),
            Selector::EndsWith(k, s) => label(k).is_some_and(|v| v.ends_with(s.as_str())),
            Selector::Not(e) => !e.matches(label),
            Selector::And(es) => es.iter().all(|e| e.matches(label)),
            Selector::Or(es) => es.iter().any(|e| e.matches(label)),
        }
    }

    /// Evaluates against a label map.
    pub fn matches_map(&self, labels: &std::collections::BTreeMap<String, String>) -> bool {
        self.matches(&|k| labels.get(k).map(String::as_str))
    }

    /// Rewrites every label name with `f` (Calico prefixes namespace-selector labels with
    /// `pcns.` and service-account labels with `pcsa.`).
    pub fn map_labels(&self, f: &impl Fn(&str) -> String) -> Selector {
        match self {
            Selector::All => Selector::All,
            Selector::Global => Selector::Global,
            Selector::Has(k) => Selector::Has(f(k)),
            Selector::Eq(k, v) => Selector::Eq(f(k), v.clone()),
            Selector::Ne(k, v) => Selector::Ne(f(k), v.clone()),
            Selector::In(k, s) => Selector::In(f(k), s.clone()),
            Selector::NotIn(k, s) => Selector::NotIn(f(k), s.clone()),
            Selector::Contains(k, v) => Selector::Contains(f(k), v.clone()),
            Selector::StartsWith(k, v) => Selector::StartsWith(f(k), v.clone()),
            Selector::EndsWith(k, v) => Selector::EndsWith(f(k), v.clone()),
            Selector::Not(e) => Selector::Not(Box::new(e.map_labels(f))),
            Selector::And(es) => Selector::And(es.iter().map(|e| e.map_labels(f)).collect()),
            Selector::Or(es) => Selector::Or(es.iter().map(|e| e.map_labels(f)).collect()),
        }
    }

    /// Replaces `all()` and `global()` leaves (used when folding a namespace selector).
    pub fn replace_all_and_global(&self, all: &Selector, global: &Selector) -> Selector {
        match self {
            Selector::All => all.clone(),
            Selector::Global => global.clone(),
            Selector::Not(e) => Selector::Not(Box::new(e.replace_all_and_global(all, global))),
            Selector::And(es) => Selector::And(
                es.iter()
                    .map(|e| e.replace_all_and_global(all, global))
                    .collect(),
            ),
            Selector::Or(es) => Selector::Or(
                es.iter()
                    .map(|e| e.replace_all_and_global(all, global))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// `a && b`, flattening nested conjunctions and dropping `all()` terms.
    pub fn and(parts: impl IntoIterator<Item = Selector>) -> Selector {
        let mut out = Vec::new();
        for p in parts {
            match p {
                Selector::All => {}
                Selector::And(es) => out.extend(es),
                other => out.push(other),
            }
        }
        match out.len() {
            0 => Selector::All,
            1 => out.pop().unwrap_or(Selector::All),
            _ => Selector::And(out),
        }
    }

    /// Every label name the selector reads.
    pub fn labels(&self) -> BTreeSet<&str> {
        let mut out = BTreeSet::new();
        self.collect_labels(&mut out);
        out
    }

    fn collect_labels<'a>(&'a self, out: &mut BTreeSet<&'a str>) {
        match self {
            Selector::All => {}
            Selector::Global => {
                out.insert(NAMESPACE_LABEL);
            }
            Selector::Has(k)
            | Selector::Eq(k, _)
            | Selector::Ne(k, _)
            | Selector::In(k, _)
            | Selector::NotIn(k, _)
            | Selector::Contains(k, _)
            | Selector::StartsWith(k, _)
            | Selector::EndsWith(k, _) => {
                out.insert(k);
            }
            Selector::Not(e) => e.collect_labels(out),
            Selector::And(es) | Selector::Or(es) => es.iter().for_each(|e| e.collect_labels(out)),
        }
    }
}

/// Canonical form, as Calico prints it: `k == "v"` (single quotes when the value holds `"`),
/// conjunctions and disjunctions parenthesised.
impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn lit(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
            if s.contains('"') {
                write!(f, "'{s}'")
            } else {
                write!(f, "\"{s}\"")
            }
        }
        fn set(f: &mut fmt::Formatter<'_>, s: &BTreeSet<String>) -> fmt::Result {
            f.write_str("{")?;
            for (i, v) in s.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                lit(f, v)?;
            }
            f.write_str("}")
        }
        match self {
            Selector::All => f.write_str("all()"),
            Selector::Global => f.write_str("global()"),
            Selector::Has(k) => write!(f, "has({k})"),
            Selector::Eq(k, v) => {
                write!(f, "{k} == ")?;
                lit(f, v)
            }
            Selector::Ne(k, v) => {
                write!(f, "{k} != ")?;
                lit(f, v)
            }
            Selector::In(k, s) => {
                write!(f, "{k} in ")?;
                set(f, s)
            }
            Selector::NotIn(k, s) => {
                write!(f, "{k} not in ")?;
                set(f, s)
            }
            Selector::Contains(k, v) => {
                write!(f, "{k} contains ")?;
                lit(f, v)
            }
            Selector::StartsWith(k, v) => {
                write!(f, "{k} starts with ")?;
                lit(f, v)
            }
            Selector::EndsWith(k, v) => {
                write!(f, "{k} ends with ")?;
                lit(f, v)
            }
            Selector::Not(e) => write!(f, "!{e}"),
            Selector::And(es) | Selector::Or(es) => {
                let op = if matches!(self, Selector::And(_)) {
                    " && "
                } else {
                    " || "
                };
                f.write_str("(")?;
                for (i, e) in es.iter().enumerate() {
                    if i > 0 {
                        f.write_str(op)?;
                    }
                    write!(f, "{e}")?;
                }
                f.write_str(")")
            }
        }
    }
}

/// How deeply parentheses and `!` may nest. The parser and everything that walks a selector
/// recurse once per level, so an unbounded depth from a datastore's value could overflow the
/// stack (an abort, not an error); real selectors nest a handful of levels.
pub const MAX_NESTING: usize = 100;

struct Parser<'a> {
    src: &'a str,
    pos: usize,
    /// Parentheses and `!` open around the current position.
    depth: usize,
}

impl<'a> Parser<'a> {
    fn rest(&self) -> &'a str {
        self.src.get(self.pos..).unwrap_or_default()
    }

    fn at_end(&self) -> bool {
        self.pos >= self.src.len()
    }

    fn error(&self, message: impl Into<String>) -> SelectorError {
        let mut end = self.src.len().min(200);
        while !self.src.is_char_boundary(end) {
            end -= 1;
        }
        SelectorError {
            position: self.pos,
            message: message.into(),
            selector: self.src.get(..end).unwrap_or_default().to_owned(),
        }
    }

    fn skip_ws(&mut self) {
        let trimmed = self.rest().trim_start();
        self.pos = self.src.len() - trimmed.len();
    }

    /// Consumes `tok` (after whitespace) if present.
    fn eat(&mut self, tok: &str) -> bool {
        self.skip_ws();
        if self.rest().starts_with(tok) {
            self.pos += tok.len();
            true
        } else {
            false
        }
    }

    /// Consumes a keyword: `word` not followed by a label character.
    fn eat_word(&mut self, word: &str) -> bool {
        self.skip_ws();
        let rest = self.rest();
        if rest.starts_with(word)
            && !rest
                .get(word.len()..)
                .and_then(|r| r.chars().next())
                .is_some_and(is_label_char)
        {
            self.pos += word.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, tok: &str) -> Result<(), SelectorError> {
        if self.eat(tok) {
            Ok(())
        } else {
            Err(self.error(format!("expected {tok:?}")))
        }
    }

    fn or(&mut self) -> Result<Selector, SelectorError> {
        let mut parts = vec![self.and()?];
        while self.eat("||") {
            parts.push(self.and()?);
        }
        Ok(if parts.len() == 1 {
            parts.pop().unwrap_or(Selector::All)
        } else {
            Selector::Or(parts)
        })
    }

    fn and(&mut self) -> Result<Selector, SelectorError> {
        let mut parts = vec![self.unary()?];
        while self.eat("&&") {
            parts.push(self.unary()?);
        }
        Ok(if parts.len() == 1 {
            parts.pop().unwrap_or(Selector::All)
        } else {
            Selector::And(parts)
        })
    }

    /// Enters one more level of nesting, or fails past [`MAX_NESTING`].
    fn nest(&mut self) -> Result<(), SelectorError> {
        if self.depth >= MAX_NESTING {
            return Err(self.error(format!("nested more than {MAX_NESTING} levels deep")));
        }
        self.depth += 1;
        Ok(())
    }

    fn unary(&mut self) -> Result<Selector, SelectorError> {
        self.skip_ws();
        // `!has(` is `!` then `has(`; `!=` cannot start an expression.
        if self.rest().starts_with('!') {
            self.pos += 1;
            self.nest()?;
            let e = self.unary()?;
            self.depth -= 1;
            return Ok(Selector::Not(Box::new(e)));
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<Selector, SelectorError> {
        if self.eat("(") {
            self.nest()?;
            let e = self.or()?;
            self.expect(")")?;
            self.depth -= 1;
            return Ok(e);
        }
        if self.eat("all(") {
            self.expect(")")?;
            return Ok(Selector::All);
        }
        if self.eat("global(") {
            self.expect(")")?;
            return Ok(Selector::Global);
        }
        if self.eat("has(") {
            let k = self.label()?;
            self.expect(")")?;
            return Ok(Selector::Has(k));
        }
        let k = self.label()?;
        if self.eat("==") {
            return Ok(Selector::Eq(k, self.string()?));
        }
        if self.eat("!=") {
            return Ok(Selector::Ne(k, self.string()?));
        }
        if self.eat_word("in") {
            return Ok(Selector::In(k, self.set()?));
        }
        if self.eat_word("not") {
            if !self.eat_word("in") {
                return Err(self.error("expected \"in\" after \"not\""));
            }
            return Ok(Selector::NotIn(k, self.set()?));
        }
        if self.eat_word("contains") {
            return Ok(Selector::Contains(k, self.string()?));
        }
        if self.eat_word("starts") {
            if !self.eat_word("with") {
                return Err(self.error("expected \"with\" after \"starts\""));
            }
            return Ok(Selector::StartsWith(k, self.string()?));
        }
        if self.eat_word("ends") {
            if !self.eat_word("with") {
                return Err(self.error("expected \"with\" after \"ends\""));
            }
            return Ok(Selector::EndsWith(k, self.string()?));
        }
        Err(self
            .error("expected an operator (==, !=, in, not in, contains, starts with, ends with)"))
    }

    fn label(&mut self) -> Result<String, SelectorError> {
        self.skip_ws();
        let rest = self.rest();
        let len = rest
            .char_indices()
            .find(|(_, c)| !is_label_char(*c))
            .map_or(rest.len(), |(i, _)| i);
        if len == 0 {
            return Err(self.error("expected a label name"));
        }
        self.pos += len;
        Ok(rest.get(..len).unwrap_or_default().to_owned())
    }

    fn string(&mut self) -> Result<String, SelectorError> {
        self.skip_ws();
        let rest = self.rest();
        let Some(quote) = rest.chars().next().filter(|c| *c == '"' || *c == '\'') else {
            return Err(self.error("expected a quoted string"));
        };
        let body = rest.get(1..).unwrap_or_default();
        let Some(end) = body.find(quote) else {
            return Err(self.error("unterminated string"));
        };
        self.pos += end + 2;
        Ok(body.get(..end).unwrap_or_default().to_owned())
    }

    fn set(&mut self) -> Result<BTreeSet<String>, SelectorError> {
        self.expect("{")?;
        let mut out = BTreeSet::new();
        if self.eat("}") {
            return Ok(out);
        }
        loop {
            out.insert(self.string()?);
            if self.eat("}") {
                return Ok(out);
            }
            self.expect(",")?;
        }
    }
}

fn is_label_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-')
}

#[cfg(test)]
mod tests;
