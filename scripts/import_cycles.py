#!/usr/bin/env python3
"""Lists the file-level `crate::` import graph of a crate's src/ directory and
the groups of files that import each other in a circle (strongly connected
components). Exits 1 when a group holds more than MAX files.

    scripts/import_cycles.py crates/server/src [--max 2] [--graph]

A file is a node (lib.rs included: `crate::Item` for an item lib.rs defines
is an edge to lib.rs). Code inside `#[cfg(test)] mod tests` is left out.
"""
import re
import sys
from pathlib import Path


def strip_tests(text):
    # drops a trailing `#[cfg(test)] mod tests { ... }` block (by braces)
    m = re.search(r"#\[cfg\(test\)\]\s*mod \w+\s*\{", text)
    if not m:
        return text
    depth, i = 0, m.end() - 1
    while i < len(text):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[: m.start()] + strip_tests(text[i + 1 :])
        i += 1
    return text[: m.start()]


def strip_comments(text):
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def module_of(path, root):
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "mod":
        parts = parts[:-1]
    return "::".join(parts) if parts != ["lib"] else ""


def heads(group):
    """The first path segment of each item of a `use crate::{...}` group."""
    out, depth, cur = [], 0, ""
    for ch in group:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(cur)
            cur = ""
            continue
        if depth == 0 or ch not in "{}":
            cur += ch if depth == 0 else ""
    out.append(cur)
    return [re.split(r"::|\s", h.strip())[0] for h in out if h.strip()]


def resolve(path, mods):
    """The file of the longest module prefix of `path` (a list of segments);
    an item of the crate root is lib.rs."""
    for n in range(len(path), 0, -1):
        m = "::".join(path[:n])
        if m in mods:
            return mods[m]
    return mods[""]


def paths_after(text, prefix):
    """Every path that follows `prefix` (`crate::`, `super::`), a `{...}`
    group expanded into its members' first segments."""
    out = []
    for m in re.finditer(rf"(?<![\w:]){prefix}((?:\w+::)*)(\{{|\w+)", text):
        head = [x for x in m.group(1).split("::") if x]
        if m.group(2) == "{":
            depth, i = 1, m.end()
            while depth and i < len(text):
                depth += {"{": 1, "}": -1}.get(text[i], 0)
                i += 1
            out += [head + [h] for h in heads(text[m.end() : i - 1])]
        else:
            out.append(head + [m.group(2)])
    return out


def graph(root):
    root = Path(root)
    files = sorted(root.rglob("*.rs"))
    mods = {module_of(f, root): f.relative_to(root).as_posix() for f in files}
    edges = {}
    for f in files:
        name = f.relative_to(root).as_posix()
        text = strip_comments(strip_tests(f.read_text()))
        me = module_of(f, root)
        here = me.split("::") if me else []
        own = f.name in ("lib.rs", "mod.rs")
        targets = [resolve(p, mods) for p in paths_after(text, "crate::")]
        if here:
            # `super::` of a/b.rs is a (of a/b/mod.rs too, relative to a::b)
            parent = here[:-1]
            targets += [resolve(parent + p, mods) for p in paths_after(text, "super::")]
        # a module's own children, named without `crate::`
        for child in re.findall(r"(?m)^\s*(?:pub(?:\([^)]*\))?\s+)?mod (\w+);", text):
            if re.search(rf"(?<![\w:]){child}::", text):
                targets.append(mods.get("::".join(here + [child]), name))
        for dest in targets:
            if dest != name:
                edges.setdefault(name, set()).add(dest)
        del own
    return sorted(mods.values()), edges


def sccs(nodes, edges):
    # Tarjan's algorithm
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
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
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            visit(v)
    return out


def main():
    args = sys.argv[1:]
    limit = 2
    if "--max" in args:
        i = args.index("--max")
        limit = int(args[i + 1])
        del args[i : i + 2]
    show = "--graph" in args
    args = [a for a in args if a != "--graph"]
    if len(args) != 1:
        sys.exit(__doc__)
    nodes, edges = graph(args[0])
    if show:
        for n in nodes:
            print(f"{n} -> {', '.join(sorted(edges.get(n, ()))) or '-'}")
    bad = 0
    for comp in sccs(nodes, edges):
        if len(comp) < 2:
            continue
        pairs = [f"{a} -> {b}" for a in comp for b in sorted(edges.get(a, ())) if b in comp]
        print(f"cycle of {len(comp)} files: {', '.join(comp)}")
        print(f"  edges: {'; '.join(pairs)}")
        bad += len(comp) > limit
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
