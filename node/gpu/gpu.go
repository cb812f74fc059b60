// Package gpu reads the telemetry of the node's GPU (memory, PCIe link,
// temperature, clocks, throttle reasons) and derives a VRAM budget from it.
//
// Telemetry is the small interface the node uses; NVML implements it with
// go-nvml, which loads libnvidia-ml at run time, so the binary builds and
// runs on machines without a GPU: OpenNVML then fails and the node reports
// no GPU. Tests use a fake.
package gpu

import (
	"errors"
	"fmt"
	"math/bits"

	"vlanode/msgs"
)

// Telemetry reads the current state of one GPU.
type Telemetry interface {
	// Read returns the GPU's telemetry; fields it could not read are zero.
	Read() (*msgs.GPU, error)
	// Close releases the library.
	Close() error
}

// DefaultReserve is the VRAM that --budget auto leaves unbudgeted: the CUDA
// primary context (about 0.5 GiB measured on an H200, see DESIGN.md) and
// headroom for other processes' growth.
const DefaultReserve = 1 << 30 // 1 GiB

// AutoBudget returns the budget for --budget auto: the free VRAM minus the
// reserve. It fails when nothing is left.
func AutoBudget(freeBytes, reserveBytes uint64) (uint64, error) {
	if freeBytes <= reserveBytes {
		return 0, fmt.Errorf("gpu: %d bytes of VRAM free, not more than the %d-byte reserve: no budget left", freeBytes, reserveBytes)
	}
	return freeBytes - reserveBytes, nil
}

// ReadAutoBudget reads the free VRAM from t and returns AutoBudget of it.
func ReadAutoBudget(t Telemetry, reserveBytes uint64) (uint64, error) {
	if t == nil {
		return 0, errors.New("gpu: --budget auto needs GPU telemetry (NVML), and there is none")
	}
	g, err := t.Read()
	if err != nil {
		return 0, fmt.Errorf("gpu: reading free VRAM: %w", err)
	}
	if g.MemoryFreeBytes == 0 {
		return 0, errors.New("gpu: the GPU reported no free-memory figure")
	}
	return AutoBudget(g.MemoryFreeBytes, reserveBytes)
}

// throttleNames names the bits of NVML's clocks-event (throttle) reasons, in
// snake_case as the protocol's Status wants them.
var throttleNames = []string{
	0:  "gpu_idle",
	1:  "applications_clocks_setting",
	2:  "sw_power_cap",
	3:  "hw_slowdown",
	4:  "sync_boost",
	5:  "sw_thermal_slowdown",
	6:  "hw_thermal_slowdown",
	7:  "hw_power_brake_slowdown",
	8:  "display_clock_setting",
	9:  "board_limit",
	10: "reliability",
}

// ThrottleReasons turns an NVML reason mask into names; bits this package
// does not know come back as "unknown_bit_N".
func ThrottleReasons(mask uint64) []string {
	var out []string
	for mask != 0 {
		b := bits.TrailingZeros64(mask)
		mask &^= 1 << b
		if b < len(throttleNames) {
			out = append(out, throttleNames[b])
		} else {
			out = append(out, fmt.Sprintf("unknown_bit_%d", b))
		}
	}
	return out
}

// DefaultAutoHysteresis is how much more than its budget --budget auto
// must find available before it grows: a neighbour whose memory jitters
// by less does not make the node re-plan.
const DefaultAutoHysteresis = 1 << 30 // 1 GiB

// NextAutoBudget decides --budget auto's budget after one sample of the
// GPU: free is its free memory and held the memory this process holds on
// it (both NVML's), so the node could use free + held − reserve. When
// that is below the current budget (another process took memory) the
// budget shrinks to it at once; when it is more than hysteresis above, the
// budget grows to it; otherwise it stays (change false). current 0 is an
// unlimited budget, which any figure shrinks. It fails, keeping the
// budget, when nothing is left beyond the reserve.
func NextAutoBudget(current, free, held, reserve, hysteresis uint64) (next uint64, change bool, err error) {
	avail, err := AutoBudget(free+held, reserve)
	if err != nil {
		return current, false, err
	}
	switch {
	case current == 0 || avail < current:
		return avail, true, nil
	case avail-current > hysteresis:
		return avail, true, nil
	}
	return current, false, nil
}
