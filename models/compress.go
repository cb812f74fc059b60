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
	// MaxRatio: a unit (or share) whose compressed size is not below this
	// share of its raw bytes stays raw; 0 means 0.95 (residency.ZMaxRatio).
	MaxRatio float64
	// MinSaving is bf16z.Options.MinSaving: 0 codes the tensors that
	// save 5%; a negative value codes every bf16 tensor (tests on tiny
	// models, whose tensors are too small to pay).
	MinSaving float64
	// Progress, when set, receives a line every tenth of the bytes.
	Progress io.Writer
}

// Coding says what Compress codes of one streamed unit.
type Coding struct {
	Unit *Unit
	// Whole codes the unit's blob: its whole copies stream compressed
	// (Unit.Z).
	Whole bool
	// Shares are the cuts (the CPU's share of the split dimension) at
	// which the GPU's share (Unit.Share) is coded too (Unit.ZShares).
	Shares []int
	// KeepRaw keeps the raw blob after coding: the CPU reads it (a unit
	// the CPU shares).
	KeepRaw bool
}

// CompressedUnit is what Compress made of one unit.
type CompressedUnit struct {
	ID placement.ID
	// Raw is the blob's bytes, Stored all the unit keeps in host memory
	// after coding: ZBytes, or Raw, or both (KeepRaw), plus its shares.
	Raw, Stored int64
	// Coded says the whole blob is coded, in ZBytes.
	Coded  bool
	ZBytes int64
	// Shares are the coded shares' compressed sizes by cut, ShareRaw
	// their raw sizes.
	Shares, ShareRaw map[int]int64
	// Why says why the whole blob stayed raw.
	Why string `json:",omitempty"`
}

