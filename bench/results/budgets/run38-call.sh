#!/usr/bin/env bash
# Session 25, GPU call 3: the sweep's two failed configurations again with the hand-off's scratch planned (issue 29),
# the standard workload with teacher-forced margins and host probes at five budgets (issue 29), then compressed
# against raw streaming with --exact (issue 30) in what time is left.
set -u
END=${END:-430}
mkdir -p .gpu && tar -C .gpu -xJf .gpurun/gpu.tar.xz
V=$PWD/.gpu/vlanode
D=$OUT/run38; mkdir -p $D
step() { name=$1; t=$2; shift 2; [ $t -gt 5 ] || { echo "$name skipped t=$SECONDS" | tee -a $D/steps.log; return; }; ( timeout $t "$@" ) > $D/$name.log 2>&1; echo "$name rc=$? t=$SECONDS" | tee -a $D/steps.log; }
left() { echo $((END - SECONDS)); }
$V synth --arch qwen3-8b --out /tmp/q8b > $D/synth-q8b.log 2>&1 &
$V synth --arch alpamayo-r1-10b --out /tmp/a10b > $D/synth-a10b.log 2>&1
wait
echo "synth t=$SECONDS" >> $D/steps.log
step sweep-4GiB-6GiB-8K $(( $(left) < 130 ? $(left) : 130 )) $V bench --model /tmp/q8b --device cuda --budgets 4GiB,6GiB --prompt-lens 8K --new-tokens 16 --plan-kinds gpu-only,static,dynamic --warmup 1 --replaced-warmup 0 --runs 1 --out $D/sweep
grep -E "prompt [0-9]+,|re-placed|within" $D/sweep-4GiB-6GiB-8K.log | cut -c1-300
step margins $(( $(left) < 160 ? $(left) : 160 )) $V bench --model /tmp/a10b --device cuda --budgets 16GiB,11GiB,8GiB,5GiB,4GiB --runs 1 --warmup 1 --host-probe --margins --out $D/margins
grep -E "probe|warm-up|run [0-9]|margins" $D/margins.log | cut -c1-600
tail -8 $D/margins.log | cut -c1-330
step exact-raw $(left) $V bench --model /tmp/a10b --device cuda --budgets 16GiB,8GiB,4GiB --runs 1 --warmup 1 --exact --compare-raw --out $D/exact-raw
tail -12 $D/exact-raw.log | cut -c1-330
