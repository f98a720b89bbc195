#!/bin/bash
# quiet benchmark sitting: d6d7dde (issue 8's "today") vs main, Ray 2.60, everyday API, transports
O=/tmp/qb; rm -rf $O; mkdir -p $O; cd /work/main
B=/work/shared/bench/anchor_bench.py
# bytecode compiled in both trees, as a wheel install leaves it (this host sets PYTHONDONTWRITEBYTECODE)
for t in /tmp/base-d6 /work/main; do (cd $t && .venv/bin/python -m compileall -q zmesh transports 2>/dev/null; true); done
uptime > $O/load.txt
/work/main/.venv/bin/python /tmp/rawrt.py > $O/rawrt-1.txt 2>&1
for i in 1 2; do
  (cd /tmp/base-d6 && .venv/bin/python $B --backend zmesh --json $O/anchor-d6-$i.json > $O/anchor-d6-$i.log 2>&1)
  (cd /work/main && .venv/bin/python $B --backend zmesh --json $O/anchor-main-$i.json > $O/anchor-main-$i.log 2>&1)
  uptime >> $O/load.txt
done
RAY_ADDRESS=local /work/ray-venv/bin/python $B --backend ray --json $O/anchor-ray.json > $O/anchor-ray.log 2>&1
uptime >> $O/load.txt
/work/ray-venv/bin/python benchmarks/micro_everyday.py --backend ray --json $O/ev-ray.json > $O/ev-ray.log 2>&1
.venv/bin/python benchmarks/micro_everyday.py --backend zmesh --json $O/ev-z.json > $O/ev-z.log 2>&1
uptime >> $O/load.txt
/work/main/.venv/bin/python /tmp/rawrt.py > $O/rawrt-2.txt 2>&1
.venv/bin/python benchmarks/bench_transports.py --repeat 6 --link-gbit 10 > $O/transports.txt 2>&1
uptime >> $O/load.txt
# import / startup without any bytecode cache (each process compiles what it imports), interleaved
for t in /tmp/base-d6 /work/main; do find $t/zmesh $t/transports -name __pycache__ -type d -prune -exec rm -rf {} + 2>/dev/null; done
for i in 1 2 3; do
  (cd /tmp/base-d6 && .venv/bin/python $B --backend zmesh --only startup,memory --json $O/nocache-d6-$i.json > /dev/null 2>&1)
  (cd /work/main && .venv/bin/python $B --backend zmesh --only startup,memory --json $O/nocache-main-$i.json > /dev/null 2>&1)
done
uptime >> $O/load.txt
(cd /work/main && .venv/bin/python -m compileall -q zmesh transports; for i in 1 2; do .venv/bin/python benchmarks/bench_tensor_transport.py --sizes 1,4,16,64 --blocks 4 --reps 12 > $O/tensor-$i.txt 2>&1; done)
uptime >> $O/load.txt
echo done > $O/DONE
