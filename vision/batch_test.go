package vision

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/msgs"
)

func TestProcessFramesRaw(t *testing.T) {
	frames := []msgs.Frame{
		rawFrame(testImage(640, 480, 1), msgs.EncodingRGB8, 0),    // resized, used in place
		rawFrame(testImage(512, 384, 2), msgs.EncodingBGR8, 1600), // padded rows: copied
		rawFrame(testImage(320, 240, 3), msgs.EncodingMono8, 0),   // scaled up
		rawFrame(testImage(512, 384, 4), msgs.EncodingBGR8, 0),    // BGR in place
	}
	for _, workers := range []int{1, 2, 4, 8} {
		p, err := NewProcessor(AlpamayoConfig(), WithWorkers(workers))
		require.NoError(t, err)
		var b Batch
		require.NoError(t, p.ProcessFrames(context.Background(), &b, frames))
		off := 0
		for i := range frames {
			img, err := Decode(&frames[i])
			require.NoError(t, err)
			want, g, err := p.Preprocess(img)
			require.NoError(t, err)
			assert.Equal(t, g, b.Grids[i])
			assert.Equal(t, want, b.PixelValues[off:off+len(want)], "workers %d frame %d", workers, i)
			off += len(want)
		}
		assert.Len(t, b.PixelValues, off)
		assert.Equal(t, off/p.RowSize(), b.Rows())
		assert.Equal(t, []int64{1, 24, 32, 1, 24, 32, 1, 22, 30, 1, 24, 32}, b.GridTHW())
	}
}

func TestProcessFramesReusesBuffers(t *testing.T) {
	// Two workers, whatever the machine: each goroutine started is an
	// allocation.
	p, err := NewProcessor(AlpamayoConfig(), WithWorkers(2))
	require.NoError(t, err)
	frame := rawFrame(testImage(512, 384, 1), msgs.EncodingRGB8, 0)
	var b Batch
	require.NoError(t, p.ProcessFrames(context.Background(), &b, []msgs.Frame{frame, frame}))
	first := &b.PixelValues[0]
	require.NoError(t, p.ProcessFrames(context.Background(), &b, []msgs.Frame{frame}))
	assert.Same(t, first, &b.PixelValues[0])
	assert.Len(t, b.Grids, 1)
	assert.Equal(t, 768, b.Rows())
	if raceEnabled {
		return
	}
	allocs := testing.AllocsPerRun(5, func() {
		if err := p.ProcessFrames(context.Background(), &b, []msgs.Frame{frame}); err != nil {
			t.Fatal(err)
		}
	})
	assert.LessOrEqual(t, allocs, 10.0, "allocations a call")
}

func TestProcessFramesErrors(t *testing.T) {
	p, err := NewProcessor(AlpamayoConfig())
	require.NoError(t, err)
	good := rawFrame(testImage(512, 384, 1), msgs.EncodingRGB8, 0)
	short := good
	short.Camera = "front_tele_30fov"
	short.Data = good.Data[:100]
	err = p.ProcessFrames(context.Background(), new(Batch), []msgs.Frame{good, good, short, good})
	assert.ErrorIs(t, err, ErrInvalidFrame)
	assert.ErrorContains(t, err, `camera "front_tele_30fov": rgb8: invalid frame`)
	assert.ErrorContains(t, err, "(frame 2 of 4)")

	thin := good
	thin.Width, thin.Height = 1, 300
	err = p.ProcessFrames(context.Background(), new(Batch), []msgs.Frame{good, thin})
	assert.ErrorIs(t, err, ErrInvalidFrame)
	assert.ErrorContains(t, err, "frame 1 of 2")

	var b Batch
	require.NoError(t, p.ProcessFrames(context.Background(), &b, nil))
	assert.Zero(t, b.Rows())
}
