#!/usr/bin/env bash
# make run: one machine, everything embedded. Starts `vlanode serve` (an
# embedded NATS server on a free port, the tiny synthetic Alpamayo-R1 on the
# CPU backend), replays a synthetic driving clip into it in real time (a
# request each frame period while none awaits its answer), prints each plan
# and a summary, then stops the node with SIGTERM.
set -euo pipefail
bin=${BIN:-bin/vlanode}
model=${MODEL:-.cache/alpamayo-r1-tiny}
clip=${CLIP:-.cache/clip}
work=$(mktemp -d)
trap 'kill -TERM $serve 2>/dev/null || true; wait $serve 2>/dev/null || true; rm -rf "$work"' EXIT

"$bin" serve --name demo --model "$model" --device cpu --listen 127.0.0.1:0 --data-dir "$work/js" --gpu -1 \
	--log-level warn >"$work/serve.out" 2>"$work/serve.err" &
serve=$!
url=""
echo "== starting the node (vlanode serve: loading the model)"
for _ in $(seq 1 600); do # up to 60 s for the model to load
	url=$(grep -o 'nats://[0-9.:]*' "$work/serve.out" | head -n 1 || true)
	[ -n "$url" ] && break
	if ! kill -0 $serve 2>/dev/null; then
		echo "run-demo: vlanode serve exited:" >&2
		cat "$work/serve.err" >&2
		exit 1
	fi
	sleep 0.1
done
[ -n "$url" ] || { echo "run-demo: vlanode serve did not start in 60 s" >&2; cat "$work/serve.err" >&2; exit 1; }
cat "$work/serve.out"
echo "== replaying $clip into node demo at $url"
"$bin" replay --nats-url "$url" --node demo --max-reasoning-tokens 16 --timeout 60s --print-plans --no-progress "$clip"
kill -TERM $serve
wait $serve
echo "== node stopped"
