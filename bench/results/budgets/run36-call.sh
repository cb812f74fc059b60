#!/usr/bin/env bash
# Session 25, GPU call 1 (issue 29): the host's CPU rate probed around every load and per inference (11/5 GiB, 3 runs),
# then the targets with Accelerate at 16/8/4 GiB in one bench call.
set -u
mkdir -p .gpu && tar -C .gpu -xJf .gpurun/gpu.tar.xz
V=$PWD/.gpu/vlanode
D=$OUT/run36; mkdir -p $D
step() { name=$1; t=$2; shift 2; ( timeout $t "$@" ) > $D/$name.log 2>&1; echo "$name rc=$? t=$SECONDS" | tee -a $D/steps.log; }
(lscpu; numactl -H 2>&1; cat /proc/meminfo | head -5; nvidia-smi) > $D/host.txt 2>&1
step synth 60 $V synth --arch alpamayo-r1-10b --out /tmp/a10b
step bench-11-5 110 $V bench --model /tmp/a10b --device cuda --budgets 11GiB,5GiB --runs 3 --warmup 1 --host-probe --out $D/bench-11-5
grep -E "probe|warm-up|run [0-9]|vs plan|GiB" $D/bench-11-5.log | cut -c1-260 | tail -30
R=$((588 - SECONDS))
step bench $R $V bench --model /tmp/a10b --device cuda --budgets 16GiB,8GiB,4GiB --runs 2 --warmup 1 --host-probe --accelerate .gpurun/accelerate_baseline.py --out $D/bench
grep -E "probe|warm-up|run [0-9]|ACCELERATE" $D/bench.log | cut -c1-260 | tail -30
tail -25 $D/bench.log | cut -c1-300
