#!/bin/bash
# Interleaved A/B of actor_sync (bench_actor_sync_threads.py): main (A, its own worktree)
# against this branch (B), each run from its own checkout with PYTHONPATH set to it (so the
# driver, not only the node and workers, imports that checkout's zmesh), the raw pyzmq ipc
# REQ/REP round trip measured right before each run, the load average printed.
#   ab.sh A_DIR B_DIR ROUNDS OUT_DIR
set -u
A=$1; B=$2; ROUNDS=$3; OUT=$4
PY=/work/main/.venv/bin/python
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
for r in $(seq 1 "$ROUNDS"); do
  if (( r % 2 )); then order="A B"; else order="B A"; fi
  for side in $order; do
    dir=$A; [ "$side" = B ] && dir=$B
    raw=$($PY "$HERE/rawrt.py" --n 20000 | awk '{print $2}')
    load=$(cut -d' ' -f1 /proc/loadavg)
    (cd "$dir" && PYTHONPATH="$dir" timeout 300 $PY benchmarks/bench_actor_sync_threads.py \
        --calls 3000 --rounds 2 --json "$OUT/r$r-$side.json" > "$OUT/r$r-$side.txt" 2>&1)
    echo "round $r side $side raw $raw load $load $(head -1 "$OUT/r$r-$side.txt")"
    echo "{\"round\": $r, \"side\": \"$side\", \"raw_rt_per_s\": $raw, \"load1\": $load}" \
      > "$OUT/r$r-$side.meta.json"
  done
done
