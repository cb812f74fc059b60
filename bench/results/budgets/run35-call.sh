#!/usr/bin/env bash
# Session 24, GPU call 4 (issue 29): the plan sweep on synth Qwen3-8B at 8 and 6 GiB, five prompt lengths, 16 new tokens.
set -u
mkdir -p .gpu && tar -C .gpu -xJf .gpurun/gpu.tar.xz
V=$PWD/.gpu/vlanode
mkdir -p $OUT/sweep
$V synth --arch qwen3-8b --out /tmp/q8b > $OUT/sweep/synth.log 2>&1
timeout ${T:-200} $V bench --model /tmp/q8b --device cuda --budgets 8GiB,6GiB --prompt-lens 512,1K,2K,4K,8K --new-tokens 16 --plan-kinds gpu-only,static,dynamic --warmup 1 --replaced-warmup 0 --runs 1 --out $OUT/sweep > $OUT/sweep/stdout.log 2> $OUT/sweep/stderr.log
echo "rc=$?" >> $OUT/sweep/stdout.log
grep -E "prompt [0-9]+," $OUT/sweep/stderr.log | cut -c1-250
tail -40 $OUT/sweep/stdout.log | cut -c1-250
