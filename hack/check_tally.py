"""The pass/fail tally the Python checks under hack/ print: one "ok"/"FAIL" line per check and
"NAME: N passed, N failed" last (the line hack/test.sh adds up)."""

from __future__ import annotations


class Tally:
    """Counts and prints checks."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.passed = 0
        self.failed = 0

    def report(self, ok: bool, check: str, detail: str = "") -> None:
        """Prints one check's line; a failure's detail follows, indented."""
        if ok:
            self.passed += 1
            print(f"ok    {check}")
        else:
            self.failed += 1
            print(f"FAIL  {check}:\n      " + detail.replace("\n", "\n      "))

    def summary(self) -> int:
        """Prints the last line; the exit code (1 when a check failed)."""
        print(f"{self.name}: {self.passed} passed, {self.failed} failed")
        return 1 if self.failed else 0
