#!/usr/bin/env bash
# Session 26, GPU call 2: the standard workload in the plan sweep (issue 29): the three forced plans at 4 and 8 GiB,
# the planner's pick planned by bench itself; then 5 and 11 GiB in what time is left.
set -u
END=${END:-540}
mkdir -p .gpu && tar -C .gpu -xJf .gpurun/gpu.tar.xz
V=$PWD/.gpu/vlanode
D=$OUT/run40; mkdir -p $D
step() { name=$1; t=$2; shift 2; [ $t -gt 5 ] || { echo "$name skipped t=$SECONDS" | tee -a $D/steps.log; return; }; ( timeout $t "$@" ) > $D/$name.log 2>&1; echo "$name rc=$? t=$SECONDS" | tee -a $D/steps.log; }
left() { echo $((END - SECONDS)); }
cap() { l=$(left); echo $(( l < $1 ? l : $1 )); }
$V synth --arch alpamayo-r1-10b --out /tmp/a10b > $D/synth-a10b.log 2>&1
echo "synth t=$SECONDS" >> $D/steps.log
step sweep-4GiB-8GiB $(cap 300) $V bench --model /tmp/a10b --device cuda --budgets 4GiB,8GiB --plan-kinds gpu-only,static,dynamic --runs 1 --warmup 1 --out $D/sweep48
grep -vE "compressing" $D/sweep-4GiB-8GiB.log | grep -E "pick|planned|stage  pick|vision|prefill|decode|diffusion|bench: .*(warm-up|run 1)|pipelined" | cut -c1-330 | tail -24
step sweep-5GiB-11GiB $(left) $V bench --model /tmp/a10b --device cuda --budgets 5GiB,11GiB --plan-kinds gpu-only,static,dynamic --runs 1 --warmup 1 --out $D/sweep511
grep -vE "compressing" $D/sweep-5GiB-11GiB.log | grep -E "pick|planned|stage  pick|vision|prefill|decode|diffusion|bench: .*(warm-up|run 1)|pipelined" | cut -c1-330 | tail -24
