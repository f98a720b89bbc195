for i in 1 2 3; do
 for side in before after; do
  if [ $side = before ]; then d=/tmp/lc-before; else d=/work/wt-loopcost; fi
  echo "== $i $side $(date -u +%T) $(cat /proc/loadavg)"
  cd $d && PYTHONPATH=$d /work/main/.venv/bin/python /work/shared/bench/anchor_bench.py --backend zmesh --only tasks_async,tasks_sync,wait_1000 --json /tmp/lc_ab_${i}_$side.json 2>&1 | grep -E "tasks_|wait_"
 done
done
echo done
