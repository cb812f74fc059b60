package layering

import (
	"testing"
	"vlanode/placement"

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
				require.NoError(t, r.Do(u, func(Slot) error { ran = append(ran, u.ID.String()); return nil }))
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

// TestRunnerPromote streams a stack through one prefill pass, then
// promotes two of its units into slots of their own: the decode passes
// compute them in place (after their one copy), the others keep streaming,
// and every compute finds its own blob (Verify).
func TestRunnerPromote(t *testing.T) {
	for _, mode := range []Mode{Pipelined, Sequential} {
		t.Run(mode.String(), func(t *testing.T) {
			units := stack("vlm", all(5, placement.Streamed), 256)
			f := fakeOf(uniform(units, cost{dma: 3, exe: 1}))
			e, err := New(f, Config{Mode: mode, Profile: true}, units)
			require.NoError(t, err)
			passes := append([]Pass{{Name: "prefill", Stage: "prefill", Units: units}}, Repeat("decode", units, 4)...)
			r, err := e.Start(passes)
			require.NoError(t, err)
			for _, u := range units {
				require.NoError(t, r.Do(u, nil))
			}
			a, err := f.AllocSlot(256)
			require.NoError(t, err)
			b, err := f.AllocSlot(256)
			require.NoError(t, err)
			require.NoError(t, r.Promote([]*Unit{units[1], units[3]}, []Slot{a, b}))
			for r.Next() != nil {
				require.NoError(t, r.Do(r.Next(), nil))
			}
			p, err := r.Finish()
			require.NoError(t, err)
			require.NoError(t, f.Verify())
			copies := map[string]int{}
			for _, op := range f.Timeline {
				if op.Kind == OpCopy {
					copies[op.Unit]++
				}
			}
			// vlm.1 and vlm.3: the prefill's copy, perhaps one decode copy
			// already queued, and the promotion copy.
			for _, u := range []string{"vlm.1", "vlm.3"} {
				assert.LessOrEqual(t, copies[u], 3, u)
				assert.GreaterOrEqual(t, copies[u], 2, u)
			}
			assert.Equal(t, 5, copies["vlm.0"], "streamed every pass")
			home := 0
			for _, tr := range p.Turns {
				if tr.Slot == a || tr.Slot == b {
					home++
				}
			}
			assert.GreaterOrEqual(t, home, 6, "most decode turns of the promoted units run in place")
			require.NoError(t, f.FreeSlot(a))
			require.NoError(t, f.FreeSlot(b))
		})
	}
}
