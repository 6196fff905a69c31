#!/usr/bin/env python3
"""Module dependency cycles in the workspace's Rust crates.

A module is one source file (`foo.rs` or `foo/mod.rs`; a `#[path]` test file counts as its
parent). Module A depends on module B when A names B by path (`crate::…`, `super::…`, or the
crate's name from another crate's file) and neither contains the other: a parent that declares
its children and the children that use their parent's items are one unit. Prints every strongly
connected component of more than one module and exits 1 if there is any; `--tree` prints the
folders and their line counts first.

Folders of the plugin crate (the top-level modules of plugin/src: `nri`, `cluster`, ..., and the
single files at that level, `run`): folder Y uses folder X when a file anywhere under Y names X
by path (`crate::x::…`, or a `super::` that climbs out of Y). It exits 1, naming a file of each
edge, when two folders use each other (or any longer cycle of folders), and when a use is not in
the table of plugin/src/lib.rs ("Which folder may use which": one row per folder, the folders it
may use in backticks): a folder without a row, a row for no folder, an edge the row does not
allow, or a table that is itself a cycle. A row's folder it does not use is only noted.

Usage: hack/module-cycles.py [--tree] [crate_dir ...]   (default: every crate in the workspace;
       the folder check runs when plugin is one of them)
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
# The crate whose top-level folders are checked, and the table that says which may use which.
FOLDER_CRATE = "plugin"
TABLE_HEADING = "Which folder may use which"
ROW_RE = re.compile(r"^//!\s*\|\s*`(%s)`\s*\|(.*)\|\s*$" % SEG)


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


def components(graph):
    """Tarjan's strongly connected components of more than one vertex, each sorted."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
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
    return components(graph)


def folder_edges(crate_dir):
    """The top-level folders of the crate, and (user, used) -> {(file module, named module)}."""
    src = os.path.join(crate_dir, "src")
    mods = modules_of(src)
    edges = {}
    for m, path in mods.items():
        if not m:
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for t in edges_of(mods, owner(mods, m), text):
            if t and t[0] != m[0]:
                edges.setdefault((m[0], t[0]), set()).add((m, t))
    return {m[0] for m in mods if m}, edges


def folder_table(lib_rs):
    """The rows of lib.rs's table under TABLE_HEADING: folder -> the folders it may use."""
    table, inside = {}, False
    with open(lib_rs, encoding="utf-8") as f:
        for line in f:
            if TABLE_HEADING in line:
                inside = True
                continue
            if not inside:
                continue
            m = ROW_RE.match(line.rstrip("\n"))
            if m:
                table[m.group(1)] = set(re.findall(r"`(%s)`" % SEG, m.group(2)))
            elif table and not line.strip().startswith("//! |"):
                break
    return table


def folder_problems(crate_dir):
    """Every way the crate's folders break the rules above, and the notes; printed by main."""
    name = lambda m: "::".join(m)
    folders, edges = folder_edges(crate_dir)
    lib_rs = os.path.join(crate_dir, "src", "lib.rs")
    table = folder_table(lib_rs)
    bad, notes = [], []

    def example(a, b):
        m, t = sorted(edges[(a, b)])[0]
        more = len(edges[(a, b)]) - 1
        return f"{name(m)} uses {name(t)}" + (f" (+{more} more)" if more else "")

    for a, b in sorted(edges):
        if a < b and (b, a) in edges:
            bad.append(f"folders both ways: {a} <-> {b}: {example(a, b)}; {example(b, a)}")
    graph = {f: set() for f in folders}
    for a, b in edges:
        graph[a].add(b)
    for comp in components(graph):
        if len(comp) > 2:
            bad.append("folder cycle: " + " <-> ".join(comp))
    if not table:
        bad.append(f"{lib_rs}: no table under \"{TABLE_HEADING}\"")
        return bad, notes
    for f in sorted(folders - set(table)):
        bad.append(f"{lib_rs}: no row for folder {f}")
    for f in sorted(set(table) - folders):
        bad.append(f"{lib_rs}: a row for {f}, which is not a folder of {crate_dir}/src")
    for a, b in sorted(edges):
        if a in table and b not in table[a]:
            bad.append(f"{a} uses {b}, which its row in {lib_rs} does not allow: {example(a, b)}")
    for comp in components(table):
        bad.append(f"{lib_rs}: the table is a cycle: " + " <-> ".join(comp))
    for a in sorted(table):
        for b in sorted(table[a]):
            if (a, b) not in edges and b in folders:
                notes.append(f"note: {a} may use {b} ({lib_rs}) but does not")
    return bad, notes


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
    folder_bad = []
    if FOLDER_CRATE in crates:
        folder_bad, notes = folder_problems(FOLDER_CRATE)
        for line in notes + [f"{FOLDER_CRATE}: {p}" for p in folder_bad]:
            print(line)
    if bad or folder_bad:
        print(f"{bad} module cycle(s), {len(folder_bad)} folder problem(s)")
        sys.exit(1)
    print("no module cycles in " + ", ".join(crates))
    if FOLDER_CRATE in crates:
        print(f"{FOLDER_CRATE}/src: every folder uses only what lib.rs's table allows; none both ways")


if __name__ == "__main__":
    main()
