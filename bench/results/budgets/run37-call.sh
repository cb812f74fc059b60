#!/usr/bin/env bash
# Session 25, GPU call 2 (issue 29): the plan sweep on synth Qwen3-8B, 4/5 GiB then 6/8 GiB, five prompt lengths, 16 new tokens.
set -u
mkdir -p .gpu && tar -C .gpu -xJf .gpurun/gpu.tar.xz
V=$PWD/.gpu/vlanode
D=$OUT/run37; mkdir -p $D
step() { name=$1; t=$2; shift 2; ( timeout $t "$@" ) > $D/$name.log 2>&1; echo "$name rc=$? t=$SECONDS" | tee -a $D/steps.log; }
step synth 60 $V synth --arch qwen3-8b --out /tmp/q8b
for B in "4GiB,5GiB" "6GiB,8GiB"; do
  R=$((590 - SECONDS))
  step sweep-$B $R $V bench --model /tmp/q8b --device cuda --budgets $B --prompt-lens 512,1K,2K,4K,8K --new-tokens 16 --plan-kinds gpu-only,static,dynamic --warmup 1 --replaced-warmup 0 --runs 1 --out $D/sweep-$B
  grep -E "prompt [0-9]+," $D/sweep-$B.log | cut -c1-230
  grep -A30 -i "sweep" $D/sweep-$B.log | tail -32 | cut -c1-230
done
