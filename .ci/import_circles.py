#!/usr/bin/env python3
"""Import circles between the source files of each crate of the workspace.

A file imports another when it names an item through a path that resolves into the other
file's module: `use crate::cache::breadcrumb::Breadcrumb`, `super::Cache`, `crate::fanout::encode(..)`,
`snapshot::Snapshots` (a child module named without `self::`).
Module declarations (`mod x;`) are containment, not imports. Test code is left out: `tests.rs`
files, `tests/` folders and `benches/`. Prints every strongly connected group of two or more
files with the edges that tie it, and exits 1 if there is one.

Usage: import_circles.py [CRATE_DIR ...]   (default: every workspace member with a src/)
"""

import os
import re
import sys

USE_RE = re.compile(r"\b(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", re.S)
PATH_RE = re.compile(r"(?<![:\w])([a-z_][a-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)+)")
# One pass, so a `//` inside a string and a quote inside a comment are both read right.
LEXICAL_RE = re.compile(
    r"""//[^\n]*|/\*.*?\*/|r(#*)".*?"\1|b?"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])'""", re.S
)


def blank_out(text):
    """Comments removed, string and char literals emptied."""
    return LEXICAL_RE.sub(lambda m: "" if m.group(0).startswith("/") else '""', text)


def module_files(src):
    """Module path (tuple) -> file, for every .rs file under src that is not test code."""
    out = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs") or f == "tests.rs":
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, src)[:-3].split(os.sep)
            if rel[-1] in ("lib", "main") and len(rel) == 1:
                mod = ()
            elif rel[-1] == "mod":
                mod = tuple(rel[:-1])
            else:
                mod = tuple(rel)
            if rel[0] == "bin":
                continue
            out[mod] = path
    return out


def expand_use(tree):
    """`a::{b, c::{d, e}}` -> ["a::b", "a::c::d", "a::c::e"]."""
    tree = re.sub(r"\s+", "", tree)
    i = tree.find("{")
    if i < 0:
        return [tree.split(" as ")[0]]
    prefix, body = tree[:i], tree[i + 1 : tree.rfind("}")]
    parts, depth, cur = [], 0, ""
    for ch in body:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    if cur:
        parts.append(cur)
    return [p for part in parts if part for p in expand_use(prefix + part)]


def strip_test_modules(text):
    """Drops `#[cfg(test)] mod x { ... }` blocks (their imports are the tests')."""
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i : m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += text[j] == "{"
            depth -= text[j] == "}"
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def resolve(path, here, mods):
    """The module file a path names, or None (another crate, or a module-less name)."""
    segs = path.split("::")
    if segs[0] == "crate":
        base, rest = (), segs[1:]
    elif segs[0] in ("super", "self"):
        base = here
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                base = base[:-1]
            segs = segs[1:]
        rest = segs
    elif here + (segs[0],) in mods:
        # A child module named without `self::` (uniform paths).
        base, rest = here, segs
    else:
        return None
    for n in range(len(rest), -1, -1):
        cand = base + tuple(rest[:n])
        if cand in mods:
            return mods[cand]
    return None


def edges_of(src):
    mods = module_files(src)
    edges = {}
    for mod, path in mods.items():
        text = open(path, encoding="utf-8").read()
        text = strip_test_modules(blank_out(text))
        names = []
        for m in USE_RE.finditer(text):
            names += [p for p in expand_use(m.group(1)) if not p.endswith("::*")]
        names += PATH_RE.findall(text)
        for n in names:
            target = resolve(n, mod, mods)
            if target and target != path:
                edges.setdefault(path, {}).setdefault(target, set()).add(n.split("::")[-1])
    return edges


def circles(edges):
    """Tarjan's strongly connected components of two or more files."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    nodes = set(edges) | {t for ts in edges.values() for t in ts}

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    crates = sys.argv[1:] or sorted(
        os.path.join(root, d) for d in os.listdir(root) if os.path.isdir(os.path.join(root, d, "src"))
    )
    found = 0
    for c in crates:
        edges = edges_of(os.path.join(c, "src"))
        for comp in circles(edges):
            found += 1
            print(f"import circle in {os.path.relpath(c, root)}: " + ", ".join(os.path.relpath(p, root) for p in comp))
            for a in comp:
                for b, names in sorted(edges.get(a, {}).items()):
                    if b in comp:
                        print(f"  {os.path.relpath(a, root)} -> {os.path.relpath(b, root)}: {', '.join(sorted(names))}")
    if found:
        sys.exit(1)
    print(f"no import circles in {len(crates)} crates")


if __name__ == "__main__":
    main()
