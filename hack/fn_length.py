#!/usr/bin/env python3
"""Shipped functions longer than a limit, against an allow-list that gives the reason for each.

    hack/fn_length.py [--max 80] [--allow hack/checks/long-functions.txt] [--list] SRC_DIR...

A function's length is the number of lines from its `fn` line to its closing brace. Shipped code is every
`.rs` file under the given `src/` directories except unit-test code: `#[cfg(test)]` modules, and files
declared as one (`#[cfg(test)] mod tests;`). Allow-list lines are `path::function  reason` (path relative to
the repository root, `#` starts a comment); an entry without a reason, or naming a function that is no
longer over the limit, is an error too, so the list shrinks as functions are split. Exits 1 on any finding;
`--list` prints every function over the limit (allowed or not) with its length.
"""
import argparse
import pathlib
import re
import sys

from rust_text import blank as blank_out

FN = re.compile(r"\bfn\s+(\w+)")
TEST_MOD = re.compile(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*([;{])")


def block_end(text: str, open_at: int) -> int:
    """Index just past the brace closing the one at `open_at`."""
    depth, j = 0, open_at
    while j < len(text):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return len(text)


def test_files(srcs: list[pathlib.Path]) -> set[pathlib.Path]:
    """Files that are `#[cfg(test)] mod name;` of their parent."""
    out = set()
    for src in srcs:
        for f in src.rglob("*.rs"):
            text = blank_out(f.read_text())
            base = f.parent if f.name in ("mod.rs", "lib.rs", "main.rs") else f.parent / f.stem
            for m in TEST_MOD.finditer(text):
                if m.group(2) == ";":
                    out |= {base / f"{m.group(1)}.rs", *(base / m.group(1)).rglob("*.rs")}
    return out


def functions(path: pathlib.Path):
    """(name, first line, length in lines) of every non-test function of `path`."""
    text = blank_out(path.read_text())
    skip = []
    for m in TEST_MOD.finditer(text):
        if m.group(2) == "{":
            skip.append((m.start(), block_end(text, m.end() - 1)))
    for m in FN.finditer(text):
        if any(a <= m.start() < b for a, b in skip):
            continue
        # The body opens at the first `{` after the signature, unless a `;` comes first (a declaration). A `;`
        # inside brackets or parentheses is part of a type (`[u64; 2]`), not the end of a declaration.
        j, depth = m.end(), 0
        while j < len(text) and not (depth == 0 and text[j] in "{;"):
            if text[j] in "([":
                depth += 1
            elif text[j] in ")]":
                depth = max(0, depth - 1)
            j += 1
        if j >= len(text) or text[j] == ";":
            continue
        end = block_end(text, j)
        first = text.count("\n", 0, m.start()) + 1
        last = text.count("\n", 0, end - 1) + 1
        yield m.group(1), first, last - first + 1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max", type=int, default=80)
    ap.add_argument("--allow", type=pathlib.Path)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("srcs", nargs="+", type=pathlib.Path)
    args = ap.parse_args()

    allowed: dict[str, str] = {}
    problems = []
    if args.allow:
        for n, line in enumerate(args.allow.read_text().splitlines(), 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            key, _, reason = line.partition(" ")
            if not reason.strip():
                problems.append(f"{args.allow}:{n}: {key} has no reason")
            allowed[key] = reason.strip()

    tests = test_files(args.srcs)
    long = {}
    for src in args.srcs:
        for f in sorted(src.rglob("*.rs")):
            if f in tests:
                continue
            for name, line, length in functions(f):
                if length > args.max:
                    long[f"{f}::{name}"] = (line, length)

    for key, (line, length) in sorted(long.items()):
        path = key.rsplit("::", 1)[0]
        if args.list:
            print(f"{length:4} {path}:{line} {key.rsplit('::', 1)[1]}{'' if key in allowed else '  (not allowed)'}")
        elif key not in allowed:
            problems.append(f"{path}:{line}: {key.rsplit('::', 1)[1]} is {length} lines (over {args.max}, not in the allow-list)")
    for key in sorted(set(allowed) - set(long)):
        problems.append(f"{key} is in the allow-list but not over {args.max} lines: remove the entry")
    for p in problems:
        print(p)
    if not args.list:
        print(f"{len(long)} functions over {args.max} lines, {len(allowed)} allowed, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
