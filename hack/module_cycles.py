#!/usr/bin/env python3
"""Import cycles between the top-level modules of a crate.

    hack/module_cycles.py CRATE_SRC_DIR [ROOT_FILE]

A module `a` depends on `b` when `a`'s file (a.rs, or every file under a/) names `crate::b` or, from a
top-level file, `super::b`. Prints each cycle found (one strongly connected component per line) and exits 1
when there is one; `use super::*` inside unit-test modules is not a dependency.

A folder whose mod.rs declares only public submodules (doc comments and `pub mod x;` lines: a room that
groups modules by role, such as the recommender's `views/`) is not a module of its own: each module in it
counts as one, named `room::x`, and `crate::room::x` names it.
"""
import pathlib
import re
import sys


def is_room(d: pathlib.Path) -> bool:
    """Whether folder `d` only groups modules: its mod.rs has doc comments and `pub mod x;` lines only."""
    mod = d / "mod.rs"
    if not mod.is_file():
        return False
    lines = [l.strip() for l in mod.read_text().splitlines() if l.strip()]
    return all(l.startswith("//") or re.fullmatch(r"pub mod \w+;", l) for l in lines)


def modules(src: pathlib.Path, root: str) -> dict[str, list[pathlib.Path]]:
    """Top-level module name -> the files that make it up (the crate root is excluded); a room's modules
    are named `room::x`."""
    out: dict[str, list[pathlib.Path]] = {}
    for f in src.iterdir():
        if f.is_file() and f.suffix == ".rs" and f.name != root:
            out.setdefault(f.stem, []).append(f)
        elif f.is_dir() and f.name != "bin" and is_room(f):
            for g in f.iterdir():
                if g.is_file() and g.suffix == ".rs" and g.name != "mod.rs":
                    out.setdefault(f"{f.name}::{g.stem}", []).append(g)
                elif g.is_dir():
                    out.setdefault(f"{f.name}::{g.name}", []).extend(sorted(g.rglob("*.rs")))
        elif f.is_dir() and f.name != "bin":
            out.setdefault(f.name, []).extend(sorted(f.rglob("*.rs")))
    return out


def strip_tests(text: str) -> str:
    """Drops `#[cfg(test)] mod … { … }` blocks (brace-matched), so test imports don't count."""
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i : m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def deps(mods: dict[str, list[pathlib.Path]], src: pathlib.Path) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, files in mods.items():
        for f in files:
            # Comments (doc links included) are not dependencies.
            text = re.sub(r"//[^\n]*", "", strip_tests(f.read_text()))
            top_level = f.parent == src
            paths = re.findall(r"\bcrate::(\w+(?:::\w+)?)", text)
            if top_level:
                paths += re.findall(r"\bsuper::(\w+(?:::\w+)?)", text)
            # `use crate::{a, b::c}` groups
            for group in re.findall(r"\bcrate::\{([^}]*)\}", text):
                paths += [g.strip() for g in group.split(",") if g.strip()]
            for path in paths:
                parts = path.split("::")
                # A room's module is its first two segments; any other module its first.
                ref = "::".join(parts[:2]) if "::".join(parts[:2]) in mods else parts[0]
                if ref in mods and ref != name:
                    graph[name].add(ref)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main() -> int:
    src = pathlib.Path(sys.argv[1])
    root = sys.argv[2] if len(sys.argv) > 2 else ("lib.rs" if (src / "lib.rs").exists() else "main.rs")
    found = cycles(deps(modules(src, root), src))
    for comp in found:
        print("cycle: " + " <-> ".join(comp))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
