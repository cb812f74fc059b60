#!/usr/bin/env bash
# Session 26, GPU call 1: the sweep's 20th configuration (Qwen3-8B 6 GiB 8K, three plans), then an A/B of the CPU
# engine's input wait (event: the blocking-sync waiter; spin / nap: the landed word written by the device) and the
# kern workers' spin, at 8 GiB, then the standard workload with forced plans at 8 GiB in what time is left.
set -u
END=${END:-560}
mkdir -p .gpu && tar -C .gpu -xJf .gpurun/gpu.tar.xz
V=$PWD/.gpu/vlanode
D=$OUT/run39; mkdir -p $D
step() { name=$1; t=$2; shift 2; [ $t -gt 5 ] || { echo "$name skipped t=$SECONDS" | tee -a $D/steps.log; return; }; ( timeout $t "$@" ) > $D/$name.log 2>&1; echo "$name rc=$? t=$SECONDS" | tee -a $D/steps.log; }
left() { echo $((END - SECONDS)); }
cap() { l=$(left); echo $(( l < $1 ? l : $1 )); }
$V synth --arch qwen3-8b --out /tmp/q8b > $D/synth-q8b.log 2>&1 &
$V synth --arch alpamayo-r1-10b --out /tmp/a10b > $D/synth-a10b.log 2>&1
wait
echo "synth t=$SECONDS" >> $D/steps.log
step sweep-6GiB-8K $(cap 170) $V bench --model /tmp/q8b --device cuda --budgets 6GiB --prompt-lens 8K --new-tokens 16 --plan-kinds gpu-only,static,dynamic --warmup 1 --replaced-warmup 0 --runs 1 --out $D/sweep6
grep -E "prompt [0-9]+,|re-placed|within|pick" $D/sweep-6GiB-8K.log | cut -c1-300
summ() { python3 - "$1" <<'PY'
import json,sys
b=json.load(open(sys.argv[1]+'/bench.json'))
for e in b['runs']:
  print(sys.argv[1].split('/')[-1], round(e['budget_bytes']/2**30), 'total', round(e['measured_ms']['total'],1), 'decode', round(e['measured_ms']['decode'],1), 'pred', round(e['predicted_ms']['total'],1), 'cpu busy', round(e['cpu_busy_ms'],1), 'wait', round(e['cpu_wait_ms'],1), 'gbps', round(e['cpu_gbps'],1), [round(r['gbps'],1) for r in (e.get('cpu_runs') or [])])
PY
}
for v in event:0 spin:0 nap:0 event:2ms spin:2ms; do
  m=${v%%:*}; k=${v##*:}; [ $k = 0 ] && k=""
  n=ab-$m-${k:-100us}
  VLANODE_XWAIT=$m VLANODE_KSPIN=$k step $n $(cap 60) $V bench --model /tmp/a10b --device cuda --budgets 8GiB --runs 2 --warmup 1 --out $D/$n
  summ $D/$n
done
step a10b-sweep-8GiB $(left) $V bench --model /tmp/a10b --device cuda --budgets 8GiB --plan-kinds gpu-only,static,dynamic --runs 1 --warmup 1 --out $D/sweep-a10b-8
grep -E "pick|within|stage" $D/a10b-sweep-8GiB.log | cut -c1-300 | tail -20
