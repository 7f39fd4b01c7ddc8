use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect()
}

#[test]
fn parses_and_evaluates_every_operator() {
    let l = labels(&[("app", "web"), ("tier", "frontend"), ("env", "prod-eu")]);
    let cases = [
        ("", true),
        ("all()", true),
        ("app == 'web'", true),
        ("app == \"db\"", false),
        ("app != 'db'", true),
        ("missing != 'x'", true),
        ("app in {'web', 'api'}", true),
        ("app not in {'web'}", false),
        ("missing not in {'x'}", true),
        ("has(tier)", true),
        ("!has(tier)", false),
        ("env contains 'od-e'", true),
        ("env starts with 'prod'", true),
        ("env ends with 'eu'", true),
        ("app == 'web' && tier == 'backend'", false),
        ("app == 'web' || tier == 'backend'", true),
        ("!(app == 'web' && has(tier))", false),
        ("(app == 'db' || app == 'web') && !has(missing)", true),
        ("global()", true),
        ("app in {}", false),
    ];
    for (s, want) in cases {
        let sel = Selector::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(sel.matches_map(&l), want, "{s}");
        // The canonical form parses back to the same selector.
        let canon = sel.to_string();
        assert_eq!(Selector::parse(&canon).unwrap(), sel, "{s} -> {canon}");
    }
    let ns = labels(&[(NAMESPACE_LABEL, "prod")]);
    assert!(!Selector::parse("global()").unwrap().matches_map(&ns));
}

#[test]
fn canonical_form_matches_calico() {
    let s = Selector::parse("a=='x'&&(b in {'2','1'}||!has(c))").unwrap();
    assert_eq!(
        s.to_string(),
        r#"(a == "x" && (b in {"1", "2"} || !has(c)))"#
    );
    assert_eq!(
        Selector::parse(r#"a == 'say "hi"'"#).unwrap().to_string(),
        r#"a == 'say "hi"'"#
    );
}

#[test]
fn errors_give_the_position() {
    for (s, pos) in [
        ("app ==", 6),
        ("app == 'web", 7),
        ("app", 3),
        ("(app == 'x'", 11),
        ("app == 'x' extra", 11),
        ("app not 'x'", 8),
        ("has(app", 7),
        ("== 'x'", 0),
        ("app in {'a' 'b'}", 12),
        ("&& x", 0),
    ] {
        let e = Selector::parse(s).unwrap_err();
        assert_eq!(e.position, pos, "{s}: {e}");
    }
}

#[test]
fn label_rewriting_for_namespace_selectors() {
    let s = Selector::parse("team == 'web' && has(env)").unwrap();
    let p = s.map_labels(&|k| format!("pcns.{k}"));
    assert_eq!(p.to_string(), r#"(pcns.team == "web" && has(pcns.env))"#);
    let all = Selector::parse("all()").unwrap();
    let has_ns = Selector::Has(NAMESPACE_LABEL.into());
    assert_eq!(
        all.replace_all_and_global(&has_ns, &Selector::Global),
        has_ns
    );
    assert_eq!(
        Selector::and([
            Selector::All,
            Selector::Has("a".into()),
            Selector::and([Selector::Has("b".into()), Selector::Has("c".into())])
        ])
        .to_string(),
        "(has(a) && has(b) && has(c))"
    );
}

// ---------------------------------------------------------------------------------------------
// Property tests.
// ---------------------------------------------------------------------------------------------

type Labels = BTreeMap<String, String>;

/// Label names: plain, with the punctuation Calico allows (`.`, `/`, `-`, `_`), the namespace
/// label `global()` reads, and names that collide with the language's keywords.
const LABEL_NAMES: &[&str] = &[
    "a",
    "app",
    "b.c",
    "tier-1",
    "x_y",
    "0",
    "k8s.io/name",
    NAMESPACE_LABEL,
    "pcns.team",
    "in",
    "not",
    "has",
    "all",
    "global",
    "contains",
    "starts",
    "ends",
    "with",
];

/// Values: empty, spaces, either kind of quote (a value holding both cannot be written in the
/// language, which has no escapes), and selector syntax inside the quotes.
const VALUES: &[&str] = &[
    "",
    " ",
    "a",
    "ab",
    "web",
    "prod-eu",
    " a b ",
    "it's",
    "say \"hi\"",
    "'",
    "\"",
    "{x}, y",
    "a == 'b' && !has(c)",
    ") || all(",
    "é",
    "a\tb",
];

fn label_name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(LABEL_NAMES).prop_map(str::to_owned),
        1 => "[a-zA-Z0-9_./-]{1,8}",
    ]
}

