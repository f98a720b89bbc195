#!/bin/bash
# fallocate calls (the node's page reservation) in the warm-up and in the timed phase of the
# put_large shape, traced across the driver and every process it starts.
# usage: reserve_probe.sh TREE PYTHON
set -u
T=$1; PY=$2; H=$(cd "$(dirname "$0")" && pwd); TR=$(mktemp)
(cd "$T" && PYTHONPATH=$T strace -f --seccomp-bpf -ttt -e trace=fallocate -o "$TR" \
    "$PY" "$H/reserve_probe.py") > "$TR.out" 2>&1
cat "$TR.out"
awk -v w="$(awk '/^phase warmup/ {print $3}' "$TR.out")" \
    -v t="$(awk '/^phase timed/ {print $3}' "$TR.out")" \
    -v e="$(awk '/^phase end/ {print $3}' "$TR.out")" '
  /fallocate\(/ { split($0, a, ", "); n = a[4] + 0; ts = $2 + 0
    if (ts >= w && ts < t) { wc++; wb += n } else if (ts >= t && ts <= e) { tc++; tb += n } }
  END { printf "fallocate calls: warm-up %d (%d MiB), timed phase %d (%d MiB)\n", wc, wb / 1048576, tc, tb / 1048576 }' "$TR"
rm -f "$TR" "$TR.out"
