package vision

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/binary"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/msgs"
)

// These tests are the hostile frames of issue 34 and their neighbours:
// files whose header lies about their size, or tells the truth about a
// size no request may have, and decompression bombs. Each must be refused
// before its pixels are allocated: the bytes the refusal allocates are
// measured (runtime.MemStats.TotalAlloc), with bounds far below what
// decoding would take.

// requestBudget is a node's default: 16 frames of up to 2048 × 2048.
const requestBudget = 16 * 2048 * 2048

// allocated returns the bytes fn allocates on the Go heap.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// bitBombPNG is a 1-bit grey PNG of w × h black pixels whose data really
// inflates to that size: w × h / 8 bytes from about a thousandth of it.
func bitBombPNG(t testing.TB, w, h int) []byte {
	t.Helper()
	var idat bytes.Buffer
	zw := zlib.NewWriter(&idat)
	row := make([]byte, 1+(w+7)/8)
	for range h {
		_, err := zw.Write(row)
		require.NoError(t, err)
	}
	require.NoError(t, zw.Close())
	ihdr := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, uint32(w)), uint32(h))
	ihdr = append(ihdr, 1, 0, 0, 0, 0)
	out := appendChunk(append([]byte(nil), pngMagic...), "IHDR", ihdr)
	out = appendChunk(out, "IDAT", idat.Bytes())
	return appendChunk(out, "IEND", nil)
}

// frameOf is a frame of data declaring w × h.
func frameOf(enc msgs.Encoding, w, h int, data []byte) msgs.Frame {
	return msgs.Frame{V: msgs.Version, Camera: "cross_right_120fov", Encoding: enc, Width: w, Height: h, Data: data}
}

func TestHostileFramesAreRefusedBeforeDecoding(t *testing.T) {
	p, err := NewProcessor(AlpamayoConfig(), WithMaxPixels(requestBudget))
	require.NoError(t, err)
	small := goPNGFrame(t, sceneImage(128, 96, 1))
	bomb := bitBombPNG(t, 30000, 30000)
	t.Logf("1-bit bomb: %d bytes for 30000×30000", len(bomb))
	huge := bitBombPNG(t, 16384, 16384)
	jpg := goJPEGFrame(t, sceneImage(320, 240, 2), 97)
	require.Greater(t, len(jpg.Data), 20000, "about the 23 KB of the issue")

	repeat := func(f msgs.Frame, n int) []msgs.Frame {
		out := make([]msgs.Frame, n)
		for i := range out {
			out[i] = f
		}
		return out
	}
	tests := []struct {
		name   string
		frames []msgs.Frame
		msg    string
	}{ // frames of a message with "header" are inconsistent by themselves (CheckFrame)
		{"PNG claiming 60000×60000 in a 128×96 frame",
			[]msgs.Frame{frameOf(msgs.EncodingPNG, 128, 96, withIHDRSize(small.Data, 60000, 60000))},
			"the file's header says 60000×60000, the frame declares 128×96"},
		{"1-bit PNG bomb of 30000×30000 in a 128×96 frame, 16 times",
			repeat(frameOf(msgs.EncodingPNG, 128, 96, bomb), 16),
			"the file's header says 30000×30000, the frame declares 128×96"},
		{"1-bit PNG bomb of 30000×30000 declared so",
			[]msgs.Frame{frameOf(msgs.EncodingPNG, 30000, 30000, bomb)},
			"size 30000×30000 is outside 1..16384"},
		{"16 PNGs of 16384×16384",
			repeat(frameOf(msgs.EncodingPNG, 16384, 16384, huge), 16),
			"more than the 67108864 a request may hold"},
		{"one PNG of 16384×16384",
			[]msgs.Frame{frameOf(msgs.EncodingPNG, 16384, 16384, huge)},
			"1 frames of 268435456 pixels in all, more than the 67108864 a request may hold"},
		{"JPEG claiming 16384×16384 with 23 KB of scan data, declared so",
			[]msgs.Frame{frameOf(msgs.EncodingJPEG, 16384, 16384, withSOFSize(t, jpg.Data, 16384, 16384))},
			"more than the 67108864 a request may hold"},
		{"JPEG claiming 16384×16384 in a 320×240 frame",
			[]msgs.Frame{frameOf(msgs.EncodingJPEG, 320, 240, withSOFSize(t, jpg.Data, 16384, 16384))},
			"the file's header says 16384×16384, the frame declares 320×240"},
		{"JPEG claiming 160×120 in a 320×240 frame",
			[]msgs.Frame{frameOf(msgs.EncodingJPEG, 320, 240, withSOFSize(t, jpg.Data, 160, 120))},
			"the file's header says 160×120, the frame declares 320×240"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b Batch
			var err error
			n := allocated(func() { err = p.ProcessFrames(context.Background(), &b, tt.frames) })
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalidFrame)
			assert.ErrorContains(t, err, tt.msg)
			// A decoded 128×96 frame would be 37 KB; these frames claim
			// megapixels. The refusal is a few error strings and the
			// call's bookkeeping.
			t.Logf("%d bytes allocated", n)
			if !raceEnabled {
				assert.Less(t, n, uint64(64<<10), "bytes allocated")
			}
			for i := range tt.frames {
				err := CheckFrame(&tt.frames[i])
				if strings.Contains(tt.msg, "header") || strings.Contains(tt.msg, "outside") {
					assert.ErrorIs(t, err, ErrInvalidFrame, "CheckFrame")
				} else {
					assert.NoError(t, err, "CheckFrame: a frame of a size a request may not hold")
				}
			}
		})
	}
}

