#!/bin/bash
# The put_large shape without a tracer (reserve_probe.py), alternated d6d7dde / main / onestep:
# the warm-up puts land in fresh space (the node reserves their pages before it answers: the
# only place the reservation step size can show), the timed ones in space already reserved.
# usage: cold.sh MAIN_TREE ONESTEP_TREE OUT_FILE [ALTERNATIONS]
set -u
M=$1; S=$2; O=$(realpath -m "$3"); N=${4:-5}; H=$(cd "$(dirname "$0")" && pwd)
D=/tmp/base-d6; PY=/work/main/.venv/bin/python
: > "$O"
for i in $(seq 1 "$N"); do
  for arm in d6 main onestep; do
    case $arm in d6) dir=$D; py=$D/.venv/bin/python;; main) dir=$M; py=$PY;; onestep) dir=$S; py=$PY;; esac
    echo "$i $arm $(uptime | sed 's/.*load/load/')" >> "$O"
    (cd "$dir" && PYTHONPATH=$dir $py "$H/reserve_probe.py" 2>&1 | grep -v '^phase') >> "$O"
  done
done
