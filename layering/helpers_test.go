package layering

import (
	"testing"

	"github.com/stretchr/testify/require"

	"vlanode/placement"
	"vlanode/weights"
)

// cost is a unit's copy and compute time in ms.
type cost struct{ dma, exe float64 }

// stack makes units named prefix.i with the given placements and blobs of
// bytes each, and a Fake that times them by costs (by name).
func stack(prefix string, places []placement.Weights, bytes int64) []*Unit {
	units := make([]*Unit, len(places))
	for i, p := range places {
		id := testID(prefix, i)
		units[i] = &Unit{ID: id, Weights: p, Blob: &weights.Blob{Name: id.String(), Data: make([]byte, bytes)}}
	}
	return units
}

// all returns n copies of p.
func all(n int, p placement.Weights) []placement.Weights {
	out := make([]placement.Weights, n)
	for i := range out {
		out[i] = p
	}
	return out
}

// fakeOf returns a Fake timing units by costs.
func fakeOf(costs map[string]cost) *Fake {
	return NewFake(
		func(blob string, _ int64) float64 { return costs[blob].dma },
		func(unit string) float64 { return costs[unit].exe })
}

// uniform gives every unit the same cost.
func uniform(units []*Unit, c cost) map[string]cost {
	out := map[string]cost{}
	for _, u := range units {
		out[u.ID.String()] = c
	}
	return out
}

// run executes passes over units in mode on f, checks the DFB
// invariants, and returns the profile.
func run(t *testing.T, f *Fake, mode Mode, units []*Unit, passes []Pass) *Profile {
	t.Helper()
	e, err := New(f, Config{Mode: mode, Profile: true}, units)
	require.NoError(t, err)
	p, err := e.Run(passes)
	require.NoError(t, err)
	require.NoError(t, f.Verify())
	return p
}

// testID is the unit index i of a test module.
func testID(module string, i int) placement.ID {
	return placement.ID{Module: placement.Module(module), Index: i}
}
