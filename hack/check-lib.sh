#!/usr/bin/env bash
# Shared by the scripts under hack/checks/: `run NAME COMMAND...` runs one check, prints "ok   NAME" or
# "FAIL NAME" with the command's output indented, and counts it in $passed / $failed.
passed=0
failed=0
run() {
  local name=$1 out
  shift
  if out=$("$@" 2>&1); then
    echo "ok   $name"
    passed=$((passed + 1))
  else
    echo "FAIL $name"
    while IFS= read -r line; do echo "     $line"; done <<<"$out"
    failed=$((failed + 1))
  fi
}
