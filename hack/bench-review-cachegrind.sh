#!/usr/bin/env bash
# What one cold pod review costs, counted instead of timed: `loadgen cold` under valgrind's callgrind with its
# cache simulator. Every workload is reviewed twice first (the patch memo filled, as in a cluster), then each
# counted review follows 8 MiB written by the process, twice the simulated last-level cache (4 MiB), so it
# starts with none of its code or data cached, as a review at a steady rate on a busy machine nearly does.
# Only the review is counted (`cold_review`), on the webhook's allocator (mimalloc, as the shipped binary). The
# counts are the same on every run of the same build, whatever else the machine does; the build's code layout
# alone moves the total of code lines by about 25, so a smaller change shows in its functions' rows (--top).
#
# Usage: hack/bench-review-cachegrind.sh [--profile dist|release] [--reviews N] [--pod realistic|small]
#        [--memo-off] [--top K]
# Prints per review:
#   cold_review_instructions=N          instructions executed
#   cold_review_code_lines_missed=N     64-byte lines of code fetched from memory (last-level misses)
#   cold_review_data_lines_read_missed=N, cold_review_data_lines_written_missed=N   the same for data
# and before them the K functions that missed the most code lines (their own code, not their callees').
# Times are not measured here: hack/bench-webhook.sh does that. Needs valgrind (Debian's `valgrind`).
set -euo pipefail
cd "$(dirname "$0")/.."

PROFILE=dist
REVIEWS=50
POD=realistic
MEMO=()
TOP=15
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) PROFILE=$2; shift 2 ;;
    --reviews) REVIEWS=$2; shift 2 ;;
    --pod) POD=$2; shift 2 ;;
    --memo-off) MEMO=(--memo-off); shift ;;
    --top) TOP=$2; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
case "$PROFILE" in
  dist|release) ;;
  *) echo "--profile must be dist or release" >&2; exit 2 ;;
esac
case "$REVIEWS$TOP" in
  ''|*[!0-9]*) echo "--reviews and --top must be whole numbers" >&2; exit 2 ;;
esac
[ "$REVIEWS" -gt 0 ] || { echo "--reviews must be at least 1" >&2; exit 2; }
if ! command -v valgrind >/dev/null || ! command -v callgrind_annotate >/dev/null; then
  echo "valgrind is needed (Debian: apt-get install valgrind)" >&2
  exit 1
fi

# The load generator in the profile measured: what it counts is the webhook's library code.
cargo build --profile "$PROFILE" -q -p tailor-admission --example loadgen
LOADGEN=target/$PROFILE/examples/loadgen
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$LOADGEN" setup --dir "$WORK" --vpas 1000 >/dev/null

valgrind --tool=callgrind --cache-sim=yes --I1=32768,8,64 --D1=32768,8,64 --LL=4194304,16,64 \
  --collect-atstart=no --toggle-collect='*cold_review*' --callgrind-out-file="$WORK/callgrind.out" \
  "$LOADGEN" cold --dir "$WORK" --reviews "$REVIEWS" --pod "$POD" --evict-mib 8 "${MEMO[@]}" \
  >"$WORK/valgrind.log" 2>&1 || { cat "$WORK/valgrind.log" >&2; exit 1; }

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); profile $PROFILE; pod $POD; ${REVIEWS} reviews${MEMO:+, memo off}"
python3 - "$WORK/callgrind.out" "$REVIEWS" "$TOP" <<'EOF'
import re, subprocess, sys

out, reviews, top = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
EVENTS = "Ir,ILmr,DLmr,DLmw"
ROW = re.compile(r"^\s*((?:(?:[\d,]+ \(\s*[\d.]+%\)|\.)\s+){4})(.*)$")
CELL = re.compile(r"[\d,]+ \(\s*[\d.]+%\)|\.")


def rows(*flags):
    text = subprocess.run(["callgrind_annotate", "--threshold=100", "--show=" + EVENTS, *flags, out],
                          capture_output=True, text=True, check=True).stdout
    for line in text.splitlines():
        m = ROW.match(line)
        if m:
            cells = [0 if c == "." else int(c.split()[0].replace(",", "")) for c in CELL.findall(m.group(1))]
            name = re.sub(r"\s+\[.*\]$", "", m.group(2)).replace("???:", "")
            yield cells, name


own = list(rows("--sort=ILmr"))
total = next((c for c, n in own if n == "PROGRAM TOTALS"), None)
if total is None:
    sys.exit("callgrind counted nothing: was cold_review inlined?")
print(f"top {top} by code lines missed (own code; per review: instructions, code lines, data lines read, written):")
for cells, name in [r for r in own if r[1] != "PROGRAM TOTALS"][:top]:
    ir, il, dr, dw = (c / reviews for c in cells)
    print(f"  {ir:9.0f} {il:6.1f} {dr:6.1f} {dw:6.1f}  {name[:110]}")
ir, il, dr, dw = (c / reviews for c in total)
print(f"cold_review_instructions={ir:.0f}")
print(f"cold_review_code_lines_missed={il:.0f}")
print(f"cold_review_data_lines_read_missed={dr:.0f}")
print(f"cold_review_data_lines_written_missed={dw:.0f}")
EOF
