package gpu

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/msgs"
)

func TestAutoBudget(t *testing.T) {
	cases := []struct {
		free, reserve, want uint64
		err                 string
	}{
		{free: 100 << 30, reserve: DefaultReserve, want: 99 << 30},
		{free: 2 << 30, reserve: 0, want: 2 << 30},
		{free: 1 << 30, reserve: 1 << 30, err: "no budget left"},
		{free: 0, reserve: 1, err: "no budget left"},
	}
	for _, c := range cases {
		got, err := AutoBudget(c.free, c.reserve)
		if c.err != "" {
			assert.ErrorContains(t, err, c.err)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, c.want, got)
	}
}

type fakeGPU struct {
	g   msgs.GPU
	err error
}

func (f fakeGPU) Read() (*msgs.GPU, error) { g := f.g; return &g, f.err }
func (fakeGPU) Close() error               { return nil }

func TestReadAutoBudget(t *testing.T) {
	b, err := ReadAutoBudget(fakeGPU{g: msgs.GPU{MemoryFreeBytes: 10 << 30}}, DefaultReserve)
	require.NoError(t, err)
	assert.Equal(t, uint64(9<<30), b)

	_, err = ReadAutoBudget(nil, DefaultReserve)
	assert.ErrorContains(t, err, "needs GPU telemetry")
	_, err = ReadAutoBudget(fakeGPU{err: errors.New("gone")}, DefaultReserve)
	assert.ErrorContains(t, err, "gone")
	_, err = ReadAutoBudget(fakeGPU{}, DefaultReserve)
	assert.ErrorContains(t, err, "no free-memory figure")
}

func TestThrottleReasons(t *testing.T) {
	assert.Nil(t, ThrottleReasons(0))
	assert.Equal(t, []string{"gpu_idle", "sw_power_cap", "hw_slowdown"}, ThrottleReasons(1|4|8))
	assert.Equal(t, []string{"hw_thermal_slowdown", "unknown_bit_40"}, ThrottleReasons(64|1<<40))
}

// TestNVML reads the real GPU. It needs an NVIDIA driver and GPU 0, so it
// runs on the GPU machine (go test -c, then run the binary there) and says
// it was skipped anywhere else.
func TestNVML(t *testing.T) {
	g, err := OpenNVML(0)
	if err != nil {
		t.Skipf("needs NVML and a GPU (run on the GPU machine): %v", err)
	}
	defer func() { require.NoError(t, g.Close()) }()
	r, err := g.Read()
	require.NoError(t, err)
	t.Logf("%+v", *r)
	assert.NotEmpty(t, r.Name)
	assert.Positive(t, r.MemoryTotalBytes)
	assert.Positive(t, r.MemoryFreeBytes)
	assert.LessOrEqual(t, r.MemoryFreeBytes, r.MemoryTotalBytes)
	assert.Positive(t, r.PCIeGenMax)
	assert.Positive(t, r.PCIeWidthMax)
	assert.Positive(t, r.TemperatureC)
	assert.Positive(t, r.SMClockMHz)
	assert.Positive(t, r.MemClockMHz)
	b, err := ReadAutoBudget(g, DefaultReserve)
	require.NoError(t, err)
	assert.Equal(t, r.MemoryFreeBytes-DefaultReserve, b, "free memory is stable between two reads on an idle GPU")

	_, err = OpenNVML(1 << 20)
	assert.ErrorContains(t, err, "no GPU")
}

func TestNextAutoBudget(t *testing.T) {
	const G = 1 << 30
	for _, c := range []struct {
		name                      string
		current, free, held, hyst uint64
		next                      uint64
		change                    bool
		err                       string
	}{
		{"as planned", 8 * G, 1 * G, 8 * G, G, 8 * G, false, ""},
		{"a neighbour took 3 GiB", 8 * G, 1 * G, 5 * G, G, 5 * G, true, ""},
		{"a little more free: within the hysteresis", 8 * G, 1*G + G/2, 8 * G, G, 8 * G, false, ""},
		{"exactly the hysteresis more: no change", 8 * G, 2 * G, 8 * G, G, 8 * G, false, ""},
		{"more than the hysteresis: grow", 8 * G, 4 * G, 8 * G, G, 11 * G, true, ""},
		{"idle node holding less than its budget", 8 * G, 3 * G, 6 * G, G, 8 * G, false, ""},
		{"unlimited takes any figure", 0, 100 * G, 2 * G, G, 101 * G, true, ""},
		{"nothing beyond the reserve", 8 * G, 0, G, G, 8 * G, false, "not more than the"},
	} {
		t.Run(c.name, func(t *testing.T) {
			next, change, err := NextAutoBudget(c.current, c.free, c.held, G, c.hyst)
			if c.err != "" {
				assert.ErrorContains(t, err, c.err)
			} else {
				assert.NoError(t, err)
			}
			assert.Equal(t, c.next, next)
			assert.Equal(t, c.change, change)
		})
	}
}