/// A value that can be written as a selector literal (not both kinds of quote).
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(VALUES).prop_map(str::to_owned),
        1 => "[ab ,{}()!=&|-]{0,5}",
        1 => "[ab \"]{0,4}",
        1 => "[ab ']{0,4}",
    ]
}

fn value_set() -> impl Strategy<Value = BTreeSet<String>> {
    proptest::collection::btree_set(value(), 0..4)
}

fn leaf() -> impl Strategy<Value = Selector> {
    prop_oneof![
        Just(Selector::All),
        Just(Selector::Global),
        label_name().prop_map(Selector::Has),
        (label_name(), value()).prop_map(|(k, v)| Selector::Eq(k, v)),
        (label_name(), value()).prop_map(|(k, v)| Selector::Ne(k, v)),
        (label_name(), value_set()).prop_map(|(k, s)| Selector::In(k, s)),
        (label_name(), value_set()).prop_map(|(k, s)| Selector::NotIn(k, s)),
        (label_name(), value()).prop_map(|(k, v)| Selector::Contains(k, v)),
        (label_name(), value()).prop_map(|(k, v)| Selector::StartsWith(k, v)),
        (label_name(), value()).prop_map(|(k, v)| Selector::EndsWith(k, v)),
    ]
}

/// Arbitrary selectors: every variant, `&&` / `||` with 2..=4 children, depth at most 4.
fn selector() -> impl Strategy<Value = Selector> {
    leaf().prop_recursive(4, 48, 4, |inner| {
        prop_oneof![
            inner.clone().prop_map(|e| Selector::Not(Box::new(e))),
            proptest::collection::vec(inner.clone(), 2..=4).prop_map(Selector::And),
            proptest::collection::vec(inner, 2..=4).prop_map(Selector::Or),
        ]
    })
}

/// Label maps over the same names and values the selectors use, so that matches are common.
fn label_map() -> impl Strategy<Value = Labels> {
    let v = prop_oneof![
        3 => value(),
        1 => proptest::sample::select(&["web", "webapp", "a b", "say \"hi\" it's"][..])
            .prop_map(str::to_owned),
    ];
    proptest::collection::btree_map(label_name(), v, 0..6)
}

/// Map entries a selector is sensitive to: each key it reads with each of its values exactly,
/// with text before, after and around it, and with an unrelated value.
fn interesting_entries(s: &Selector, out: &mut Vec<(String, String)>) {
    let mut add = |k: &str, v: &str| {
        for w in [
            v.to_owned(),
            format!("{v}z"),
            format!("z{v}"),
            format!("z{v}z"),
            "zz".into(),
        ] {
            out.push((k.to_owned(), w));
        }
    };
    match s {
        Selector::All => {}
        Selector::Global => add(NAMESPACE_LABEL, "ns"),
        Selector::Has(k) => add(k, "web"),
        Selector::Eq(k, v)
        | Selector::Ne(k, v)
        | Selector::Contains(k, v)
        | Selector::StartsWith(k, v)
        | Selector::EndsWith(k, v) => add(k, v),
        Selector::In(k, vs) | Selector::NotIn(k, vs) => {
            add(k, "");
            vs.iter().for_each(|v| add(k, v));
        }
        Selector::Not(e) => interesting_entries(e, out),
        Selector::And(es) | Selector::Or(es) => es.iter().for_each(|e| interesting_entries(e, out)),
    }
}

