#!/bin/bash
O=/tmp/qb3; rm -rf $O; mkdir -p $O; cd /work/main
B=/work/shared/bench/anchor_bench.py
(cd /work/main && .venv/bin/python -m compileall -q zmesh transports serializers >/dev/null 2>&1)
uptime > $O/load.txt
for i in 1 2; do
  (cd /work/main && .venv/bin/python $B --backend zmesh --json $O/anchor-main-$i.json > $O/anchor-main-$i.log 2>&1)
  (cd /tmp/base-d6 && .venv/bin/python $B --backend zmesh --json $O/anchor-d6-$i.json > $O/anchor-d6-$i.log 2>&1)
  uptime >> $O/load.txt
done

uptime >> $O/load.txt
echo done > $O/DONE
