#!/usr/bin/env python3
"""Writes the values table of charts/tailor/README.md from the "# -- text" comments in values.yaml.

    hack/chart_readme.py           rewrite the table between the README's markers
    hack/chart_readme.py --check   exit 1 when the table is stale or a value is undocumented

A "# -- text" comment documents the key on the next line; a documented key's children are covered by it.
Every leaf of values.yaml must be documented by itself or by an ancestor.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "tailor"
START = "<!-- values-table-start -->"
END = "<!-- values-table-end -->"
KEY_RE = re.compile(r"^(\s*)([A-Za-z0-9_.-]+):(?:\s|$)")


def documented_keys(text: str) -> dict[str, str]:
    """Map of dotted key path -> description, in file order."""
    docs: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    pending: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            pending = [stripped[4:].strip()]
            continue
        if stripped.startswith("#") and pending:
            pending.append(stripped[1:].strip())
            continue
        m = KEY_RE.match(line)
        if not m or stripped.startswith("-"):
            if stripped:
                pending = []
            continue
        indent, key = len(m.group(1)), m.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key))
        path = ".".join(k for _, k in stack)
        if pending:
            docs[path] = " ".join(pending)
            pending = []
    return docs


def leaves(value, prefix: str = ""):
    if isinstance(value, dict) and value:
        for k, v in value.items():
            yield from leaves(v, f"{prefix}.{k}" if prefix else str(k))
    else:
        yield prefix


def lookup(values: dict, path: str):
    cur = values
    for part in path.split("."):
        cur = cur[part]
    return cur


def type_name(v) -> str:
    if v is None:
        return "int or string"
    return {bool: "bool", int: "int", float: "number", str: "string", list: "list", dict: "object"}[type(v)]


def cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def table(values: dict, docs: dict[str, str]) -> str:
    rows = ["| Key | Type | Default | Description |", "|---|---|---|---|"]
    for path, desc in docs.items():
        v = lookup(values, path)
        default = json.dumps(v, separators=(",", ":"), ensure_ascii=False)
        rows.append(f"| `{path}` | {type_name(v)} | `{cell(default)}` | {cell(desc)} |")
    return "\n".join(rows)


def main() -> int:
    check = "--check" in sys.argv[1:]
    text = (CHART / "values.yaml").read_text()
    values = yaml.safe_load(text)
    docs = documented_keys(text)
    problems = []
    for leaf in leaves(values):
        parts = leaf.split(".")
        if not any(".".join(parts[:i]) in docs for i in range(1, len(parts) + 1)):
            problems.append(f"values.yaml: {leaf} has no '# --' description")
    readme_path = CHART / "README.md"
    readme = readme_path.read_text()
    if START not in readme or END not in readme:
        problems.append(f"README.md lacks the markers {START} / {END}")
    else:
        head, rest = readme.split(START, 1)
        _, tail = rest.split(END, 1)
        new = f"{head}{START}\n{table(values, docs)}\n{END}{tail}"
        if new != readme:
            if check:
                problems.append("README.md values table is stale: run hack/chart_readme.py")
            else:
                readme_path.write_text(new)
                print("README.md values table rewritten")
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