/// Label maps for `sels`: random ones, and ones built from a random choice of the entries the
/// selectors are sensitive to (so that every operator is seen both matching and not).
fn label_maps_for(sels: &[&Selector]) -> impl Strategy<Value = Vec<Labels>> + use<> {
    let mut entries = Vec::new();
    sels.iter()
        .for_each(|s| interesting_entries(s, &mut entries));
    let n = entries.len();
    let built = (
        proptest::collection::vec(proptest::sample::Index::arbitrary(), 0..6),
        label_map(),
        any::<bool>(),
    )
        .prop_map(move |(picks, random, mix)| {
            let mut l = if mix { random } else { Labels::new() };
            if n > 0 {
                for p in picks {
                    let (k, v) = entries[p.index(n)].clone();
                    l.insert(k, v);
                }
            }
            l
        });
    proptest::collection::vec(prop_oneof![1 => label_map(), 3 => built], 1..8)
}

/// A selector and label maps for it.
fn selector_and_maps() -> impl Strategy<Value = (Selector, Vec<Labels>)> {
    selector().prop_flat_map(|s| {
        let maps = label_maps_for(&[&s]);
        (Just(s), maps)
    })
}

/// Calico's documented semantics, written independently of [`Selector::matches`].
fn reference(s: &Selector, l: &Labels) -> bool {
    fn find(hay: &str, needle: &str) -> bool {
        needle.is_empty()
            || hay
                .as_bytes()
                .windows(needle.len())
                .any(|w| w == needle.as_bytes())
    }
    match s {
        Selector::All => true,
        Selector::Global => !l.contains_key(NAMESPACE_LABEL),
        Selector::Has(k) => l.contains_key(k),
        Selector::Eq(k, v) => matches!(l.get(k), Some(x) if x == v),
        Selector::Ne(k, v) => match l.get(k) {
            None => true,
            Some(x) => x != v,
        },
        Selector::In(k, set) => match l.get(k) {
            None => false,
            Some(x) => set.iter().any(|v| v == x),
        },
        Selector::NotIn(k, set) => match l.get(k) {
            None => true,
            Some(x) => set.iter().all(|v| v != x),
        },
        Selector::Contains(k, n) => l.get(k).is_some_and(|x| find(x, n)),
        Selector::StartsWith(k, p) => l
            .get(k)
            .is_some_and(|x| x.len() >= p.len() && x.as_bytes()[..p.len()] == *p.as_bytes()),
        Selector::EndsWith(k, p) => l.get(k).is_some_and(|x| {
            x.len() >= p.len() && x.as_bytes()[x.len() - p.len()..] == *p.as_bytes()
        }),
        Selector::Not(e) => !reference(e, l),
        Selector::And(es) => {
            let mut r = true;
            for e in es {
                r = r && reference(e, l);
            }
            r
        }
        Selector::Or(es) => {
            let mut r = false;
            for e in es {
                r = r || reference(e, l);
            }
            r
        }
    }
}

fn parse_ok(s: &str) -> Result<Selector, TestCaseError> {
    Selector::parse(s).map_err(|e| TestCaseError::fail(format!("{s:?} does not parse: {e}")))
}

fn is_label(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-')
}

/// Splits a canonical selector into tokens: quoted strings whole, `all(` / `global(` / `has(`
/// as one token (Calico's tokenizer has no space before their parenthesis), the two-character
/// operators, words, and single punctuation. Spaces are dropped.
fn tokens(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' => {}
            '\'' | '"' => {
                let mut t = String::from(c);
                for d in chars.by_ref() {
                    t.push(d);
                    if d == c {
                        break;
                    }
                }
                out.push(t);
            }
            c if is_label(c) => {
                let mut t = String::from(c);
                while let Some(&d) = chars.peek()
                    && is_label(d)
                {
                    t.push(d);
                    chars.next();
                }
                if matches!(t.as_str(), "all" | "global" | "has") && chars.peek() == Some(&'(') {
                    t.push('(');
                    chars.next();
                }
                out.push(t);
            }
            '=' | '!' | '&' | '|' => {
                let mut t = String::from(c);
                if let Some(&d) = chars.peek()
                    && matches!((c, d), ('=', '=') | ('!', '=') | ('&', '&') | ('|', '|'))
                {
                    t.push(d);
                    chars.next();
                }
                out.push(t);
            }
            other => out.push(other.to_string()),
        }
    }
    out
}

