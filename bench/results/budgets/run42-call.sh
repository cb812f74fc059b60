#!/usr/bin/env bash
# Session 26, GPU call 4: the final code and shipped profile (the executor's 64-row tier, the fill weighing only the
# sharing stages) at the budgets, then 11 and 5 GiB in what time is left.
set -u
END=${END:-290}
mkdir -p .gpu && tar -C .gpu -xJf .gpurun/gpu.tar.xz
V=$PWD/.gpu/vlanode
D=$OUT/run42; mkdir -p $D
step() { name=$1; t=$2; shift 2; [ $t -gt 5 ] || { echo "$name skipped t=$SECONDS" | tee -a $D/steps.log; return; }; ( timeout $t "$@" ) > $D/$name.log 2>&1; echo "$name rc=$? t=$SECONDS" | tee -a $D/steps.log; }
left() { echo $((END - SECONDS)); }
cap() { l=$(left); echo $(( l < $1 ? l : $1 )); }
$V synth --arch alpamayo-r1-10b --out /tmp/a10b > $D/synth-a10b.log 2>&1
echo "synth t=$SECONDS" >> $D/steps.log
step bench-16-8-4 $(cap 170) $V bench --model /tmp/a10b --device cuda --budgets 16GiB,8GiB,4GiB --runs 2 --warmup 1 --out $D/b1684
grep -E "bench: .*(run [0-9]|pipelined auto)|measured runs read" $D/bench-16-8-4.log | cut -c1-260
tail -7 $D/bench-16-8-4.log | cut -c1-330
step bench-11-5 $(left) $V bench --model /tmp/a10b --device cuda --budgets 11GiB,5GiB --runs 1 --warmup 1 --out $D/b115
grep -E "bench: .*(run [0-9]|pipelined auto)|measured runs read" $D/bench-11-5.log | cut -c1-260
