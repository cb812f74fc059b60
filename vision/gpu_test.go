package vision

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/cuda/cudatest"
	"vlanode/msgs"
	"vlanode/safetensors"
)

// The GPU tests run DeviceProcessor on the cuda backend (backend.ImagePrep:
// kernels/imageprep.cu). Without a GPU they report themselves SKIPPED.

// TestGPUDeviceProcessorMatchesHost compares the device's pixel values bit
// for bit with the host's ProcessFrames on frames of every kind (camera
// JPEGs, PNG, raw RGB, BGR and grey, padded rows; resized down, up, one
// way and not at all), then the reference images' with transformers'
// SHA-256.
func TestGPUDeviceProcessorMatchesHost(t *testing.T) {
	be := cudatest.Open(t)
	p, err := NewProcessor(AlpamayoConfig())
	require.NoError(t, err)
	d, err := p.OnDevice(be)
	require.NoError(t, err)
	defer d.Close()
	frames := deviceFrames(t)
	var want Batch
	require.NoError(t, p.ProcessFrames(context.Background(), &want, frames))
	db, err := d.ProcessFrames(context.Background(), frames)
	require.NoError(t, err)
	got, err := be.Download(db.PixelValues)
	be.Free(db.PixelValues)
	require.NoError(t, err)
	assert.Equal(t, want.Grids, db.Grids)
	require.Len(t, got, len(want.PixelValues))
	off := 0
	for i, g := range want.Grids {
		n := g.Patches() * p.RowSize()
		diff, first := 0, -1
		for j := off; j < off+n; j++ {
			if math.Float32bits(got[j]) != math.Float32bits(want.PixelValues[j]) {
				if diff++; first < 0 {
					first = j - off
				}
			}
		}
		if !assert.Zero(t, diff, "frame %d (%s %d×%d): values that differ from the host's", i, frames[i].Encoding, frames[i].Width, frames[i].Height) {
			t.Logf("frame %d: first difference at value %d (row %d): device %g, host %g", i, first, first/p.RowSize(), got[off+first], want.PixelValues[off+first])
		}
		off += n
	}
	t.Logf("%d frames, %d values: bit-identical to the host's", len(frames), len(got))

	// transformers' own pixel values, through the device.
	paths := skipWithoutReference(t, "*.expected.safetensors")
	for _, path := range paths {
		name := strings.TrimSuffix(filepath.Base(path), ".expected.safetensors")
		t.Run(name, func(t *testing.T) {
			f, err := safetensors.OpenFile(path)
			require.NoError(t, err)
			defer f.Close()
			fr := goPNGFrame(t, readPNG(t, filepath.Join(referenceDir, name+".png")))
			db, err := d.ProcessFrames(context.Background(), []msgs.Frame{fr})
			require.NoError(t, err)
			got, err := be.Download(db.PixelValues)
			be.Free(db.PixelValues)
			require.NoError(t, err)
			sum := sha256.New()
			buf := make([]byte, 4)
			for _, v := range got {
				binary.LittleEndian.PutUint32(buf, math.Float32bits(v))
				sum.Write(buf)
			}
			assert.Equal(t, f.Metadata()["pixel_values_sha256"], hex.EncodeToString(sum.Sum(nil)), "pixel_values are not bit-identical to transformers'")
		})
	}
}

// BenchmarkGPUProcessFrames16JPEG1920x1080 is the standard workload's
// preprocessing end to end with the model on CUDA: 16 JPEG frames of
// 1920×1080 checked and decoded on the host's cores into page-locked
// memory, copied to the GPU and resized to 576×320, normalized and
// patchified there (16 × 720 rows), until the GPU is done (Sync) and the
// pixel values freed, as an inference frees them.
func BenchmarkGPUProcessFrames16JPEG1920x1080(b *testing.B) {
	be := cudatest.Open(b)
	frames := benchFrames(b, 16, 1920, 1080)
	p, err := NewProcessor(AlpamayoConfig())
	if err != nil {
		b.Fatal(err)
	}
	d, err := p.OnDevice(be)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	run := func() {
		db, err := d.ProcessFrames(context.Background(), frames)
		if err != nil {
			b.Fatal(err)
		}
		be.Free(db.PixelValues)
		if err := be.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	run() // warm: the stage, the filters, the kernels
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	for b.Loop() {
		run()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1e3/float64(b.N), "ms/batch")
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/1e3/float64(b.N), "cpu-ms/batch")
}

// BenchmarkDecode16JPEG1920x1080 is the host's share of the GPU path: 16
// JPEG frames of 1920×1080 decoded in parallel (one goroutine a frame, up
// to GOMAXPROCS at once) into reused buffers.
func BenchmarkDecode16JPEG1920x1080(b *testing.B) {
	frames := benchFrames(b, 16, 1920, 1080)
	imgs := make([]Image, len(frames))
	run := func() {
		errs := make([]error, len(frames))
		parallel(len(frames), len(frames), func(_, lo, hi int) {
			for i := lo; i < hi; i++ {
				errs[i] = DecodeInto(&imgs[i], &frames[i])
			}
		})
		for i, err := range errs {
			if err != nil {
				b.Fatal(fmt.Errorf("frame %d: %w", i, err))
			}
		}
	}
	run()
	b.ResetTimer()
	cpu0 := processCPU()
	for b.Loop() {
		run()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1e3/float64(b.N), "ms/batch")
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/1e3/float64(b.N), "cpu-ms/batch")
}
