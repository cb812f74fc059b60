package vision

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/backend"
	"vlanode/cpu"
	"vlanode/msgs"
	"vlanode/tensor"
)

// hostPrep is a backend.ImagePrep on the cpu backend, for the tests of
// DeviceProcessor's own work (checks, decoding into the stage, the order
// of errors, freeing): its stage is Go memory, and its Patches computes an
// image's rows with a Processor of its own, which is what a device must
// compute bit for bit (TestGPUDeviceProcessorMatchesHost checks cuda's).
type hostPrep struct {
	*cpu.Backend
	t       *testing.T
	p       *Processor
	live    int // tensors allocated and not freed
	stages  int // stages made
	readies int // Ready calls
	failAt  int // the Patches call that fails, counting from 1 (0: none)
	patches int
}

func newHostPrep(t *testing.T) *hostPrep {
	be, err := cpu.New(cpu.WithThreads(2))
	require.NoError(t, err)
	t.Cleanup(func() { be.Close() })
	p, err := NewProcessor(AlpamayoConfig())
	require.NoError(t, err)
	return &hostPrep{Backend: be, t: t, p: p}
}

func (h *hostPrep) Alloc(purpose string, dt tensor.DType, shape ...int) (backend.Tensor, error) {
	h.live++
	return h.Backend.Alloc(purpose, dt, shape...)
}

func (h *hostPrep) Free(t backend.Tensor) {
	h.live--
	h.Backend.Free(t)
}

func (h *hostPrep) NewImageStage(bytes int) (backend.ImageStage, error) {
	h.stages++
	return &hostStage{h: h, mem: make([]byte, bytes)}, nil
}

type hostStage struct {
	h   *hostPrep
	mem []byte
}

func (s *hostStage) Host() []byte { return s.mem }
func (s *hostStage) Ready() error { s.h.readies++; return nil }
func (s *hostStage) Close() error { return nil }

func (s *hostStage) Patches(dst backend.Tensor, off int, im backend.PatchImage) error {
	h := s.h
	h.patches++
	if h.patches == h.failAt {
		return errors.New("the device is on fire")
	}
	require.NoError(h.t, im.Check())
	img := NewImage(im.Width, im.Height)
	copyRGB(img.Pix, s.mem[off:off+im.Bytes()], im.BGR)
	g, w, ht, err := h.p.Grid(im.Width, im.Height)
	require.NoError(h.t, err)
	assert.Equal(h.t, [2]int{w, ht}, [2]int{im.OutWidth(), im.OutHeight()}, "resized size")
	assert.Equal(h.t, g.Patches(), im.Patches())
	rows := make([]float32, im.Patches()*im.RowSize())
	if _, err := h.p.PreprocessInto(rows, img); err != nil {
		return err
	}
	view, err := h.Rows(dst, im.Row, im.Patches())
	if err != nil {
		return err
	}
	return h.Upload(view, rows)
}

// deviceFrames is one frame of each kind the decoders take.
func deviceFrames(t *testing.T) []msgs.Frame {
	return []msgs.Frame{
		goJPEGFrame(t, sceneImage(640, 480, 1), 90),                 // resized both ways
		goPNGFrame(t, sceneImage(512, 384, 2)),                      // not resized
		rawFrame(testImage(320, 240, 3), msgs.EncodingRGB8, 0),      // scaled up, in place
		rawFrame(testImage(512, 384, 4), msgs.EncodingBGR8, 0),      // BGR in place
		rawFrame(testImage(512, 400, 5), msgs.EncodingBGR8, 1600),   // padded rows, resized vertically
		rawFrame(testImage(300, 200, 6), msgs.EncodingMono8, 0),     // grey
		goJPEGFrame(t, sceneImage(1920, 1080, 7), 90),               // a camera
		rawFrame(testImage(1920, 1080, 8), msgs.EncodingRGB8, 5888), // a camera, padded
	}
}

func TestDeviceProcessorMatchesProcessFrames(t *testing.T) {
	h := newHostPrep(t)
	p, err := NewProcessor(AlpamayoConfig(), WithWorkers(3))
	require.NoError(t, err)
	d, err := p.OnDevice(h)
	require.NoError(t, err)
	defer d.Close()
	frames := deviceFrames(t)
	frames = append(frames, frames[6:]...) // past the first stage's 16 MiB
	var want Batch
	require.NoError(t, p.ProcessFrames(context.Background(), &want, frames))
	for _, n := range []int{3, 3, len(frames)} { // the third call needs a larger stage
		db, err := d.ProcessFrames(context.Background(), frames[:n])
		require.NoError(t, err)
		got, err := h.Download(db.PixelValues)
		require.NoError(t, err)
		assert.Equal(t, want.Grids[:n], db.Grids)
		assert.Equal(t, want.PixelValues[:len(got)], got)
		assert.Equal(t, want.Rows()*p.RowSize(), len(want.PixelValues))
		h.Free(db.PixelValues)
	}
	assert.Zero(t, h.live)
	assert.Equal(t, 2, h.stages, "one stage, then a larger one")
	assert.Equal(t, 1, h.readies, "Ready before reusing the stage")
}

func TestDeviceProcessorErrors(t *testing.T) {
	h := newHostPrep(t)
	p, err := NewProcessor(AlpamayoConfig(), WithMaxPixels(requestBudget))
	require.NoError(t, err)
	d, err := p.OnDevice(h)
	require.NoError(t, err)
	defer d.Close()
	good := goJPEGFrame(t, sceneImage(640, 480, 1), 90)
	corrupt := good
	corrupt.Camera = "front_tele_30fov"
	corrupt.Data = append(append([]byte(nil), good.Data[:len(good.Data)*2/3]...), 0xFF, 0xD9)
	lying := frameOf(msgs.EncodingPNG, 128, 96, withIHDRSize(goPNGFrame(t, sceneImage(128, 96, 1)).Data, 60000, 60000))

	_, err = d.ProcessFrames(context.Background(), []msgs.Frame{good, lying})
	assert.ErrorIs(t, err, ErrInvalidFrame)
	assert.ErrorContains(t, err, "the file's header says 60000×60000, the frame declares 128×96 (frame 1 of 2)")
	assert.Zero(t, h.stages, "refused before any memory is taken")

	_, err = d.ProcessFrames(context.Background(), []msgs.Frame{good, good, corrupt, good})
	assert.ErrorIs(t, err, ErrInvalidFrame)
	assert.ErrorContains(t, err, `camera "front_tele_30fov": jpeg: invalid frame: corrupt or truncated image`)
	assert.ErrorContains(t, err, "(frame 2 of 4)")
	assert.Zero(t, h.live, "the pixel values freed")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = d.ProcessFrames(ctx, []msgs.Frame{good, good})
	assert.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, h.live)

	h.failAt = h.patches + 2
	_, err = d.ProcessFrames(context.Background(), []msgs.Frame{good, good, good})
	assert.ErrorContains(t, err, "preprocessing on the device: the device is on fire")
	assert.NotErrorIs(t, err, ErrInvalidFrame)
	assert.Zero(t, h.live)

	_, err = d.ProcessFrames(context.Background(), nil)
	assert.ErrorIs(t, err, ErrInvalidFrame)

	_, err = p.OnDevice(h.Backend)
	assert.ErrorContains(t, err, "the cpu backend cannot preprocess images")
}
