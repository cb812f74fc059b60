package models

import (
	"fmt"
	"io"
	"runtime"
	"time"

	"vlanode/placement"
	"vlanode/weights"
	"vlanode/weights/bf16z"
)

// CompressOptions control Compress.
type CompressOptions struct {
	// Workers encode each unit's tiles in parallel; 0 means GOMAXPROCS.
	Workers int
	// Alloc allocates the compressed bytes (pinnable host memory, such as
	// cuda.HostAlloc); nil means the Go heap.
	Alloc weights.Allocator
	// Release frees bytes Alloc (or the loader's HostAlloc) returned: a
	// coded unit's raw blob, or compressed bytes that do not pay. Nil
	// leaves them to the garbage collector (Go heap memory).
	Release func([]byte) error
	// MaxRatio: a unit whose compressed size is not below this share of
	// its raw bytes stays raw; 0 means 0.95 (residency.ZMaxRatio).
	MaxRatio float64
	// MinSaving is bf16z.Options.MinSaving: 0 codes the tensors that
	// save 5%; a negative value codes every bf16 tensor (tests on tiny
	// models, whose tensors are too small to pay).
	MinSaving float64
	// Progress, when set, receives a line every tenth of the bytes.
	Progress io.Writer
}

// CompressedUnit is one unit Compress was asked to code.
type CompressedUnit struct {
	ID placement.ID
	// Raw is the blob's bytes, Stored what host memory keeps: the
	// compressed bytes when Coded, else Raw.
	Raw, Stored int64
	Coded       bool
	// Why says why a unit stayed raw.
	Why string `json:",omitempty"`
}

// CompressReport says what Compress did.
type CompressReport struct {
	Units []CompressedUnit
	// RawBytes and StoredBytes sum the units'.
	RawBytes, StoredBytes int64
	// Seconds is the wall time it took, Workers the goroutines it used.
	Seconds float64
	Workers int
}

// Ratio is StoredBytes / RawBytes (0 when nothing was asked).
func (r *CompressReport) Ratio() float64 {
	if r.RawBytes == 0 {
		return 0
	}
	return float64(r.StoredBytes) / float64(r.RawBytes)
}

// Stored is each unit's stored size, for the planner's exact re-plan
// (residency.Options.Stored).
func (r *CompressReport) Stored() map[placement.ID]int64 {
	out := map[placement.ID]int64{}
	for _, u := range r.Units {
		out[u.ID] = u.Stored
	}
	return out
}

// Compress codes the blobs of the streamed units (bf16z.Encode, each
// unit's tiles on all workers) and sets each unit's Z where it pays,
// releasing the raw bytes; a unit whose coding would not pay (below
// MaxRatio, or no tensor coded), or whose host bytes the model reads (a
// position table), stays raw. Units must not be pinned yet.
func Compress(units []*Unit, o CompressOptions) (*CompressReport, error) {
	workers := o.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	maxRatio := o.MaxRatio
	if maxRatio == 0 {
		maxRatio = 0.95
	}
	release := func(b []byte) error {
		if o.Release == nil || len(b) == 0 {
			return nil
		}
		return o.Release(b)
	}
	rep := &CompressReport{Workers: workers}
	var total int64
	for _, u := range units {
		total += u.Blob.Size()
	}
	start, next := time.Now(), int64(0)
	for _, u := range units {
		switch {
		case u.Weights != placement.Streamed:
			return rep, fmt.Errorf("models: compressing %s, which is %s: only streamed units are", u.Name, u.Weights)
		case u.Z != nil:
			return rep, fmt.Errorf("models: unit %s compressed twice", u.Name)
		}
		raw := u.Blob.Size()
		cu := CompressedUnit{ID: u.ID, Raw: raw, Stored: raw}
		if u.hostRead {
			cu.Why = "the model reads its host bytes"
		} else {
			z, err := bf16z.Encode(u.Blob, bf16z.Options{Workers: workers, Alloc: o.Alloc, MinSaving: o.MinSaving})
			if err != nil {
				return rep, fmt.Errorf("models: compressing %s: %w", u.Name, err)
			}
			switch {
			case !z.Coded():
				cu.Why = "no tensor codes"
			case z.Ratio() >= maxRatio:
				cu.Why = fmt.Sprintf("ratio %.3f", z.Ratio())
			}
			if cu.Why != "" {
				if err := release(z.Data); err != nil {
					return rep, fmt.Errorf("models: compressing %s: %w", u.Name, err)
				}
			} else {
				err := release(u.Blob.Data)
				u.Blob.Data = nil // the layout stays: the slot holds it decoded
				u.Z = z
				cu.Coded, cu.Stored = true, z.Size()
				if err != nil {
					return rep, fmt.Errorf("models: compressing %s: releasing its raw bytes: %w", u.Name, err)
				}
			}
		}
		rep.Units = append(rep.Units, cu)
		rep.RawBytes += cu.Raw
		rep.StoredBytes += cu.Stored
		if o.Progress != nil && (rep.RawBytes >= next || len(rep.Units) == len(units)) {
			fmt.Fprintf(o.Progress, "vlanode: compressing %d streamed units: %.2f of %.2f GB raw → %.2f GB (%.3f), %.1f s\n",
				len(units), float64(rep.RawBytes)/1e9, float64(total)/1e9, float64(rep.StoredBytes)/1e9, rep.Ratio(), time.Since(start).Seconds())
			next = rep.RawBytes + total/10
		}
	}
	rep.Seconds = time.Since(start).Seconds()
	return rep, nil
}