// CompressReport says what Compress did.
type CompressReport struct {
	Units []CompressedUnit
	// RawBytes sums the units' raw bytes, StoredBytes what they keep in
	// host memory after coding.
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

// Stored is each unit's compressed size where its whole blob was coded
// and its raw size where the coding did not pay, for the planner's exact
// re-plan (residency.Options.Stored).
func (r *CompressReport) Stored() map[placement.ID]int64 {
	out := map[placement.ID]int64{}
	for _, u := range r.Units {
		switch {
		case u.Coded:
			out[u.ID] = u.ZBytes
		case u.Why != "":
			out[u.ID] = u.Raw
		}
	}
	return out
}

// ShareRatios is each unit's coded shares' compressed-to-raw ratio
// (residency.Options.ShareRatio).
func (r *CompressReport) ShareRatios() map[placement.ID]float64 {
	out := map[placement.ID]float64{}
	for _, u := range r.Units {
		var z, raw int64
		for c, n := range u.Shares {
			z, raw = z+n, raw+u.ShareRaw[c]
		}
		if raw > 0 {
			out[u.ID] = float64(z) / float64(raw)
		}
	}
	return out
}

// Compress codes streamed units as codings say (bf16z.Encode, each unit's
// tiles on all workers): the whole blob (Unit.Z) where it pays, releasing
// the raw bytes unless KeepRaw; and the GPU's share at each cut
// (Unit.ZShares) where it pays. A blob whose coding would not pay (not
// below MaxRatio, or no tensor coded), or whose host bytes the model reads
// (a position table), stays raw. Units must not be pinned yet.
func Compress(codings []Coding, o CompressOptions) (*CompressReport, error) {
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
	// encode codes b; nil when it does not pay (its bytes released).
	encode := func(b *weights.Blob) (*bf16z.Unit, string, error) {
		z, err := bf16z.Encode(b, bf16z.Options{Workers: workers, Alloc: o.Alloc, MinSaving: o.MinSaving})
		if err != nil {
			return nil, "", err
		}
		why := ""
		switch {
		case !z.Coded():
			why = "no tensor codes"
		case z.Ratio() >= maxRatio:
			why = fmt.Sprintf("ratio %.3f", z.Ratio())
		}
		if why != "" {
			return nil, why, release(z.Data)
		}
		return z, "", nil
	}
	rep := &CompressReport{Workers: workers}
	var total int64
	for _, c := range codings {
		total += c.Unit.Blob.Size()
	}
	start, next := time.Now(), int64(0)
	for _, c := range codings {
		u := c.Unit
		switch {
		case u.Weights != placement.Streamed:
			return rep, fmt.Errorf("models: compressing %s, which is %s: only streamed units are", u.Name, u.Weights)
		case u.Z != nil || u.ZShares != nil:
			return rep, fmt.Errorf("models: unit %s compressed twice", u.Name)
		}
		raw := u.Blob.Size()
		cu := CompressedUnit{ID: u.ID, Raw: raw, Stored: raw}
		if u.hostRead {
			cu.Why = "the model reads its host bytes"
		} else {
			for _, cut := range c.Shares {
				entries, rects, n, err := u.Share(cut)
				if err != nil {
					return rep, fmt.Errorf("models: compressing %s's share at %d: %w", u.Name, cut, err)
				}
				sb, err := shareBlob(u, entries, rects, n)
				if err != nil {
					return rep, fmt.Errorf("models: compressing %s's share at %d: %w", u.Name, cut, err)
				}
				zs, _, err := encode(sb)
				if err != nil {
					return rep, fmt.Errorf("models: compressing %s's share at %d: %w", u.Name, cut, err)
				}
				if zs == nil {
					continue
				}
				if u.ZShares == nil {
					u.ZShares, cu.Shares, cu.ShareRaw = map[int]*bf16z.Unit{}, map[int]int64{}, map[int]int64{}
				}
				u.ZShares[cut], cu.Shares[cut], cu.ShareRaw[cut] = zs, zs.Size(), n
				cu.Stored += zs.Size()
			}
			if c.Whole {
				z, why, err := encode(u.Blob)
				if err != nil {
					return rep, fmt.Errorf("models: compressing %s: %w", u.Name, err)
				}
				cu.Why = why
				if z != nil {
					u.Z, cu.Coded, cu.ZBytes = z, true, z.Size()
					cu.Stored += z.Size()
					if !c.KeepRaw {
						cu.Stored -= raw
						err := release(u.Blob.Data)
						u.Blob.Data = nil // the layout stays: the slot holds it decoded
						if err != nil {
							return rep, fmt.Errorf("models: compressing %s: releasing its raw bytes: %w", u.Name, err)
						}
					}
				}
			}
		}
		rep.Units = append(rep.Units, cu)
		rep.RawBytes += cu.Raw
		rep.StoredBytes += cu.Stored
		if o.Progress != nil && (rep.RawBytes >= next || len(rep.Units) == len(codings)) {
			fmt.Fprintf(o.Progress, "vlanode: compressing %d streamed units: %.2f of %.2f GB raw → %.2f GB (%.3f), %.1f s\n",
				len(codings), float64(rep.RawBytes)/1e9, float64(total)/1e9, float64(rep.StoredBytes)/1e9, rep.Ratio(), time.Since(start).Seconds())
			next = rep.RawBytes + total/10
		}
	}
	rep.Seconds = time.Since(start).Seconds()
	return rep, nil
}

// shareBlob is the GPU's share of u as a blob of its own: the rectangles
// of u's blob laid out as they land in a slot (entries, n bytes), in Go
// heap memory (only its coding is kept).
func shareBlob(u *Unit, entries []weights.Entry, rects []weights.Rect, n int64) (*weights.Blob, error) {
	data, err := weights.AlignedAlloc(n)
	if err != nil {
		return nil, err
	}
	for _, r := range rects {
		for row := range r.Height {
			s, d := r.SrcOffset+row*r.SrcPitch, r.DstOffset+row*r.DstPitch
			copy(data[d:d+r.Width], u.Blob.Data[s:s+r.Width])
		}
	}
	return &weights.Blob{Name: u.Name, Data: data, Entries: entries}, nil
}
