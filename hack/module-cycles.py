#!/usr/bin/env python3
"""Module dependency cycles in the workspace's Rust crates.

A module is one source file (`foo.rs` or `foo/mod.rs`; a `#[path]` test file counts as its
parent). Module A depends on module B when A names B by path (`crate::…`, `super::…`, or the
crate's name from another crate's file) and neither contains the other: a parent that declares
its children and the children that use their parent's items are one unit. Prints every strongly
connected component of more than one module and exits 1 if there is any; `--tree` prints the
folders and their line counts first.

Usage: hack/module-cycles.py [--tree] [crate_dir ...]   (default: every crate in the workspace)
"""
import os
import re
import sys

SEG = r"[a-z_][a-z0-9_]*"
PATH_RE = re.compile(r"(?<![\w:])((?:super::)+|crate::|self::)((?:%s)(?:::%s)*)" % (SEG, SEG))
GROUP_RE = re.compile(r"(?<![\w:])((?:super::)+|crate::|self::)((?:%s::)*)\{([^}]*)\}" % SEG)
COMMENT_RE = re.compile(r"//.*$", re.M)
STRING_RE = re.compile(r'"(?:\\.|[^"\\])*"')
DEFAULT_CRATES = ["proto", "core", "plugin", "testkit", "testkit/fuzz-props", "integration"]


def modules_of(src):
    """Module path (tuple) -> file, for every file under `src`."""
    mods = {}
    for dirpath, _, names in os.walk(src):
        for name in names:
            if not name.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, name), src)[:-3].split(os.sep)
            if rel[-1] in ("mod", "lib", "main") and len(rel) >= 1:
                rel = rel[:-1]
            mods[tuple(rel)] = os.path.join(dirpath, name)
    return mods


def owner(mods, module):
    """The file module a `#[path]` test file belongs to (its parent), else itself."""
    while module and module not in mods:
        module = module[:-1]
    return module


def longest_known(mods, chain):
    for n in range(len(chain), -1, -1):
        if tuple(chain[:n]) in mods:
            return tuple(chain[:n])
    return ()


def edges_of(mods, module, text):
    text = COMMENT_RE.sub("", STRING_RE.sub('""', text))
    found = set()
    refs = [(m.group(1), m.group(2).split("::")) for m in PATH_RE.finditer(text)]
    for m in GROUP_RE.finditer(text):
        prefix = [s for s in m.group(2).split("::") if s]
        for item in m.group(3).split(","):
            first = item.strip().split("::")[0].strip()
            if re.fullmatch(SEG, first):
                refs.append((m.group(1), prefix + [first]))
    for head, chain in refs:
        if head == "crate::":
            bases = [()]
        elif head == "self::":
            bases = [module]
        else:
            k = head.count("super::")
            # at the file's top level, or inside an inline module (tests) one level down
            bases = [module[: len(module) - k + d] for d in range(0, k) if len(module) - k + d >= 0]
        for base in bases:
            target = longest_known(mods, list(base) + chain)
            if len(target) > len(base) or (head == "crate::" and target):
                found.add(target)
                break
    return found


def cycles(crate_dir):
    src = os.path.join(crate_dir, "src")
    mods = modules_of(src)
    graph = {m: set() for m in mods}
    for m, path in mods.items():
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for t in edges_of(mods, owner(mods, m), text):
            if t == m or t[: len(m)] == m or m[: len(t)] == t:
                continue  # a module and what it contains are one unit
            graph[m].add(t)
    # Tarjan's strongly connected components
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def tree(crate_dir):
    src = os.path.join(crate_dir, "src")
    for dirpath, _, names in sorted(os.walk(src)):
        rs = [n for n in names if n.endswith(".rs")]
        lines = 0
        for n in rs:
            with open(os.path.join(dirpath, n), encoding="utf-8") as f:
                lines += sum(1 for _ in f)
        print(f"  {os.path.relpath(dirpath):<40} {len(rs):>3} files {lines:>6} lines")


def main():
    args = [a for a in sys.argv[1:] if a != "--tree"]
    crates = args or [c for c in DEFAULT_CRATES if os.path.isdir(os.path.join(c, "src"))]
    bad = 0
    for c in crates:
        if "--tree" in sys.argv:
            tree(c)
        for comp in cycles(c):
            bad += 1
            print(f"{c}: cycle: " + " <-> ".join("::".join(m) or "(root)" for m in comp))
    if bad:
        print(f"{bad} module cycle(s)")
        sys.exit(1)
    print("no module cycles in " + ", ".join(crates))


if __name__ == "__main__":
    main()
