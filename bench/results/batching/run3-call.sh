#!/usr/bin/env bash
# Session 24, GPU call 2: issue 31 again after the fixes (sampler, vision scratch) at 8 GiB; a
# --max-batch 1 node's serial rate; Qwen3-8B generate at 4 GiB; the Qwen3 layered GPU tests.
set -u
mkdir -p .gpu && tar -C .gpu -xJf .gpurun/gpu.tar.xz
V=$PWD/.gpu/vlanode
W=/tmp/work; mkdir -p $W
step() { # name timeout cmd...
	local name=$1 t=$2; shift 2
	mkdir -p $W/$name
	echo "=== $name ($(date +%T))" | tee -a $OUT/summary.txt
	( timeout $t "$@" ) > $W/$name/stdout.log 2>&1
	echo "rc=$? ($(date +%T))" | tee -a $OUT/summary.txt
	grep -E "plans/s|median|same reasoning|worst|failed|^plans|^errors|clips:|round_trip|^ +total|rror|panic|tokens/s|^--- |^(ok|PASS|FAIL)" $W/$name/stdout.log | cut -c1-300 | tail -n 25 | tee -a $OUT/summary.txt >/dev/null
}
step synth 60 $V synth --arch alpamayo-r1-10b --out /tmp/a10b
$V clip --out /tmp/clips32 --count 32 --seconds 0.4 > $W/clips.log 2>&1
serial=$(for i in 0 1 2 3 4 5 6 7; do echo /tmp/clips32/clip-00$i; done)
up() { # tag flags...
	local tag=$1; shift
	$V serve --model /tmp/a10b --device cuda --name h200 --port 4222 --budget 8GiB --queue-bound 40 --data-dir /tmp/js-$tag "$@" > $W/serve-$tag.out 2> $W/serve-$tag.err &
	SERVE=$!
	for i in $(seq 1 120); do grep -q "serving" $W/serve-$tag.out 2>/dev/null && break; sleep 1; done
	echo "serve $tag up after ${i}s" | tee -a $OUT/summary.txt
}
down() { kill -TERM $SERVE; wait $SERVE; rm -rf /tmp/js-$1; }
up b8 --max-batch 8 --batch-wait 20ms
step load-b8 150 $V load --nats-url nats://127.0.0.1:4222 --node h200 --clients 8 --requests 2 --max-reasoning-tokens 21 --out $W/load-b8/load.json
step serial-b8 90 $V replay --nats-url nats://127.0.0.1:4222 --node h200 --concurrency 1 --no-progress --max-reasoning-tokens 21 --out $W/serial-b8/serial.jsonl $serial
step c32-b8 90 $V replay --nats-url nats://127.0.0.1:4222 --node h200 --concurrency 32 --no-progress --max-reasoning-tokens 21 --out $W/c32-b8/c32.jsonl /tmp/clips32
down b8
up b1
step serial-b1 60 $V replay --nats-url nats://127.0.0.1:4222 --node h200 --concurrency 1 --no-progress --max-reasoning-tokens 21 --out $W/serial-b1/serial.jsonl $serial
step load-b1 60 $V load --nats-url nats://127.0.0.1:4222 --node h200 --clients 1 --requests 4 --no-solo --max-reasoning-tokens 21 --out $W/load-b1/load.json
down b1
tar -C $W -czf $OUT/batch.tgz serve-b8.out serve-b8.err serve-b1.out serve-b1.err load-b8 serial-b8 c32-b8 serial-b1 load-b1
step qsynth 60 $V synth --arch qwen3-8b --out /tmp/q8b
step qgen 70 $V generate --model /tmp/q8b --device cuda --budget 4GiB --prompt-len 4096 --max-new-tokens 16 --json
step qgenexact 70 $V generate --model /tmp/q8b --device cuda --budget 4GiB --prompt-len 4096 --max-new-tokens 16 --exact --json
tar -C $W -czf $OUT/qgen.tgz qsynth qgen qgenexact
step qtests 150 bash -c 'cd models/qwen3 && ../../.gpu/qwen3.test -test.run "CUDALayeredGreedyMatchesTransformers|CUDAReplan" -test.v -test.count 1 2>&1 | grep -vE "^=== "'
tar -C $W -czf $OUT/qtests.tgz qtests
echo done | tee -a $OUT/summary.txt
