package layering

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/placement"
	"vlanode/weights"
)

// TestClosedForms checks the total time of an all-streamed stack of L
// identical units over R passes against paper 1's closed forms (§IV-C):
// pipelined EXE-intensive C_DMA + R·L·C_EXE, pipelined DMA-intensive
// R·L·C_DMA + C_EXE (the next pass's copies overlap the last compute),
// sequential R·L·(C_DMA + C_EXE), preload R·L·C_EXE.
func TestClosedForms(t *testing.T) {
	const L = 6
	for _, tc := range []struct {
		name string
		mode Mode
		c    cost
		R    int
		want func(c cost, R float64) float64
	}{
		{"pipelined EXE-intensive", Pipelined, cost{dma: 1, exe: 3}, 1, func(c cost, R float64) float64 { return c.dma + R*L*c.exe }},
		{"pipelined EXE-intensive, 5 passes", Pipelined, cost{dma: 1, exe: 3}, 5, func(c cost, R float64) float64 { return c.dma + R*L*c.exe }},
		{"pipelined DMA-intensive", Pipelined, cost{dma: 4, exe: 1}, 1, func(c cost, R float64) float64 { return R*L*c.dma + c.exe }},
		{"pipelined DMA-intensive, 10 passes", Pipelined, cost{dma: 4, exe: 1}, 10, func(c cost, R float64) float64 { return R*L*c.dma + c.exe }},
		{"pipelined balanced", Pipelined, cost{dma: 2, exe: 2}, 3, func(c cost, R float64) float64 { return c.dma + R*L*c.exe }},
		{"sequential", Sequential, cost{dma: 4, exe: 1}, 3, func(c cost, R float64) float64 { return R * L * (c.dma + c.exe) }},
		{"sequential EXE-intensive", Sequential, cost{dma: 1, exe: 3}, 2, func(c cost, R float64) float64 { return R * L * (c.dma + c.exe) }},
		{"preload", Preload, cost{dma: 4, exe: 1}, 3, func(c cost, R float64) float64 { return R * L * c.exe }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			units := stack("layer", all(L, placement.Streamed), 512)
			f := fakeOf(uniform(units, tc.c))
			p := run(t, f, tc.mode, units, Repeat("pass", units, tc.R))
			assert.InDelta(t, tc.want(tc.c, float64(tc.R)), p.TotalMs, 1e-9)
			copies := 0
			for _, op := range f.Timeline {
				if op.Kind == OpCopy {
					copies++
				}
			}
			if tc.mode == Preload {
				assert.Zero(t, copies)
			} else {
				assert.Equal(t, tc.R*L, copies, "one copy per streamed turn")
			}
		})
	}
}

// TestSlotProtocol checks the schedule itself: streamed turn j uses slot
// j mod 2 counted across passes, a copy starts only once the slot's
// previous user has computed, and a compute only once its copy is done.
func TestSlotProtocol(t *testing.T) {
	places := []placement.Weights{placement.Resident, placement.Streamed, placement.Streamed, placement.Resident, placement.Streamed}
	units := stack("u", places, 256)
	f := fakeOf(map[string]cost{"u.0": {0, 2}, "u.1": {3, 1}, "u.2": {1, 5}, "u.3": {0, 1}, "u.4": {6, 2}})
	p := run(t, f, Pipelined, units, Repeat("step", units, 3))

	var slots []Slot
	for _, turn := range p.Turns {
		if turn.Slot != NoSlot {
			slots = append(slots, turn.Slot)
		}
	}
	require.Len(t, slots, 9)
	for j, s := range slots {
		assert.Equal(t, slots[j%2], s, "turn %d", j) // 3 streamed per pass: the parity flips between passes
	}
	assert.NotEqual(t, slots[0], slots[1])

	var copies, computes []Op
	for _, op := range f.Timeline {
		if op.Kind == OpCopy {
			copies = append(copies, op)
		} else if op.Slot != NoSlot {
			computes = append(computes, op)
		}
	}
	require.Len(t, copies, 9)
	require.Len(t, computes, 9)
	for j := range copies {
		assert.Equal(t, copies[j].Unit, computes[j].Unit)
		assert.LessOrEqual(t, copies[j].End, computes[j].Start, "compute %d before its copy", j)
		if j >= 2 {
			assert.GreaterOrEqual(t, copies[j].Start, computes[j-2].End, "copy %d overwrites slot before compute %d is done", j, j-2)
		}
	}
	// The profile's start times are the timeline's (the run starts at 0).
	j := 0
	for _, turn := range p.Turns {
		if turn.Slot == NoSlot {
			continue
		}
		assert.InDelta(t, copies[j].Start, turn.CopyAtMs, 1e-9, "copy start of streamed turn %d", j)
		assert.InDelta(t, computes[j].Start, turn.ExeAtMs, 1e-9, "compute start of streamed turn %d", j)
		j++
	}
}

// TestVerifyCatchesHazards makes sure the invariant check fails on a bad
// schedule: a slot overwritten during a compute, a compute before its
// copy.
func TestVerifyCatchesHazards(t *testing.T) {
	f := &Fake{Timeline: []Op{
		{Kind: OpCopy, Unit: "a", Slot: 0, Start: 0, End: 1},
		{Kind: OpCompute, Unit: "a", Slot: 0, Start: 1, End: 5},
		{Kind: OpCopy, Unit: "b", Slot: 0, Start: 2, End: 3},    // overwrites a
		{Kind: OpCompute, Unit: "c", Slot: 1, Start: 0, End: 1}, // nothing copied
	}}
	err := f.Verify()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "overwrites")
	assert.Contains(t, err.Error(), "holds nothing")
}

