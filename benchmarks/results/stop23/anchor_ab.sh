#!/bin/bash
# Interleaved A/B of the anchor's actor_sync, actor_async and tasks_sync: main (A) against
# this branch (B), each from its own checkout with PYTHONPATH set to it, the raw pyzmq ipc
# REQ/REP round trip measured right before each run, the load average printed. The host is
# never quiet here (load 6-12), so the anchor's quiet wait and retries are off.
#   [ONLY=workloads] anchor_ab.sh A_DIR B_DIR ROUNDS OUT_DIR
set -u
A=$1; B=$2; ROUNDS=$3; OUT=$4
PY=/work/main/.venv/bin/python
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
for r in $(seq 1 "$ROUNDS"); do
  if (( r % 2 )); then order="B A"; else order="A B"; fi
  for side in $order; do
    dir=$A; [ "$side" = B ] && dir=$B
    raw=$($PY "$HERE/rawrt.py" --n 20000 | awk '{print $2}')
    load=$(cut -d' ' -f1 /proc/loadavg)
    (cd "$dir" && PYTHONPATH="$dir" timeout 600 $PY /work/shared/bench/anchor_bench.py \
        --backend zmesh --only "${ONLY:-actor_sync,actor_async,tasks_sync}" --quiet-wait 0 --retries 1 \
        --json "$OUT/r$r-$side.json" > "$OUT/r$r-$side.txt" 2>&1)
    echo "round $r side $side raw $raw load $load"
    echo "{\"round\": $r, \"side\": \"$side\", \"raw_rt_per_s\": $raw, \"load1\": $load}" \
      > "$OUT/r$r-$side.meta.json"
  done
done
