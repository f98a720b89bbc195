#!/bin/bash
# put_large: d6d7dde vs main vs main with a one-step reservation, alternated in one sitting.
# Each arm runs the anchor's in-process workloads up to put_get_large by default (so the runtime
# is in the state the full anchor leaves it in; ONLY= narrows it), from its own directory with PYTHONPATH set to it.
# usage: [ONLY=workloads] [EXTRA=anchor flags] sitting.sh MAIN_TREE ONESTEP_TREE OUT_DIR [ALTERNATIONS]
#   MAIN_TREE, ONESTEP_TREE: directories holding a zmesh package (transports and serializers
#   inside it, not symlinks); ONESTEP_TREE differs from MAIN_TREE by onestep.patch only.
#   d6d7dde is checked out in /tmp/base-d6 with its own venv.
set -u
M=$1; S=$2; O=$(realpath -m "$3"); N=${4:-4}
B=/work/shared/bench/anchor_bench.py; D=/tmp/base-d6; PY=/work/main/.venv/bin/python
ONLY=${ONLY:-tasks_sync,tasks_async,task_chain,actor_sync,actor_async,n_n_actor_async,put_get_small,put_get_large}
EXTRA=${EXTRA:-}  # more anchor flags, e.g. "--retries 1 --quiet-wait 10"
mkdir -p "$O"
(cd "$D" && .venv/bin/python -m compileall -q zmesh transports serializers >/dev/null 2>&1)
for d in "$M" "$S"; do (cd "$d" && $PY -m compileall -q zmesh >/dev/null 2>&1); done
: > "$O/load.txt"
for i in $(seq 1 "$N"); do
  for arm in d6 main onestep; do
    case $arm in d6) dir=$D; py=$D/.venv/bin/python;; main) dir=$M; py=$PY;; onestep) dir=$S; py=$PY;; esac
    echo "$i $arm $(uptime)" >> "$O/load.txt"
    (cd "$dir" && PYTHONPATH=$dir $py $B --backend zmesh --only $ONLY $EXTRA \
        --json "$O/anchor-$arm-$i.json" > "$O/anchor-$arm-$i.log" 2>&1)
  done
done
echo "end $(uptime)" >> "$O/load.txt"
echo done > "$O/DONE"
