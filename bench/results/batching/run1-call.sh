#!/usr/bin/env bash
# Session 23, GPU call 6: GPU tests (samples, batches, compressed tiny model, Qwen3 layered), trajectory
# samples at 16 GiB, 8 clients batched at 8 GiB through NATS, 32 clips replayed, Qwen3-8B at 4 GiB.
set -u
mkdir -p .gpu && tar -C .gpu -xJf .gpurun/gpu.tar.xz
V=.gpu/vlanode
W=/tmp/work; mkdir -p $W
step() { # name timeout cmd...
	local name=$1 t=$2; shift 2
	mkdir -p $W/$name
	echo "=== $name ($(date +%T))" | tee -a $OUT/summary.txt
	( OUT=$W/$name timeout $t "$@" ) > $W/$name/stdout.log 2>&1
	echo "rc=$? ($(date +%T))" | tee -a $OUT/summary.txt
	grep -E "^vlanode (bench|generate|load|replay): .*(pipelined|plans/s|tokens/s|predicted)|plans/s|tokens/s|^ +[0-9.]+G |^--- (PASS|FAIL|SKIP)|^(PASS|FAIL|ok)|panic|rror" $W/$name/stdout.log | cut -c1-400 | tail -n 40 | tee -a $OUT/summary.txt >/dev/null
	tar -C $W -czf $OUT/$name.tgz $name
}
step gputests 150 bash -c 'cd models/alpamayo && ../../.gpu/alpamayo.test -test.run "CUDASamples|CUDAInferBatchEqualsSolo|CUDALayeredCompressed" -test.v -test.count 1 2>&1 | grep -vE "^=== "; cd ../../diffusion && ../.gpu/diffusion.test -test.run CUDASampleBatch -test.v 2>&1 | grep -vE "^=== "; cd ../models/qwen3 && ../../.gpu/qwen3.test -test.run "CUDALayeredGreedyMatchesTransformers|CUDAReplan" -test.v 2>&1 | grep -vE "^=== "'
step synth 60 $V synth --arch alpamayo-r1-10b --out /tmp/a10b
step k1 60 $V bench --model /tmp/a10b --device cuda --budgets 16GiB --samples 1 --runs 1 --out /tmp/work/k1/out
step k6 60 $V bench --model /tmp/a10b --device cuda --budgets 16GiB --samples 6 --runs 1 --out /tmp/work/k6/out
# batching: one node at 8 GiB, batches of up to 8
$V clip --out /tmp/clips32 --count 32 --seconds 0.4 > $W/clips.log 2>&1
$V serve --model /tmp/a10b --device cuda --name h200 --port 4222 --budget 8GiB --max-batch 8 --batch-wait 50ms --queue-bound 40 --data-dir /tmp/js > $W/serve.out 2> $W/serve.err &
SERVE=$!
for i in $(seq 1 90); do grep -q "serving" $W/serve.out 2>/dev/null && break; sleep 1; done
echo "serve up after ${i}s" | tee -a $OUT/summary.txt
step load8 150 $V load --nats-url nats://127.0.0.1:4222 --node h200 --clients 8 --requests 2 --discover-timeout 2m --out /tmp/work/load8/load8.json
step replay1 60 $V replay --nats-url nats://127.0.0.1:4222 --node h200 --concurrency 1 --no-progress --out /tmp/work/replay1/serial.jsonl /tmp/clips32/clip-000 /tmp/clips32/clip-001 /tmp/clips32/clip-002 /tmp/clips32/clip-003
step replay32 90 $V replay --nats-url nats://127.0.0.1:4222 --node h200 --concurrency 32 --no-progress --out /tmp/work/replay32/c32.jsonl /tmp/clips32
kill -TERM $SERVE; sleep 3; cp $W/serve.out $W/serve.err $OUT/ 2>/dev/null
rm -rf /tmp/js
rm -rf /tmp/q8b; step qsynth 60 $V synth --arch qwen3-8b --out /tmp/q8b
step qgen 60 $V generate --model /tmp/q8b --device cuda --budget 4GiB --prompt-len 4096 --max-new-tokens 16 --json
step qgenexact 60 $V generate --model /tmp/q8b --device cuda --budget 4GiB --prompt-len 4096 --max-new-tokens 16 --exact --json
step zbench 120 $V bench --model /tmp/a10b --device cuda --runs 1 --budgets 16GiB --compare-raw --out /tmp/work/zbench/out
tail -60 $OUT/summary.txt
