# vlanode — build, test and run. `make test` and `make run` work on a fresh
# Debian machine: they install what they need first (idempotently).

GO        ?= go
BIN       := bin/vlanode
GOFLAGS   ?=

export CGO_ENABLED := 1

.PHONY: all deps build test vet fmt-check run check-reference bench gpu-test clean

all: build

# deps installs what the build needs (scripts/deps.sh): gcc and OpenCV
# through apt when missing (waiting for apt's lock if another apt runs), and
# the Go modules.
deps:
	@GO=$(GO) bash scripts/deps.sh

# build prints each package it compiles (-v): the first build compiles
# OpenCV's Go bindings and the CUDA backend's cgo, a few minutes on two
# cores; later ones take seconds.
build: deps
	@[ -x $(BIN) ] || echo "make build: compiling vlanode (the first build takes a few minutes; each package is listed)"
	$(GO) build -v $(GOFLAGS) -o $(BIN) ./cmd/vlanode

vet: deps
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

# The second run checks the build without OpenCV (the GPU machine's): its
# vision package decodes the golden JPEG and PNG frames to OpenCV's pixels.
test: deps fmt-check vet
	$(GO) test $(GOFLAGS) -count=1 ./...
	$(GO) test $(GOFLAGS) -count=1 -tags nogocv ./vision/...

# run: the main job on one machine — an embedded NATS server, the node
# serving the tiny synthetic Alpamayo-R1 on the CPU backend, and a replay of
# a synthetic driving clip into it, printing each plan (scripts/run-demo.sh).
# The checkpoint and the clip are generated once under .cache/.
TINY := .cache/alpamayo-r1-tiny
CLIP := .cache/clip
run: build
	@[ -f $(TINY)/model.safetensors ] || { echo "== writing the tiny checkpoint ($(TINY))"; $(BIN) synth --arch alpamayo-r1-tiny --out $(TINY) --force; }
	@[ -f $(CLIP)/ego.csv ] || { echo "== writing the clip ($(CLIP))"; $(BIN) clip --out $(CLIP); }
	@BIN=$(BIN) MODEL=$(TINY) CLIP=$(CLIP) bash scripts/run-demo.sh

# check-reference: every reference checkpoint that the command line can
# check against transformers' outputs (scripts/cli-reference.sh: Qwen3
# generate and eval, Qwen3-VL eval, Alpamayo expert eval), on DEVICE (cpu;
# cuda on the GPU machine).
DEVICE ?= cpu
check-reference: build
	bash scripts/cli-reference.sh $(BIN) $(DEVICE)

bench: build
	$(GO) test -run '^$$' -bench . -benchtime 2x ./cpu

clean:
	rm -rf bin .cache .gpu

# gpu-test builds the GPU test binaries (without OpenCV: tag nogocv) into
# .gpu/ and runs them. On the GPU machine the same binaries run against the
# driver; on a machine without a GPU every GPU test reports itself as
# SKIPPED (run with -test.v, so the skips are visible).
GPU_PKGS := ./cuda ./cuda/driver ./diffusion ./models/qwen3 ./models/qwen3vl ./models/alpamayo ./vision
gpu-test: deps
	@mkdir -p .gpu
	@for p in $(GPU_PKGS); do \
		n=$$(echo $$p | sed 's#^\./##; s#/#-#g'); \
		$(GO) test -tags nogocv -c -o .gpu/$$n.test $$p || exit 1; \
	done
	$(GO) build -tags nogocv -o .gpu/vlanode ./cmd/vlanode
	bash scripts/gpu-test.sh .gpu