// TestTruncatedJPEGIsNotPadded is the truncated JPEG of issue 34 at a size
// a request may hold: its header says 2048×2048 (and so does the frame)
// but its scan data is that of a 320×240 image, 23 KB. libjpeg pads such
// a file with grey after a warning; here the warning ends the decoding
// with an error.
func TestTruncatedJPEGIsNotPadded(t *testing.T) {
	jpg := goJPEGFrame(t, sceneImage(320, 240, 2), 97)
	require.Greater(t, len(jpg.Data), 20000)
	f := frameOf(msgs.EncodingJPEG, 2048, 2048, withSOFSize(t, jpg.Data, 2048, 2048))
	require.NoError(t, CheckFrame(&f), "the header is consistent")
	var img Image
	err := DecodeContext(context.Background(), &img, &f)
	assert.ErrorIs(t, err, ErrInvalidFrame)
	assert.ErrorContains(t, err, "corrupt or truncated image")

	p, err := NewProcessor(AlpamayoConfig(), WithMaxPixels(requestBudget))
	require.NoError(t, err)
	err = p.ProcessFrames(context.Background(), new(Batch), []msgs.Frame{f})
	assert.ErrorIs(t, err, ErrInvalidFrame)
}

func TestProcessFramesStopsWhenCancelled(t *testing.T) {
	p, err := NewProcessor(AlpamayoConfig())
	require.NoError(t, err)
	frames := []msgs.Frame{goJPEGFrame(t, sceneImage(640, 480, 1), 90), goPNGFrame(t, sceneImage(640, 480, 2))}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = p.ProcessFrames(ctx, new(Batch), frames)
	assert.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, ErrInvalidFrame)
	assert.ErrorContains(t, err, "decoding stopped")
}

// countdownCtx is a context that is done after its Err has been asked a
// number of times: it stops the PNG decoder in the middle of an image,
// deterministically.
type countdownCtx struct {
	context.Context
	left int
}

func (c *countdownCtx) Err() error {
	if c.left <= 0 {
		return context.Canceled
	}
	c.left--
	return nil
}

func TestPNGDecodingStopsMidImage(t *testing.T) {
	f := goPNGFrame(t, sceneImage(1024, 768, 3)) // about 2 MB: hundreds of reads
	require.Greater(t, len(f.Data), 100*pngChunk)
	var img Image
	err := decodePNG(&countdownCtx{Context: context.Background(), left: 20}, &img, &f)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorContains(t, err, "decoding stopped")
}

func TestWithMaxPixels(t *testing.T) {
	f := rawFrame(testImage(64, 48, 1), msgs.EncodingRGB8, 0)
	p, err := NewProcessor(AlpamayoConfig(), WithMaxPixels(2*64*48))
	require.NoError(t, err)
	assert.Equal(t, 2*64*48, p.MaxPixels())
	require.NoError(t, p.ProcessFrames(context.Background(), new(Batch), []msgs.Frame{f, f}))
	err = p.ProcessFrames(context.Background(), new(Batch), []msgs.Frame{f, f, f})
	assert.ErrorIs(t, err, ErrInvalidFrame)
	assert.ErrorContains(t, err, "3 frames of 9216 pixels in all, more than the 6144 a request may hold")
	unbounded, err := NewProcessor(AlpamayoConfig())
	require.NoError(t, err)
	assert.Zero(t, unbounded.MaxPixels())
}
