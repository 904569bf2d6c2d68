#!/usr/bin/env python3
"""Glob imports (`use a::*;`, `pub use a::*;`, `use a::{b, c::*};`) in shipped Rust code.

    hack/glob_imports.py SRC_DIR...

Shipped code names what it imports, so a reader (and grep) finds where a name comes from. Globs are allowed
in test code only: an item under `#[cfg(test)]` (brace-matched, e.g. `mod tests { use super::*; }`), a file
such an attribute includes (`#[cfg(test)] mod tests;`) and everything under its directory, files named
`tests*.rs` and files under a `tests/` directory. Prints `path:line: statement` for each glob found and exits 1
when there is one.
"""
import pathlib
import re
import sys

from rust_text import blank

TEST_ATTR = re.compile(r"#\[cfg\((?:all\()?test\b[^\]]*\]")
USE = re.compile(r"\b(?:pub(?:\([^)]*\))?\s+)?use\s+[^;]*;")
MOD_DECL = re.compile(r"\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;")


def item_end(code: str, start: int) -> int:
    """End of the item starting at `start`: its first `;` outside braces, or the brace matching its first `{`."""
    depth, j = 0, start
    while j < len(code):
        c = code[j]
        if c == ";" and depth == 0:
            return j + 1
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return j


def module_file(f: pathlib.Path, name: str) -> list[pathlib.Path]:
    """Where `mod name;` in `f` lives: `name.rs` or `name/mod.rs` beside a mod.rs/lib.rs/main.rs, else under
    `f`'s own directory."""
    base = f.parent if f.name in ("mod.rs", "lib.rs", "main.rs") or f.parent.name == "bin" else f.with_suffix("")
    return [base / f"{name}.rs", base / name]


def scan(f: pathlib.Path, test_paths: set[pathlib.Path]) -> list[str]:
    """Glob imports outside test items in `f`; records the files of its `#[cfg(test)] mod x;` in `test_paths`."""
    code = blank(f.read_text())
    test_spans = []
    for m in TEST_ATTR.finditer(code):
        end = item_end(code, m.end())
        test_spans.append((m.start(), end))
        decl = MOD_DECL.match(code[m.end() : end])
        if decl:
            test_paths.update(module_file(f, decl.group(1)))
    hits = []
    for m in USE.finditer(code):
        if "*" not in m.group(0) or any(a <= m.start() < b for a, b in test_spans):
            continue
        line = code.count("\n", 0, m.start()) + 1
        hits.append(f"{f}:{line}: {' '.join(m.group(0).split())}")
    return hits


def is_test_file(f: pathlib.Path, test_paths: set[pathlib.Path]) -> bool:
    if f.name.startswith("tests") or "tests" in f.parts[:-1]:
        return True
    return any(f == p or p in f.parents for p in test_paths)


def main(dirs: list[str]) -> int:
    test_paths: set[pathlib.Path] = set()
    found = {}
    # Every file is scanned before any is judged, so each test module's files are known by then.
    files = sorted(p for d in dirs for p in pathlib.Path(d).rglob("*.rs"))
    for f in files:
        found[f] = scan(f, test_paths)
    hits = [h for f in files if not is_test_file(f, test_paths) for h in found[f]]
    for h in hits:
        print(h)
    return 1 if hits else 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1:]))
