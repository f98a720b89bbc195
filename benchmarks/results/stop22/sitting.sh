#!/bin/bash
# quiet sitting, stop 21 (second session): issue 7's encryption figures; issue 8's anchor vs d6d7dde
O=/tmp/qb; rm -rf $O; mkdir -p $O; cd /work/main
B=/work/shared/bench/anchor_bench.py
for t in /tmp/base-d6 /work/main; do (cd $t && .venv/bin/python -m compileall -q zmesh transports serializers >/dev/null 2>&1; true); done
uptime > $O/load.txt
.venv/bin/python benchmarks/bench_transports.py --repeat 6 --link-gbit 10 > $O/transports.txt 2>&1
uptime >> $O/load.txt
.venv/bin/python benchmarks/bench_same_host.py --only pair --sizes-mib 1024 --rounds 3 --sittings 1 --json $O/same_host_pair.json > $O/same_host_pair.txt 2>&1
uptime >> $O/load.txt
for i in 1 2; do
  (cd /tmp/base-d6 && .venv/bin/python $B --backend zmesh --json $O/anchor-d6-$i.json > $O/anchor-d6-$i.log 2>&1)
  (cd /work/main && .venv/bin/python $B --backend zmesh --json $O/anchor-main-$i.json > $O/anchor-main-$i.log 2>&1)
  uptime >> $O/load.txt
done
echo done > $O/DONE