// TestCrossPassPrefetch checks that the next pass's first copies start
// while the current pass still computes, and that they are queued before
// a pass's After hook runs (so a host sync there does not stall them).
func TestCrossPassPrefetch(t *testing.T) {
	units := stack("expert", all(4, placement.Streamed), 256)
	f := fakeOf(uniform(units, cost{dma: 2, exe: 1}))
	passes := Repeat("euler", units, 2)
	queuedAtAfter := -1
	passes[0].After = func() error {
		queuedAtAfter = 0
		for _, op := range f.Timeline {
			if op.Kind == OpCopy {
				queuedAtAfter++
			}
		}
		return nil
	}
	run(t, f, Pipelined, units, passes)
	assert.Equal(t, 4+2, queuedAtAfter, "both slots' next copies are queued before After")

	var lastCompute0, firstCopy1 Op
	n := 0
	for _, op := range f.Timeline {
		switch {
		case op.Kind == OpCompute:
			n++
			if n == 4 {
				lastCompute0 = op
			}
		case op.Kind == OpCopy && op.Unit == "expert.0" && op.Start > 0:
			firstCopy1 = op
		}
	}
	assert.Less(t, firstCopy1.Start, lastCompute0.End, "pass 1's first copy overlaps pass 0's last compute")
}

// TestMixedRandom runs random stacks with residents in every mode and
// checks the invariants, the profile against the fake's durations, and
// the ordering preload ≤ pipelined ≤ sequential.
func TestMixedRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		n := 1 + rng.IntN(12)
		places := make([]placement.Weights, n)
		for i := range places {
			places[i] = placement.Streamed
			if rng.IntN(3) == 0 {
				places[i] = placement.Resident
			}
		}
		costs := map[string]cost{}
		passes := 1 + rng.IntN(4)
		totals := map[Mode]float64{}
		for _, mode := range []Mode{Preload, Sequential, Pipelined} {
			units := stack("u", places, int64(1+rng.IntN(2000)))
			for _, u := range units {
				if _, ok := costs[u.ID.String()]; !ok {
					costs[u.ID.String()] = cost{dma: float64(rng.IntN(10)), exe: float64(1 + rng.IntN(10))}
				}
			}
			f := fakeOf(costs)
			p := run(t, f, mode, units, Repeat("p", units, passes))
			totals[mode] = p.TotalMs
			require.Len(t, p.Turns, n*passes)
			for _, turn := range p.Turns {
				c := costs[turn.Unit.String()]
				assert.Equal(t, c.exe, turn.ExeMs, turn.Unit)
				if turn.Slot != NoSlot {
					assert.Equal(t, c.dma, turn.CopyMs, turn.Unit)
				} else {
					assert.Zero(t, turn.CopyMs)
				}
			}
			for _, u := range p.PerUnit() {
				assert.Equal(t, passes, u.Turns)
			}
		}
		assert.LessOrEqual(t, totals[Preload], totals[Pipelined]+1e-9)
		assert.LessOrEqual(t, totals[Pipelined], totals[Sequential]+1e-9)
	}
}

// TestSlots checks slot sizing (the largest streamed blob, aligned; not
// the resident ones), counts per mode, pinning of streamed blobs only,
// and a refused slot.
func TestSlots(t *testing.T) {
	mk := func() []*Unit {
		return []*Unit{
			{ID: testID("big", 0), Weights: placement.Resident, Blob: &weights.Blob{Name: "big", Data: make([]byte, 4096)}},
			{ID: testID("a", 0), Weights: placement.Streamed, Blob: &weights.Blob{Name: "a", Data: make([]byte, 1000)}},
			{ID: testID("b", 0), Weights: placement.Streamed, Blob: &weights.Blob{Name: "b", Data: make([]byte, 300)}},
			{ID: testID("h", 0), Weights: placement.Host},
		}
	}
	for mode, slots := range map[Mode]int{Pipelined: 2, Sequential: 1, Preload: 0} {
		f := NewFake(nil, nil)
		e, err := New(f, Config{Mode: mode}, mk())
		require.NoError(t, err, mode)
		assert.Equal(t, int64(slots*1024), f.SlotBytes, mode)
		if slots > 0 {
			assert.Equal(t, int64(1024), e.SlotBytes)
			assert.Len(t, f.pinned, 2)
		}
	}
	f := NewFake(nil, nil)
	f.SlotBudget = 1500
	_, err := New(f, Config{Mode: Pipelined}, mk())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "DFB slot 1")
}

// TestErrors checks refused inputs and that failures name the unit.
func TestErrors(t *testing.T) {
	units := stack("u", all(2, placement.Streamed), 256)
	_, err := New(NewFake(nil, nil), Config{}, units)
	assert.ErrorContains(t, err, "unknown mode")
	_, err = New(NewFake(nil, nil), Config{Mode: Pipelined}, append(units, units[0]))
	assert.ErrorContains(t, err, "listed twice")
	_, err = New(NewFake(nil, nil), Config{Mode: Pipelined}, []*Unit{{ID: testID("x", 0), Weights: placement.Streamed}})
	assert.ErrorContains(t, err, "has no blob")

	e, err := New(NewFake(nil, nil), Config{Mode: Pipelined}, units)
	require.NoError(t, err)
	stranger := stack("v", all(1, placement.Streamed), 256)
	_, err = e.Run([]Pass{{Name: "p", Units: stranger}})
	assert.ErrorContains(t, err, "was not given to New")

	boom := errors.New("boom")
	units[1].Run = func(Shard) error { return boom }
	_, err = e.Run(Repeat("p", units, 1))
	require.ErrorIs(t, err, boom)
	assert.ErrorContains(t, err, "unit u.1")
}
