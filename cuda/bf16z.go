package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

	"vlanode/cuda/driver"
	"vlanode/weights/bf16z"
)

// PurposeCodec is the device memory of ZDecoders' status words.
const PurposeCodec = "codec"

// ZKernel picks the kernel that decodes compressed units.
type ZKernel int

const (
	// ZWarp is vla_z_decode: a block of 8 warps a tile, a warp a
	// warp-stream, the decoding table in shared memory.
	ZWarp ZKernel = iota
	// ZSerial is vla_z_decode_serial: a warp a tile, a thread decoding a
	// warp-stream's 32 lanes in turn as the Go decoder does, the table
	// read from global memory. Slower; it checks or stands in for ZWarp.
	ZSerial
)

// String names the kernel: warp, serial.
func (k ZKernel) String() string {
	switch k {
	case ZWarp:
		return "warp"
	case ZSerial:
		return "serial"
	}
	return fmt.Sprintf("ZKernel(%d)", int(k))
}

// zThreads is the block size of each kernel (VLA_Z_THREADS, a warp).
var zThreads = [...]uint32{ZWarp: 256, ZSerial: 32}

// ZDecode is one decode launch: the tiles its jobs name, from compressed
// bytes in device memory (where the copy engine put a bf16z.Unit's Data)
// into a destination such as a DFB slot.
type ZDecode struct {
	// Src and SrcBytes are the compressed bytes (16-byte aligned).
	Src      driver.DevicePtr
	SrcBytes int64
	// Jobs is the job table (8-byte aligned), NumJobs jobs: Src +
	// Unit.JobsOffset decodes the whole unit into a slot of Unit.RawSize
	// bytes; a table from bf16z.MarshalJobs, uploaded, decodes a plan.
	Jobs    driver.DevicePtr
	NumJobs int
	// Dst and DstBytes are the destination (16-byte aligned).
	Dst      driver.DevicePtr
	DstBytes int64
	Kernel   ZKernel
	// Base is added to a failing job's index in the status word, so that
	// the launches of one pass report distinct indices: the count of the
	// jobs launched before it in the pass, say.
	Base int
}

// UnitDecode is the launch that decodes all of u, whose Data lies at src,
// into the slot at dst (of at least u.RawSize bytes).
func UnitDecode(u *bf16z.Unit, src, dst driver.DevicePtr, dstBytes int64, k ZKernel) ZDecode {
	return ZDecode{
		Src: src, SrcBytes: u.Size(), Jobs: src + driver.DevicePtr(u.JobsOffset), NumJobs: len(u.Jobs),
		Dst: dst, DstBytes: dstBytes, Kernel: k,
	}
}

// Codes of ZStatus.Codes (VLA_Z_ERR_* in kernels/bf16z.cu).
const (
	// ZErrJob: a job reaches outside the compressed bytes or the
	// destination, or is malformed; nothing of it was decoded.
	ZErrJob = 1
	// ZErrStream: a warp-stream does not decode (bad offsets, a read past
	// its words, no codeword, words left over).
	ZErrStream = 2
	// ZErrSum: a tile's checksum differs from its job's.
	ZErrSum = 4
)

// ZStatus is what the decodes since the last Reset reported.
type ZStatus struct {
	Failed int // jobs that failed
	// FirstJob is the lowest index (ZDecode.Base plus its index in its
	// launch's job table) of a job that failed; -1 when none did.
	FirstJob int
	Codes    uint32 // the ZErr* codes of every failure, or-ed
}

// Err is nil when no job failed, else an error that wraps
// bf16z.ErrCorrupt and names the first failed job with name (such as
// Unit.JobName; nil: its index).
func (s ZStatus) Err(name func(job int) string) error {
	if s.Failed == 0 {
		return nil
	}
	where := fmt.Sprintf("job %d", s.FirstJob)
	if name != nil {
		where = name(s.FirstJob)
	}
	var why []string
	for _, c := range []struct {
		bit  uint32
		what string
	}{{ZErrJob, "outside its bytes or destination"}, {ZErrStream, "a warp-stream that does not decode"}, {ZErrSum, "checksum mismatch"}} {
		if s.Codes&c.bit != 0 {
			why = append(why, c.what)
		}
	}
	return fmt.Errorf("cuda: bf16z decode: %d jobs failed (%s), the first %s: %w", s.Failed, strings.Join(why, "; "), where, bf16z.ErrCorrupt)
}

// ZDecoder launches decodes and owns the device status word they report
// failures to. Like the Backend it serves one goroutine at a time. Close
// MUST be called before the Backend's Close.
type ZDecoder struct {
	b      *Backend
	status *block // u32[4]: failed jobs, ^lowest failed index, codes, unused
}

// zStatusBytes is the size of the status word.
const zStatusBytes = 16

