package layering

import (
	"fmt"
	"testing"
	"time"
	"vlanode/placement"
	"vlanode/weights"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRunnerSkip drives a schedule of up to 6 decode passes and 2
// diffusion passes by hand, stops the decode after 2 passes, and checks
// that every computed unit found its own blob in its slot (Verify), that
// the diffusion passes all ran, and that the only extra copies are the
// ones prefetched for the dropped pass.
func TestRunnerSkip(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mode   Mode
		places []placement.Weights
	}{
		{"pipelined all streamed", Pipelined, all(3, placement.Streamed)},
		{"pipelined one streamed", Pipelined, []placement.Weights{placement.Resident, placement.Streamed, placement.Resident}},
		{"pipelined none streamed in decode", Pipelined, all(3, placement.Resident)},
		{"sequential", Sequential, all(3, placement.Streamed)},
		{"preload", Preload, all(3, placement.Streamed)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dec := stack("vlm", tc.places, 256)
			exp := stack("expert", all(2, placement.Streamed), 512)
			f := fakeOf(uniform(append(append([]*Unit{}, dec...), exp...), cost{dma: 2, exe: 1}))
			e, err := New(f, Config{Mode: tc.mode, Profile: true}, append(append([]*Unit{}, dec...), exp...))
			require.NoError(t, err)
			passes := append(Repeat("decode", dec, 6), Repeat("diffusion", exp, 2)...)
			r, err := e.Start(passes)
			require.NoError(t, err)
			var ran []string
			do := func(u *Unit) {
				require.NoError(t, r.Do(u, func(Shard) error { ran = append(ran, u.ID.String()); return nil }))
			}
			for range 2 {
				for _, u := range dec {
					do(u)
				}
				assert.True(t, r.PassDone())
			}
			require.NoError(t, r.Skip("decode"))
			assert.Equal(t, "diffusion.0", r.Pass())
			for range 2 {
				for _, u := range exp {
					do(u)
				}
			}
			assert.Nil(t, r.Next())
			p, err := r.Finish()
			require.NoError(t, err)
			require.NoError(t, f.Verify())
			assert.Len(t, ran, 2*3+2*2)
			assert.Len(t, p.Turns, 2*3+2*2)

			copies, wasted := 0, 0
			for _, op := range f.Timeline {
				if op.Kind == OpCopy {
					copies++
				}
			}
			streamedDec := 0
			for _, u := range dec {
				if u.streamed(tc.mode) {
					streamedDec++
				}
			}
			needed := 2*streamedDec + 4
			if tc.mode == Preload {
				needed = 0
			}
			wasted = copies - needed
			assert.GreaterOrEqual(t, wasted, 0)
			if tc.mode == Pipelined {
				assert.LessOrEqual(t, wasted, 2, "at most the two prefetched turns are wasted")
			} else {
				assert.Zero(t, wasted)
			}
		})
	}
}

// TestRunnerOrder checks that a unit out of schedule order, a Finish
// before the schedule ran, and a Do after an error all fail.
func TestRunnerOrder(t *testing.T) {
	units := stack("u", all(2, placement.Streamed), 256)
	f := fakeOf(uniform(units, cost{dma: 1, exe: 1}))
	e, err := New(f, Config{Mode: Pipelined}, units)
	require.NoError(t, err)

	r, err := e.Start(Repeat("p", units, 1))
	require.NoError(t, err)
	_, err = r.Finish()
	assert.ErrorContains(t, err, "run finished before unit u.0 of pass p.0")

	r, err = e.Start(Repeat("p", units, 1))
	require.NoError(t, err)
	err = r.Do(units[1], nil)
	assert.ErrorContains(t, err, "unit u.1 computed where the schedule has u.0")
	assert.Error(t, r.Do(units[0], nil), "a failed run stays failed")

	r, err = e.Start(Repeat("p", units, 1))
	require.NoError(t, err)
	require.NoError(t, r.Do(units[0], nil))
	assert.ErrorContains(t, r.Skip("p"), "in the middle of pass p.0")
}

// TestRunnerHomes places units per stage: the prefill streams a stack;
// the decode gives two of its units homes (copied there in the decode's
// first pass, in place after); the diffusion frees them for a home of its
// own; a second run keeps nothing of the first's homes. Every compute
// finds its own blob (Verify), homes cost one copy a stage, and the
// homes in use never exceed what the stage needs.
func TestRunnerHomes(t *testing.T) {
	for _, mode := range []Mode{Pipelined, Sequential} {
		t.Run(mode.String(), func(t *testing.T) {
			vlm := stack("vlm", all(5, placement.Streamed), 256)
			exp := stack("expert", all(3, placement.Streamed), 512)
			units := append(append([]*Unit{}, vlm...), exp...)
			f := fakeOf(uniform(units, cost{dma: 3, exe: 1}))
			e, err := New(f, Config{Mode: mode, Profile: true}, units)
			require.NoError(t, err)
			decode := make([]placement.Placement, len(vlm))
			for i := range decode {
				decode[i] = placement.StreamGPU
			}
			decode[1], decode[3] = placement.OnGPU, placement.OnGPU
			diffusion := []placement.Placement{placement.OnGPU, placement.StreamGPU, placement.StreamGPU}
			passes := []Pass{{Name: "prefill", Stage: "prefill", Units: vlm}}
			for i := range 4 {
				passes = append(passes, Pass{Name: fmt.Sprintf("decode.%d", i), Stage: "decode", Units: vlm, Place: decode})
			}
			for i := range 2 {
				passes = append(passes, Pass{Name: fmt.Sprintf("diffusion.%d", i), Stage: "diffusion", Units: exp, Place: diffusion})
			}
			for run := range 2 {
				f.Timeline = nil
				slotsBefore := f.SlotBytes
				p, err := e.Run(passes)
				require.NoError(t, err, "run %d", run)
				require.NoError(t, f.Verify())
				require.NoError(t, p.HomeErrors)
				copies := map[string]int{}
				for _, op := range f.Timeline {
					if op.Kind == OpCopy {
						copies[op.Unit]++
					}
				}
				for _, u := range []string{"vlm.1", "vlm.3"} {
					assert.Equal(t, 2, copies[u], "%s: the prefill's copy and its home's", u)
				}
				assert.Equal(t, 5, copies["vlm.0"], "streamed every pass")
				assert.Equal(t, 1, copies["expert.0"], "one copy into its home")
				assert.Equal(t, 2, copies["expert.1"])
				home := 0
				for _, tr := range p.Turns {
					if tr.Unit.Module == "vlm" && (tr.Unit.Index == 1 || tr.Unit.Index == 3) && tr.Pass != "prefill" {
						assert.NotEqual(t, e.slots[0], tr.Slot)
						home++
					}
				}
				assert.Equal(t, 8, home)
				// After the run the diffusion's home is what remains.
				require.Len(t, e.homes, 1)
				assert.Equal(t, int64(len(e.slots))*e.SlotBytes+512, f.SlotBytes, "after run %d (%d before)", run, slotsBefore)
			}
		})
	}
}

