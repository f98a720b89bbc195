#!/bin/bash
# Driver instructions per warm 100 MiB put (cachegrind Ir, the driver process only; the node
# and workers run natively): runs instr_probe.py with 1 and with 5 timed samples of 10 puts;
# (Ir(5) - Ir(1)) / 40 is one put's instructions (put, and the free after its sample).
# usage: instr.sh TREE PYTHON LABEL
set -u
T=$1; PY=$2; L=$3; H=$(cd "$(dirname "$0")" && pwd); TMP=$(mktemp -d)
ir() {
  (cd "$T" && PYTHONPATH=$T nice -n 10 valgrind --tool=cachegrind --cache-sim=no \
      --cachegrind-out-file="$TMP/cg.out" "$PY" "$H/instr_probe.py" "$1" 2>&1) \
    | awk '/I +refs:/ {gsub(",", "", $NF); print $NF}'
}
a=$(ir 1); b=$(ir 5)
echo "$L Ir(1 sample) $a Ir(5 samples) $b per warm put $(( (b - a) / 40 ))"
rm -rf "$TMP"
