package cuda

import (
	"errors"
	"fmt"
	"strings"

	"vlanode/cuda/driver"
	"vlanode/layering"
	"vlanode/weights/bf16z"
)

// The DFBDevice as a layering.Decoder: compressed streaming. Staging
// buffers come from the budget under layering.StagingPurpose; the copy
// engine moves a unit's bf16z bytes into one (CopyAsync, as any blob);
// the warp kernel (ZDecoder, ZWarp) decodes it on the executor's decode
// stream into the slot or home; failures reach the decoder's status word,
// read by DecodeStatus when the executor's run ends.

var _ layering.Decoder = (*DFBDevice)(nil)

// AllocStaging allocates a staging buffer from the budget under
// layering.StagingPurpose (16-byte aligned at least, as the kernel needs)
// and, with the first, the decoder and its status word.
func (d *DFBDevice) AllocStaging(bytes int64) (layering.Slot, error) {
	if bytes <= 0 {
		return layering.NoSlot, fmt.Errorf("cuda: dfb: staging of %d bytes", bytes)
	}
	if d.z == nil {
		z, err := d.b.NewZDecoder()
		if err != nil {
			return layering.NoSlot, fmt.Errorf("cuda: dfb: staging: %w", err)
		}
		d.z = z
	}
	return d.allocSlot("dfb staging", layering.StagingPurpose, bytes)
}

// Decode queues the decode of z, whose Data the copy engine put at the
// start of staging buffer src, into slot (or arena) dst from off on, on
// stream s: cuda.UnitDecode with the warp kernel, the job table read from
// the staged bytes. base numbers its jobs in the status word.
func (d *DFBDevice) Decode(dst layering.Slot, off int64, src layering.Slot, z *bf16z.Unit, base int, s layering.Stream) error {
	if d.z == nil {
		return errors.New("cuda: dfb: decode without a staging buffer")
	}
	var (
		dec ZDecode
		st  driver.Stream
	)
	err := d.run("dfb decode", func(g *gpu) error {
		out, err := d.slot(dst)
		if err != nil {
			return err
		}
		in, err := d.slot(src)
		if err != nil {
			return err
		}
		switch {
		case off < 0 || off%16 != 0 || off+z.RawSize > out.bytes:
			return fmt.Errorf("cuda: dfb: unit %s decodes %d bytes at %d of slot %d (%d bytes)", z.Name, z.RawSize, off, dst, out.bytes)
		case z.Size() > in.bytes:
			return fmt.Errorf("cuda: dfb: unit %s has %d compressed bytes, staging %d holds %d", z.Name, z.Size(), src, in.bytes)
		}
		if st, err = d.stream(g, s); err != nil {
			return err
		}
		dec = UnitDecode(z, in.ptr, out.ptr+driver.DevicePtr(off), out.bytes-off, ZWarp)
		dec.Base = base
		return nil
	})
	if err != nil {
		return err
	}
	if err := d.z.Decode(st, dec); err != nil {
		return fmt.Errorf("cuda: dfb: unit %s: %w", z.Name, err)
	}
	return nil
}

// DecodeStatus waits for stream s and reads (then clears) the status
// word: the jobs that failed since the last read.
func (d *DFBDevice) DecodeStatus(s layering.Stream) (layering.DecodeStatus, error) {
	if d.z == nil {
		return layering.DecodeStatus{FirstJob: -1}, nil
	}
	var st driver.Stream
	if err := d.run("dfb decode status", func(g *gpu) (err error) {
		st, err = d.stream(g, s)
		return err
	}); err != nil {
		return layering.DecodeStatus{}, err
	}
	zs, err := d.z.Status(st)
	if err != nil {
		return layering.DecodeStatus{}, err
	}
	if err := d.z.Reset(st); err != nil {
		return layering.DecodeStatus{}, err
	}
	out := layering.DecodeStatus{Failed: zs.Failed, FirstJob: zs.FirstJob}
	var why []string
	for _, c := range []struct {
		bit  uint32
		what string
	}{{ZErrJob, "a job outside its bytes or destination"}, {ZErrStream, "a warp-stream that does not decode"}, {ZErrSum, "a checksum mismatch"}} {
		if zs.Codes&c.bit != 0 {
			why = append(why, c.what)
		}
	}
	out.Why = strings.Join(why, "; ")
	return out, nil
}
