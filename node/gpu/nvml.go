package gpu

import (
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"vlanode/msgs"
)

// NVML reads one GPU through NVML. Create it with OpenNVML; Close it.
type NVML struct {
	lib  nvml.Interface
	dev  nvml.Device
	name string
}

// OpenNVML loads libnvidia-ml and opens GPU index, in NVML's numbering (all
// the machine's GPUs, whatever CUDA_VISIBLE_DEVICES says: prefer
// OpenNVMLByUUID). It fails, without panicking, on a machine without the
// library or the GPU.
func OpenNVML(index int) (*NVML, error) {
	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("gpu: nvmlInit: %w", nvmlError(ret))
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		lib.Shutdown()
		return nil, fmt.Errorf("gpu: nvmlDeviceGetCount: %w", nvmlError(ret))
	}
	if index < 0 || index >= n {
		lib.Shutdown()
		return nil, fmt.Errorf("gpu: no GPU %d (NVML sees %d)", index, n)
	}
	dev, ret := lib.DeviceGetHandleByIndex(index)
	if ret != nvml.SUCCESS {
		lib.Shutdown()
		return nil, fmt.Errorf("gpu: nvmlDeviceGetHandleByIndex(%d): %w", index, nvmlError(ret))
	}
	name, _ := lib.DeviceGetName(dev) // optional
	return &NVML{lib: lib, dev: dev, name: name}, nil
}

// OpenNVMLByUUID loads libnvidia-ml and opens the GPU with uuid
// ("GPU-…", as nvidia-smi -L and CUDA's cuDeviceGetUuid name it): the same
// GPU whatever CUDA_VISIBLE_DEVICES says, unlike an index.
func OpenNVMLByUUID(uuid string) (*NVML, error) {
	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("gpu: nvmlInit: %w", nvmlError(ret))
	}
	dev, ret := lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		lib.Shutdown()
		return nil, fmt.Errorf("gpu: nvmlDeviceGetHandleByUUID(%s): %w", uuid, nvmlError(ret))
	}
	name, _ := lib.DeviceGetName(dev) // optional
	return &NVML{lib: lib, dev: dev, name: name}, nil
}

// Read returns the GPU's telemetry. Memory must be readable; every other
// field is left zero (unknown) when NVML does not support it.
func (g *NVML) Read() (*msgs.GPU, error) {
	mem, ret := g.lib.DeviceGetMemoryInfo(g.dev)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("gpu: nvmlDeviceGetMemoryInfo: %w", nvmlError(ret))
	}
	out := &msgs.GPU{
		Name:             g.name,
		MemoryTotalBytes: mem.Total,
		MemoryUsedBytes:  mem.Used,
		MemoryFreeBytes:  mem.Free,
	}
	out.PCIeGen = intOrZero(g.lib.DeviceGetCurrPcieLinkGeneration(g.dev))
	out.PCIeGenMax = intOrZero(g.lib.DeviceGetMaxPcieLinkGeneration(g.dev))
	out.PCIeWidth = intOrZero(g.lib.DeviceGetCurrPcieLinkWidth(g.dev))
	out.PCIeWidthMax = intOrZero(g.lib.DeviceGetMaxPcieLinkWidth(g.dev))
	out.TemperatureC = intOrZero(g.lib.DeviceGetTemperature(g.dev, nvml.TEMPERATURE_GPU))
	out.SMClockMHz = intOrZero(g.lib.DeviceGetClockInfo(g.dev, nvml.CLOCK_SM))
	out.MemClockMHz = intOrZero(g.lib.DeviceGetClockInfo(g.dev, nvml.CLOCK_MEM))
	mask, ret := g.lib.DeviceGetCurrentClocksEventReasons(g.dev)
	if ret != nvml.SUCCESS { // drivers before the rename
		mask, ret = g.lib.DeviceGetCurrentClocksThrottleReasons(g.dev)
	}
	if ret == nvml.SUCCESS {
		out.ThrottleReasons = ThrottleReasons(mask)
	}
	return out, nil
}

// Close shuts NVML down.
func (g *NVML) Close() error {
	if ret := g.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("gpu: nvmlShutdown: %w", nvmlError(ret))
	}
	return nil
}

// nvmlError turns an NVML return code into an error that prints its name
// even when the library is missing.
func nvmlError(ret nvml.Return) error {
	if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
		return errors.New("libnvidia-ml.so.1 not found (no NVIDIA driver on this machine)")
	}
	return ret
}

// intOrZero returns v when NVML succeeded and 0 (unknown) otherwise.
func intOrZero[T int | uint32](v T, ret nvml.Return) int {
	if ret != nvml.SUCCESS {
		return 0
	}
	return int(v)
}

// ProcessMemory is the device memory NVML charges to process pid (its
// context, libraries and allocations): the figure nvidia-smi lists per
// process. A process without a context on the GPU has 0.
func (g *NVML) ProcessMemory(pid int) (uint64, error) {
	procs, ret := g.lib.DeviceGetComputeRunningProcesses(g.dev)
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("gpu: nvmlDeviceGetComputeRunningProcesses: %w", nvmlError(ret))
	}
	for _, p := range procs {
		if int(p.Pid) == pid {
			return p.UsedGpuMemory, nil
		}
	}
	return 0, nil
}
