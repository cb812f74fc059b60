package models_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/backend"
	"vlanode/backend/replay"
	"vlanode/cpu"
	"vlanode/models"
)

// refusing captures nothing.
type refusing struct{ *replay.Backend }

func (refusing) CaptureGraph(func() error) (backend.Graph, error) {
	return nil, errors.New("no capture here")
}

// TestStepGraph: op by op, then captured, then launched; a refused first
// step hands the step back; a refused capture runs it op by op; either
// stops the graph.
func TestStepGraph(t *testing.T) {
	host, err := cpu.New()
	require.NoError(t, err)
	defer host.Close()
	ctx := context.Background()
	runs := 0
	step := func() error { runs++; return nil }

	r := replay.New(host)
	var g models.StepGraph
	require.True(t, g.Usable(r, nil))
	assert.False(t, g.Usable(host, nil), "the cpu backend captures nothing")
	for range 4 {
		done, err := g.Run(ctx, r, step)
		require.NoError(t, err)
		require.True(t, done)
	}
	assert.Equal(t, 4, runs, "op by op once (then captured), then the graph's three launches")
	assert.Equal(t, 1, r.Captures)
	assert.Equal(t, 3, r.Launches)
	assert.True(t, g.Captured())
	require.NoError(t, g.Close())

	var first models.StepGraph
	done, err := first.Run(ctx, r, func() error { return errors.New("refused") })
	require.NoError(t, err)
	assert.False(t, done, "a refused first step goes back to the caller")
	assert.ErrorContains(t, first.Err(), "refused")
	assert.False(t, first.Usable(r, nil))

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	var stopped models.StepGraph
	done, err = stopped.Run(cancelled, r, func() error { return cancelled.Err() })
	assert.True(t, done)
	assert.ErrorIs(t, err, context.Canceled, "a cancelled step is an error, not a fallback")

	f := refusing{replay.New(host)}
	var noCapture models.StepGraph
	runs = 0
	for range 2 {
		done, err := noCapture.Run(ctx, f, step)
		require.NoError(t, err)
		require.True(t, done)
	}
	assert.Equal(t, 2, runs, "op by op, then op by op after the refused capture")
	assert.ErrorContains(t, noCapture.Err(), "no capture here")
	assert.False(t, noCapture.Captured())
	assert.False(t, noCapture.Usable(f, nil), "callers run op by op from now on")
}