/// Fragments of selector syntax, for token soup.
const SOUP: &[&str] = &[
    "==",
    "!=",
    "=",
    "!",
    "&&",
    "||",
    "&",
    "|",
    "in",
    "not",
    "not in",
    "contains",
    "starts",
    "with",
    "ends",
    "{",
    "}",
    "(",
    ")",
    ",",
    "'",
    "\"",
    "'x'",
    "\"y\"",
    "''",
    "has(",
    "all(",
    "global(",
    "all()",
    "global()",
    "a",
    "app",
    "b.c/d",
    "-",
    NAMESPACE_LABEL,
    " ",
    " ",
    "\t",
    "\n",
    "\u{a0}",
    "\u{3000}",
    "é",
    "😀",
];

/// Token soup, sometimes longer than the 200 bytes an error echoes.
fn soup() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::collection::vec(proptest::sample::select(SOUP), 0..24),
        1 => proptest::collection::vec(proptest::sample::select(SOUP), 60..140),
    ]
    .prop_map(|v| v.concat())
}

/// Checks the parser's contract on any input: no panic; on failure a position inside the
/// input at a character boundary and the (truncated) input echoed; on success a selector whose
/// canonical form parses back to itself.
fn check_parse_contract(s: &str) -> Result<(), TestCaseError> {
    match Selector::parse(s) {
        Ok(sel) => {
            let canon = sel.to_string();
            prop_assert_eq!(parse_ok(&canon)?, sel, "{:?} -> {:?}", s, canon);
        }
        Err(e) => {
            prop_assert!(e.position <= s.len(), "{:?}: {}", s, e);
            prop_assert!(s.is_char_boundary(e.position), "{:?}: {}", s, e);
            prop_assert!(e.selector.len() <= 200 && s.starts_with(&e.selector));
        }
    }
    Ok(())
}

/// Negation, De Morgan, `all()`, and [`Selector::and`], on the AST and on the parsed text.
fn check_logical_laws(a: &Selector, b: &Selector, l: &Labels) -> Result<(), TestCaseError> {
    let (ea, eb) = (a.matches_map(l), b.matches_map(l));
    let eval = |s: &str| parse_ok(s).map(|p| p.matches_map(l));

    // Negation.
    prop_assert_eq!(Selector::Not(Box::new(a.clone())).matches_map(l), !ea);
    prop_assert_eq!(
        parse_ok(&format!("!({a})"))?,
        Selector::Not(Box::new(a.clone()))
    );
    prop_assert_eq!(eval(&format!("!!{a}"))?, ea);
    // De Morgan.
    prop_assert_eq!(
        eval(&format!("!({a} && {b})"))?,
        eval(&format!("!{a} || !{b}"))?
    );
    prop_assert_eq!(
        eval(&format!("!({a} || {b})"))?,
        eval(&format!("!{a} && !{b}"))?
    );
    prop_assert_eq!(eval(&format!("{a} && {b}"))?, ea && eb);
    prop_assert_eq!(eval(&format!("{a} || {b}"))?, ea || eb);
    // all() is the identity of && and absorbs ||; the empty selector is all().
    prop_assert!(Selector::All.matches_map(l));
    prop_assert_eq!(parse_ok("")?, Selector::All);
    prop_assert_eq!(parse_ok(" \t\n")?, Selector::All);
    prop_assert_eq!(eval(&format!("{a} && all()"))?, ea);
    let (or_all, and_not_all) = (format!("{a} || all()"), format!("{a} && !all()"));
    prop_assert!(eval(&or_all)?);
    prop_assert!(!eval(&and_not_all)?);
    // `Selector::and` is conjunction.
    prop_assert_eq!(
        Selector::and([a.clone(), Selector::All, b.clone()]).matches_map(l),
        ea && eb
    );
    Ok(())
}

