package layering

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"vlanode/residency"
	"vlanode/weights"
)

// cost is a unit's copy and compute time in ms.
type cost struct{ dma, exe float64 }

// stack makes units named prefix.i with the given placements and blobs of
// bytes each, and a Fake that times them by costs (by name).
func stack(prefix string, places []residency.Place, bytes int64) []*Unit {
	units := make([]*Unit, len(places))
	for i, p := range places {
		name := fmt.Sprintf("%s.%d", prefix, i)
		units[i] = &Unit{Name: name, Place: p, Blob: &weights.Blob{Name: name, Data: make([]byte, bytes)}}
	}
	return units
}

// all returns n copies of p.
func all(n int, p residency.Place) []residency.Place {
	out := make([]residency.Place, n)
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
		out[u.Name] = c
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
