package main

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"vlanode/cuda"
	"vlanode/node/gpu"
)

// gpuSelection is --gpu resolved to one GPU that CUDA (the engine) and NVML
// (telemetry, --budget auto) agree on: its CUDA ordinal, which
// CUDA_VISIBLE_DEVICES renumbers, and its UUID, which names the same GPU to
// NVML.
type gpuSelection struct {
	none    bool
	ordinal int    // the CUDA ordinal
	uuid    string // "" when CUDA could not name its GPUs
}

// resolveGPU resolves --gpu: a CUDA ordinal ("0"), a UUID ("GPU-…"), or
// "-1"/"none". uuids are CUDA's devices by ordinal, unless cudaErr says why
// there are none to see.
func resolveGPU(sel string, uuids []string, cudaErr error) (gpuSelection, error) {
	sel = strings.TrimSpace(sel)
	if sel == "-1" || sel == "none" {
		return gpuSelection{none: true}, nil
	}
	visible := ""
	if v, ok := os.LookupEnv("CUDA_VISIBLE_DEVICES"); ok {
		visible = fmt.Sprintf(" (CUDA_VISIBLE_DEVICES=%q)", v)
	}
	if i, err := strconv.Atoi(sel); err == nil {
		switch {
		case i < 0:
			return gpuSelection{}, usagef("--gpu %d: want a CUDA ordinal, a GPU UUID, or -1", i)
		case cudaErr != nil:
			return gpuSelection{ordinal: i}, nil
		case i >= len(uuids):
			return gpuSelection{}, fmt.Errorf("--gpu %d: CUDA sees %d GPU(s)%s", i, len(uuids), visible)
		}
		return gpuSelection{ordinal: i, uuid: uuids[i]}, nil
	}
	if !strings.HasPrefix(strings.ToUpper(sel), "GPU-") {
		return gpuSelection{}, usagef("--gpu %q: want a CUDA ordinal (0, 1, …), a GPU UUID (GPU-…, from nvidia-smi -L), or -1", sel)
	}
	uuid := "GPU-" + strings.ToLower(sel[4:])
	if cudaErr != nil {
		return gpuSelection{uuid: uuid}, nil
	}
	for i, u := range uuids {
		if u == uuid {
			return gpuSelection{ordinal: i, uuid: uuid}, nil
		}
	}
	return gpuSelection{}, fmt.Errorf("--gpu %s: not among the GPUs CUDA sees%s: %s", uuid, visible, strings.Join(uuids, ", "))
}

// selectGPU resolves --gpu against the CUDA devices of this machine.
func selectGPU(sel string) (gpuSelection, error) {
	if s := strings.TrimSpace(sel); s == "-1" || s == "none" {
		return gpuSelection{none: true}, nil
	}
	uuids, err := cuda.DeviceUUIDs()
	return resolveGPU(sel, uuids, err)
}

// openTelemetry opens NVML for the selected GPU, or says once why there is
// none.
func openTelemetry(sel gpuSelection, log *slog.Logger) gpu.Telemetry {
	if sel.none {
		log.Info("no GPU telemetry (--gpu -1)")
		return nil
	}
	var t *gpu.NVML
	var err error
	if sel.uuid != "" {
		t, err = gpu.OpenNVMLByUUID(sel.uuid)
	} else {
		if _, set := os.LookupEnv("CUDA_VISIBLE_DEVICES"); set {
			log.Warn("CUDA could not name its GPUs and CUDA_VISIBLE_DEVICES is set: NVML's GPU of this index may not be the engine's; give --gpu a UUID", "index", sel.ordinal)
		}
		t, err = gpu.OpenNVML(sel.ordinal)
	}
	if err != nil {
		log.Warn("no GPU telemetry: status will report no GPU", "err", err)
		return nil
	}
	log.Info("GPU for telemetry and the engine", "cuda_ordinal", sel.ordinal, "uuid", sel.uuid)
	return t
}

// openNVMLOf opens NVML for the GPU --gpu sel names.
func openNVMLOf(sel string) (*gpu.NVML, error) {
	s, err := selectGPU(sel)
	if err != nil {
		return nil, err
	}
	if s.uuid == "" {
		return gpu.OpenNVML(s.ordinal)
	}
	return gpu.OpenNVMLByUUID(s.uuid)
}