/// A selector reads only the labels `labels()` reports, and `map_labels` commutes with renaming
/// the map (except `global()`, which keeps reading the namespace label).
fn check_labels_and_renaming(s: &Selector, l: &Labels) -> Result<(), TestCaseError> {
    let want = s.matches_map(l);
    let read = s.labels();
    let only_read: Labels = l
        .iter()
        .filter(|(k, _)| read.contains(k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    prop_assert_eq!(s.matches_map(&only_read), want);

    let mut renamed: Labels = l
        .iter()
        .map(|(k, v)| (format!("pcns.{k}"), v.clone()))
        .collect();
    if let Some(ns) = l.get(NAMESPACE_LABEL) {
        renamed.insert(NAMESPACE_LABEL.into(), ns.clone());
    }
    let r = s.map_labels(&|k| format!("pcns.{k}"));
    prop_assert_eq!(r.matches_map(&renamed), want, "{} on {:?}", r, renamed);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// 1. The canonical form parses back to the same selector, which evaluates the same.
    #[test]
    fn canonical_form_round_trips((s, maps) in selector_and_maps()) {
        let text = s.to_string();
        let back = parse_ok(&text)?;
        prop_assert_eq!(&back, &s, "{}", text);
        for l in &maps {
            prop_assert_eq!(back.matches_map(l), s.matches_map(l), "{} on {:?}", text, l);
        }
    }

    /// 2. Evaluation agrees with the reference semantics, through both entry points.
    #[test]
    fn evaluation_matches_reference((s, maps) in selector_and_maps()) {
        for l in &maps {
            let want = reference(&s, l);
            prop_assert_eq!(s.matches_map(l), want, "{} on {:?}", s, l);
            prop_assert_eq!(s.matches(&|k| l.get(k).map(String::as_str)), want);
        }
    }

    /// 3. Logical laws, on ASTs and on the parsed text.
    #[test]
    fn logical_laws(
        (a, b, maps) in (selector(), selector()).prop_flat_map(|(a, b)| {
            let maps = label_maps_for(&[&a, &b]);
            (Just(a), Just(b), maps)
        })
    ) {
        for l in &maps {
            check_logical_laws(&a, &b, l)?;
        }
    }

    /// 3b. Calico's operator identities (absent labels included).
    #[test]
    fn operator_identities(
        k in label_name(),
        v in value(),
        set in value_set(),
        l in label_map(),
    ) {
        let m = |s: &Selector| s.matches_map(&l);
        let not = |s: Selector| Selector::Not(Box::new(s));
        let eq = Selector::Eq(k.clone(), v.clone());
        let has = Selector::Has(k.clone());
        prop_assert_eq!(m(&Selector::Ne(k.clone(), v.clone())), !m(&eq));
        prop_assert_eq!(
            m(&Selector::NotIn(k.clone(), set.clone())),
            !m(&Selector::In(k.clone(), set.clone()))
        );
        prop_assert!(!m(&Selector::In(k.clone(), BTreeSet::new())));
        prop_assert!(m(&Selector::NotIn(k.clone(), BTreeSet::new())));
        prop_assert_eq!(m(&Selector::In(k.clone(), BTreeSet::from([v.clone()]))), m(&eq));
        prop_assert_eq!(m(&Selector::Contains(k.clone(), String::new())), m(&has));
        prop_assert_eq!(m(&Selector::StartsWith(k.clone(), String::new())), m(&has));
        prop_assert_eq!(m(&Selector::EndsWith(k.clone(), String::new())), m(&has));
        prop_assert_eq!(
            m(&Selector::Contains(k.clone(), v.clone())),
            m(&has) && l.get(&k).is_some_and(|x| x.contains(v.as_str()))
        );
        prop_assert_eq!(m(&Selector::Global), m(&not(Selector::Has(NAMESPACE_LABEL.into()))));
    }

    /// 3c. See [`check_labels_and_renaming`].
    #[test]
    fn labels_and_renaming((s, maps) in selector_and_maps()) {
        for l in &maps {
            check_labels_and_renaming(&s, l)?;
        }
    }

    /// 4a. The parser's contract on arbitrary text (also past the 200 bytes an error echoes).
    #[test]
    fn parser_total_on_arbitrary_text(s in prop_oneof![".*", ".{180,260}"]) {
        check_parse_contract(&s)?;
    }

    /// 4b. The parser's contract on token soup, which gets much further into the grammar.
    #[test]
    fn parser_total_on_token_soup(s in soup()) {
        check_parse_contract(&s)?;
    }

    /// 4c. The parser's contract on canonical selectors with a cut, an insertion or a splice.
    #[test]
    fn parser_total_on_damaged_selectors(
        s in selector(),
        at in any::<proptest::sample::Index>(),
        junk in soup(),
        cut in any::<bool>(),
    ) {
        let text = s.to_string();
        let mut i = at.index(text.len() + 1);
        while !text.is_char_boundary(i) {
            i -= 1;
        }
        let damaged = if cut {
            format!("{}{junk}", &text[..i])
        } else {
            format!("{}{junk}{}", &text[..i], &text[i..])
        };
        check_parse_contract(&damaged)?;
    }

    /// 5. Whitespace between tokens (outside quotes) does not change the parse; neither does
    /// removing it, except between two word tokens (`a in`, `not in`).
    #[test]
    fn whitespace_between_tokens_is_insignificant(
        (s, seps) in selector().prop_flat_map(|s| {
            let n = tokens(&s.to_string()).len() + 1;
            let sep = proptest::collection::vec(
                proptest::sample::select(&[' ', '\t', '\n', '\r'][..]),
                0..4,
            )
            .prop_map(String::from_iter);
            (Just(s), proptest::collection::vec(sep, n))
        })
    ) {
        let toks = tokens(&s.to_string());
        let mut spaced = seps[0].clone();
        for (i, t) in toks.iter().enumerate() {
            spaced.push_str(t);
            let sep = &seps[i + 1];
            let next = toks.get(i + 1);
            let glued = t.ends_with(is_label)
                && next.is_some_and(|n| n.starts_with(is_label));
            if sep.is_empty() && glued {
                spaced.push(' ');
            }
            spaced.push_str(sep);
        }
        prop_assert_eq!(parse_ok(&spaced)?, s, "{:?}", spaced);
    }
}

/// The tokenizer the whitespace property relies on keeps quoted strings, `has(` / `all(` and the
/// two-character operators whole.
#[test]
fn tokens_split_canonical_text() {
    assert_eq!(
        tokens(r#"(!has(a) && b.c/d not in {"x y", 'say "hi"'} || all() || e != "")"#),
        [
            "(",
            "!",
            "has(",
            "a",
            ")",
            "&&",
            "b.c/d",
            "not",
            "in",
            "{",
            "\"x y\"",
            ",",
            "'say \"hi\"'",
            "}",
            "||",
            "all(",
            ")",
            "||",
            "e",
            "!=",
            "\"\"",
            ")"
        ]
    );
}

#[test]
fn nesting_past_the_limit_is_an_error_not_a_stack_overflow() {
    let ok = format!(
        "{}a == 'b'{}",
        "(".repeat(MAX_NESTING),
        ")".repeat(MAX_NESTING)
    );
    assert!(Selector::parse(&ok).is_ok());
    let nots = format!("{}has(a)", "!".repeat(MAX_NESTING));
    assert!(Selector::parse(&nots).is_ok());
    for deep in [
        format!(
            "{}a == 'b'{}",
            "(".repeat(MAX_NESTING + 1),
            ")".repeat(MAX_NESTING + 1)
        ),
        format!("{}has(a)", "!".repeat(MAX_NESTING + 1)),
        // What a hostile value would hold: far more than any stack.
        "(".repeat(1 << 20),
        "!(".repeat(1 << 19),
    ] {
        let e = Selector::parse(&deep).unwrap_err();
        assert!(e.message.contains("nested more than"), "{e}");
    }
}