// TestRunnerCPU runs split and CPU-whole turns on the Fake: each CPU task
// starts once the compute stream has handed its input over (one hop after
// the unit before it), runs on the CPU engine in order, and the compute
// after the unit waits for its result (one hop back); the GPU's share of a
// split unit runs alongside its CPU task; tasks run for real, in order.
func TestRunnerCPU(t *testing.T) {
	units := stack("mlp", all(4, placement.Streamed), 1024)
	for _, u := range units {
		u.Share = func(c int) ([]weights.Rect, int64, error) {
			return []weights.Rect{{Width: 256, Height: 1, SrcPitch: 256, DstPitch: 256}}, 256, nil
		}
	}
	f := fakeOf(uniform(units, cost{dma: 4, exe: 1}))
	f.CPU = func(string) float64 { return 3 }
	f.Hop = 0.5
	e, err := New(f, Config{Mode: Pipelined, Profile: true}, units)
	require.NoError(t, err)
	defer e.Close()
	place := []placement.Placement{
		{Weights: placement.Streamed, Engine: placement.GPU, CPUSplit: 128},
		placement.HostCPU,
		placement.StreamGPU,
		{Weights: placement.Streamed, Engine: placement.GPU, CPUSplit: 128},
	}
	var ran []string
	for _, u := range units {
		u.Run = func(sh Shard) error {
			if sh.CPU == 0 {
				return nil
			}
			if err := sh.Offload(func(computing func()) error {
				time.Sleep(2 * time.Millisecond) // the input's wait
				computing()
				time.Sleep(time.Millisecond)
				ran = append(ran, u.ID.String())
				return nil
			}); err != nil {
				return err
			}
			if err := sh.Ready(); err != nil {
				return err
			}
			return sh.Join(func() error { return nil })
		}
	}
	p, err := e.Run([]Pass{{Name: "decode.0", Stage: "decode", Units: units, Place: place}})
	require.NoError(t, err)
	require.NoError(t, f.Verify())
	assert.Equal(t, []string{"mlp.0", "mlp.1", "mlp.3"}, ran, "the CPU's tasks, in order")
	require.Len(t, p.CPUTasks, 3)
	for i, task := range p.CPUTasks {
		assert.Equal(t, ran[i], task.Unit.String())
		assert.GreaterOrEqual(t, task.WaitMs, 2.0, "the wait before computing counts as waiting")
		assert.GreaterOrEqual(t, task.Ms, 1.0, "the compute counts from computing()")
		assert.GreaterOrEqual(t, task.AtMs, 0.0)
		if i > 0 {
			prev := p.CPUTasks[i-1]
			assert.GreaterOrEqual(t, task.AtMs, prev.AtMs+prev.WaitMs+prev.Ms-1e-6, "tasks run in order")
		}
	}
	var cpu, gpu []Op
	for _, op := range f.Timeline {
		switch op.Kind {
		case OpCPU:
			cpu = append(cpu, op)
		case OpCompute:
			gpu = append(gpu, op)
		}
	}
	require.Len(t, cpu, 3)
	require.Len(t, gpu, 4)
	// mlp.0: its share is copied [0,1] (256 of 1024 bytes timed as a copy
	// of the blob: 4 ms), the CPU starts at 0.5 (input at 0, one hop),
	// the GPU's share computes after its copy, and mlp.1 waits for the
	// CPU (3.5) and the hop back (4).
	assert.InDelta(t, 0.5, cpu[0].Start, 1e-9)
	assert.InDelta(t, 4, gpu[0].Start, 1e-9, "the GPU share waits for its copy")
	assert.InDelta(t, 5, gpu[1].Start, 1e-9, "the next unit after the share and the CPU's result")
	assert.InDelta(t, 5.5, cpu[1].Start, 1e-9, "mlp.1 on the CPU whole: one hop after mlp.0's end")
	assert.InDelta(t, 9, gpu[2].Start, 1e-9, "mlp.2 after mlp.1's result (8.5) and the hop back")
	assert.GreaterOrEqual(t, cpu[2].Start, gpu[2].End+0.5-1e-9, "mlp.3's CPU task after mlp.2's output")
	for i := 1; i < len(cpu); i++ {
		assert.GreaterOrEqual(t, cpu[i].Start, cpu[i-1].End-1e-9, "one CPU engine: in order")
	}
}
