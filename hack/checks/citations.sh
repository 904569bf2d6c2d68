#!/usr/bin/env bash
# Citations a reader of the repository can follow. Two checks over every tracked text file (`git grep -I`):
#
# 1. No pointer into material outside the repository: the old design brief (a relative path into a sibling
#    "shared" directory, the file name DESIGN plus ".md", or a "spec/<name>.md" path that is not
#    docs/design/<name>.md) and the internal tracker ("issue N", "issues N, M"), anywhere (decision records
#    carry dates, not tracker numbers). Allowed: a number attributed to a public repository written right
#    before it ("kubernetes/autoscaler issue 8424"). Public references such as
#    kubernetes/autoscaler#8424 or a GitHub URL never match.
# 2. Every section sign names a section that exists. Each "§N" or "§N.M" on a line attaches to the nearest path
#    of a tracked file before it on the same line (or, when none is before it, the first one after it); a path
#    counts when it resolves from the repository root or from the citing file's directory. When that file is
#    Markdown, it must have a heading numbered N (or N.M): "## 3. …", "### 3.1 …". A line naming no tracked
#    file may use "§" only in a Markdown file, for the file's own numbered sections.
#
# Each failure prints path:line and what is wrong. Last line: "citations: N passed, N failed".
set -uo pipefail
# shellcheck source=../check-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../check-lib.sh"
cd "$(dirname "$0")/../.." || exit 1

# The rules above, in one Python pass; $1 selects the check.
citations() {
  python3 - "$1" <<'EOF'
import os
import re
import subprocess
import sys

check = sys.argv[1]
tracked = set(subprocess.run(["git", "ls-files", "-z"], capture_output=True, text=True,
                             check=True).stdout.split("\0"))


def grep(pattern, *pathspec):
    out = subprocess.run(["git", "grep", "-nIP", pattern, "--", ".", *pathspec],
                         capture_output=True, text=True)
    if out.returncode > 1:
        sys.exit(out.stderr)
    for line in out.stdout.splitlines():
        path, num, text = line.split(":", 2)
        yield path, int(num), text


bad = []
if check == "pointers":
    pointer = re.compile(r"\.\./shared|DESIGN\.md|(?<![\w/.-])spec/[\w-]+\.md|\b[Ii]ssues? [0-9]+")
    public = re.compile(r"[\w.-]+/[\w.-]+ $")
    for path, num, text in grep(pointer.pattern, ":!hack/checks/citations.sh"):
        for m in pointer.finditer(text):
            if m.group(0)[0] in "Ii" and public.search(text[:m.start()]):
                continue
            bad.append(f"{path}:{num}: {m.group(0)!r}: {text.strip()[:160]}")
else:
    path_token = re.compile(r"[\w./-]*\w\.[A-Za-z0-9]+")
    section = re.compile(r"§\s?(\d+(?:\.\d+)*)")
    heading = re.compile(r"^#{1,6}\s+(\d+(?:\.\d+)*)[.\s]", re.M)
    numbers = {}

    def sections(md):
        if md not in numbers:
            with open(md, encoding="utf-8") as f:
                numbers[md] = set(heading.findall(f.read()))
        return numbers[md]

    def resolve(token, citing):
        token = token.rstrip(".")
        for base in ("", os.path.dirname(citing)):
            candidate = os.path.normpath(os.path.join(base, token))
            if candidate in tracked:
                return candidate
        return None

    for path, num, text in grep("§"):
        files = [(m.start(), f) for m in path_token.finditer(text) if (f := resolve(m.group(0), path))]
        for m in section.finditer(text):
            before = [f for at, f in files if at < m.start()]
            after = [f for at, f in files if at > m.start()]
            target = before[-1] if before else (after[0] if after else None)
            if target is None and not path.endswith(".md"):
                bad.append(f"{path}:{num}: {m.group(0)} names no file of the repository on its line")
                continue
            target = target or path
            if target.endswith(".md"):
                n = m.group(1)
                have = sections(target)
                if n not in have and not any(h.startswith(n + ".") for h in have):
                    bad.append(f"{path}:{num}: {m.group(0)}: {target} has no section {n}")

for line in bad:
    print(line)
sys.exit(1 if bad else 0)
EOF
}

run "no pointers to the old design brief or the internal tracker" citations pointers
run "every § names a tracked file on its line, and a section that file has" citations sections
echo "citations: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