// NewZDecoder allocates a status word (under PurposeCodec) and clears it.
func (b *Backend) NewZDecoder() (*ZDecoder, error) {
	z := &ZDecoder{b: b}
	err := b.run(func(g *gpu) error {
		if err := g.inCapture("bf16z decoder"); err != nil {
			return err
		}
		blk, err := g.mem.alloc(PurposeCodec, zStatusBytes)
		if err != nil {
			return err
		}
		z.status = blk
		if err := g.drv.MemsetD8Async(blk.ptr, 0, zStatusBytes, g.stream); err != nil {
			return errors.Join(fmt.Errorf("cuda: bf16z decoder: %w", err), g.mem.free(blk))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return z, nil
}

// streamOr resolves s: 0 is the Backend's stream.
func (g *gpu) streamOr(s driver.Stream) driver.Stream {
	if s == 0 {
		return g.stream
	}
	return s
}

// Decode queues d on stream s (0: the Backend's stream). s must already
// wait for whatever wrote the compressed bytes (the copy's event) and for
// the last reader of the destination; the decode's failures reach the
// status word (Status). Jobs must lie where d says: their table is read
// by the kernel, not checked here.
func (z *ZDecoder) Decode(s driver.Stream, d ZDecode) error {
	switch {
	case z.status == nil:
		return fmt.Errorf("cuda: bf16z decode: the decoder is closed")
	case d.Kernel != ZWarp && d.Kernel != ZSerial:
		return fmt.Errorf("cuda: bf16z decode: no kernel %v", d.Kernel)
	case d.NumJobs < 0 || d.NumJobs > math.MaxInt32:
		return fmt.Errorf("cuda: bf16z decode: %d jobs", d.NumJobs)
	case d.Base < 0 || int64(d.Base)+int64(d.NumJobs) > math.MaxUint32:
		return fmt.Errorf("cuda: bf16z decode: jobs numbered from %d", d.Base)
	case d.SrcBytes < 0 || d.DstBytes < 0:
		return fmt.Errorf("cuda: bf16z decode: %d compressed bytes into %d", d.SrcBytes, d.DstBytes)
	case d.Src%16 != 0 || d.Dst%16 != 0 || d.Jobs%8 != 0:
		return fmt.Errorf("cuda: bf16z decode: compressed bytes at %#x, destination at %#x (16-byte aligned), jobs at %#x (8)", d.Src, d.Dst, d.Jobs)
	case d.NumJobs == 0:
		return nil
	}
	f := func(g *gpu) driver.Function { return g.k.zDecode }
	if d.Kernel == ZSerial {
		f = func(g *gpu) driver.Function { return g.k.zDecodeSerial }
	}
	return z.b.run(func(g *gpu) error {
		g.args.Reset()
		g.args.Ptr(d.Src).U64(uint64(d.SrcBytes)).Ptr(d.Jobs).Ptr(d.Dst).U64(uint64(d.DstBytes)).Ptr(z.status.ptr).U32(uint32(d.Base))
		grid, block := driver.Dim3{uint32(d.NumJobs), 1, 1}, block1D(int(zThreads[d.Kernel]))
		var err error
		if g.pdl {
			err = g.drv.LaunchPDL(f(g), grid, block, 0, g.streamOr(s), g.args)
		} else {
			err = g.drv.Launch(f(g), grid, block, 0, g.streamOr(s), g.args)
		}
		if err != nil {
			return fmt.Errorf("cuda: bf16z decode (%v kernel, %d jobs): %w", d.Kernel, d.NumJobs, err)
		}
		return nil
	})
}

// Status waits for stream s (0: the Backend's stream) and reads the status
// word: what every decode queued on it, or finished before it, reported
// since the last Reset. The executor reads it after each pass.
func (z *ZDecoder) Status(s driver.Stream) (ZStatus, error) {
	if z.status == nil {
		return ZStatus{}, fmt.Errorf("cuda: bf16z status: the decoder is closed")
	}
	var buf [zStatusBytes]byte
	err := z.b.run(func(g *gpu) error {
		if err := g.inCapture("bf16z status"); err != nil {
			return err
		}
		if err := g.drv.CopyDtoH(buf[:], z.status.ptr, g.streamOr(s)); err != nil {
			return fmt.Errorf("cuda: bf16z status: %w", err)
		}
		return nil
	})
	if err != nil {
		return ZStatus{}, err
	}
	le := binary.LittleEndian
	st := ZStatus{Failed: int(le.Uint32(buf[0:])), FirstJob: -1, Codes: le.Uint32(buf[8:])}
	if st.Failed > 0 {
		st.FirstJob = int(^le.Uint32(buf[4:]))
	}
	return st, nil
}

// Reset queues the clearing of the status word on stream s (0: the
// Backend's stream).
func (z *ZDecoder) Reset(s driver.Stream) error {
	if z.status == nil {
		return fmt.Errorf("cuda: bf16z reset: the decoder is closed")
	}
	return z.b.run(func(g *gpu) error {
		if err := g.drv.MemsetD8Async(z.status.ptr, 0, zStatusBytes, g.streamOr(s)); err != nil {
			return fmt.Errorf("cuda: bf16z reset: %w", err)
		}
		return nil
	})
}

// Close frees the status word. The caller must have synchronized the
// streams it decoded on. Closing twice is harmless.
func (z *ZDecoder) Close() error {
	if z.status == nil {
		return nil
	}
	blk := z.status
	z.status = nil
	return z.b.run(func(g *gpu) error { return g.mem.freeNow(blk) }) // other streams wrote it: not for the Backend's stream's reuse
}
