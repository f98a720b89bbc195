#!/bin/bash
# cost_run2.sh PAIRS OUT: for each pair and workload, driver instructions per op over the
# loop (driver_cost.sh; worker-side workloads only) and native CPU per op of every process
# (cost_probe.py --cpu), main and d6 alternately (d6 first on even pairs).
here=$(dirname "$(readlink -f "$0")")
pairs=$1; out=$2
declare -A N=( [tasks_async]=2000 [actor_async]=5000 [n_n_actor_async]=2500 [wait_1000]=1000
               [pg_create_remove]=1000 [get_small]=10000 [get_small_batch]=10000 [put_large]=10 )
main="/work/wt-getcost /work/main/.venv/bin/python"; d6="/tmp/base-d6 /tmp/base-d6/.venv/bin/python"
for p in $(seq 1 $pairs); do
  if [ $((p % 2)) = 1 ]; then order="main d6"; else order="d6 main"; fi
  for w in tasks_async actor_async n_n_actor_async wait_1000 pg_create_remove get_small get_small_batch put_large; do
    for t in $order; do
      set -- ${!t}
      cpu=$(cd $1 && PYTHONPATH=$1 PYTHONHASHSEED=0 nice -n 10 $2 $here/cost_probe.py $w ${N[$w]} --cpu | grep CPU_NS)
      echo "cpu $p $t $w ${N[$w]} $cpu load=$(cut -d' ' -f1 /proc/loadavg)" >> $out
    done
    case $w in tasks_async|actor_async|n_n_actor_async|wait_1000|pg_create_remove)
      for t in $order; do
        set -- ${!t}
        n=$(( ${N[$w]} / 2 ))
        echo "drv $p $t $(nice -n 10 $here/driver_cost.sh $1 $2 $w $n)" >> $out
      done;;
    esac
  done
done
