package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"time"

	"vlanode/cuda"
	"vlanode/residency"
	"vlanode/tensor"
	"vlanode/weights"
	"vlanode/weights/bf16z"
)

// decodeUnits are the two units the decode rate is fitted from: a VLM
// MLP's shape (gate, up [12288, 4096], down [4096, 12288]: 302 MB) and a
// third of it (4096-wide: 101 MB), bf16 weights from N(0, 0.02²) like
// synth's.
var decodeUnits = []struct {
	name          string
	inter, hidden int
}{{"vlm-mlp", 12288, 4096}, {"third", 4096, 4096}}

// decodeRuns is the timed decodes of each unit (the median is kept),
// after two warm-ups.
const decodeRuns = 10

// measureDecode fits the decode kernel's rate (residency.DecodeProfile):
// each unit is encoded as the loader does (bf16z, every core), copied once
// into a staging buffer, and decoded into a slot decodeRuns times on a
// stream of its own with events around each decode (the warp kernel, as
// the executor runs it); the line through the two medians gives the rate
// and the fixed cost per decode.
func measureDecode(p *residency.Profile, log io.Writer) error {
	be, err := cuda.New()
	if err != nil {
		return err
	}
	defer be.Close()
	type point struct{ raw, ms float64 }
	var pts []point
	for _, du := range decodeUnits {
		blob, err := mlpBlob(du.name, du.inter, du.hidden)
		if err != nil {
			return err
		}
		z, err := bf16z.Encode(blob, bf16z.Options{Workers: runtime.GOMAXPROCS(0), Alloc: cuda.HostAlloc})
		if err != nil {
			return err
		}
		ms, err := timeDecode(be, z)
		err = errors.Join(err, cuda.HostFree(z.Data))
		if err != nil {
			return fmt.Errorf("decoding %s: %w", du.name, err)
		}
		fmt.Fprintf(log, "vlanode profile: decode of %s: %.1f MB (%.4f compressed) in %.3f ms, %.0f GB/s of output\n",
			du.name, float64(z.RawSize)/1e6, z.Ratio(), ms, float64(z.RawSize)/ms/1e6)
		pts = append(pts, point{float64(z.RawSize), ms})
	}
	big, small := pts[0], pts[1]
	slope := (big.ms - small.ms) / (big.raw - small.raw) // ms per byte
	if !(slope > 0) {
		return fmt.Errorf("profile: decodes of %.0f and %.0f bytes took %.3f and %.3f ms: no rate to fit", big.raw, small.raw, big.ms, small.ms)
	}
	p.Decode = &residency.DecodeProfile{
		Source: fmt.Sprintf("vlanode profile, %s: bf16z decodes (warp kernel) of a VLM MLP's shape (%.1f MB) and a third of it (%.1f MB), "+
			"N(0, 0.02²) bf16 weights, median of %d each timed with events on a stream of its own; the line through the two medians",
			time.Now().UTC().Format("2006-01-02"), big.raw/1e6, small.raw/1e6, decodeRuns),
		GBps:     math.Round(1/slope/1e6*10) / 10,
		LaunchMs: round3(max(small.ms-small.raw*slope, 0)),
	}
	return nil
}

// mlpBlob is a blob of an MLP's three bf16 matrices.
func mlpBlob(name string, inter, hidden int) (*weights.Blob, error) {
	specs := []weights.Spec{
		{Name: "mlp.gate_proj.weight", DType: tensor.BF16, Shape: []int{inter, hidden}},
		{Name: "mlp.up_proj.weight", DType: tensor.BF16, Shape: []int{inter, hidden}},
		{Name: "mlp.down_proj.weight", DType: tensor.BF16, Shape: []int{hidden, inter}},
	}
	entries, size := weights.Layout(specs)
	data, err := weights.AlignedAlloc(size)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, e := range entries {
		for o := e.Offset; o < e.Offset+e.Size; o += 2 {
			binary.LittleEndian.PutUint16(data[o:], tensor.F32ToBF16(float32(0.02*rng.NormFloat64())))
		}
	}
	return &weights.Blob{Name: name, Data: data, Entries: entries}, nil
}

// timeDecode copies z into a staging buffer once and times decodeRuns
// decodes of it into a slot, returning the median in ms; any decode
// failure is an error.
func timeDecode(be *cuda.Backend, z *bf16z.Unit) (float64, error) {
	dev := be.NewDFBDevice()
	ms, err := func() (float64, error) {
		align := func(n int64) int64 { return (n + weights.Align - 1) / weights.Align * weights.Align }
		staging, err := dev.AllocStaging(align(z.Size()))
		if err != nil {
			return 0, err
		}
		slot, err := dev.AllocSlot(align(z.RawSize))
		if err != nil {
			return 0, err
		}
		blob := &weights.Blob{Name: z.Name, Data: z.Data}
		if err := dev.PinHost(blob); err != nil {
			return 0, err
		}
		s, err := dev.NewStream("decode")
		if err != nil {
			return 0, err
		}
		if err := dev.CopyAsync(staging, blob, s); err != nil {
			return 0, err
		}
		ms, err := medianOnStream(dev, s, decodeRuns, func() error { return dev.Decode(slot, 0, staging, z, 0, s) })
		if err != nil {
			return 0, err
		}
		st, err := dev.DecodeStatus(s)
		if err != nil {
			return 0, err
		}
		if st.Failed > 0 {
			return 0, fmt.Errorf("%d jobs failed (%s), the first %s: %w", st.Failed, st.Why, z.JobName(st.FirstJob), bf16z.ErrCorrupt)
		}
		return ms, nil
	}()
	return ms, errors.Join(err, dev.Close())
}
