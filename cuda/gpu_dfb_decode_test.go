package cuda

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"vlanode/cuda/driver"
	"vlanode/layering"
	"vlanode/placement"
	"vlanode/weights"
	"vlanode/weights/bf16z"
)

// The DFBDevice as a layering.Decoder: compressed streaming through the
// executor on the GPU. Run on the GPU machine:
//
//	cuda.test -test.run 'GPUDFBDecode|GPUExecutorCompressed' -test.v

// zSlotBytes downloads n bytes of slot s from off on.
func zSlotBytes(t testing.TB, be *Backend, d *DFBDevice, s layering.Slot, off, n int64) []byte {
	t.Helper()
	p, err := d.SlotPtr(s)
	if err != nil {
		t.Fatal(err)
	}
	return zDownload(t, be, p+driver.DevicePtr(off), n)
}

// zCheckRaw compares every tensor of the slot's bytes with the raw blob's.
func zCheckRaw(t testing.TB, name string, entries []weights.Entry, got, raw []byte) {
	t.Helper()
	for _, e := range entries {
		if !bytes.Equal(got[e.Offset:e.Offset+e.Size], raw[e.Offset:e.Offset+e.Size]) {
			t.Fatalf("%s: tensor %q in the slot differs from the raw blob", name, e.Name)
		}
	}
}

// TestGPUDFBDecode decodes units through the DFBDevice's Decoder calls as
// the executor makes them (a copy of the compressed bytes into a staging
// buffer on a copy stream, an event, the decode on a stream of its own
// into a slot at an arena's offset) and checks every tensor in the slot
// against the raw blob: the ordinary and adversarial units of the codec's
// GPU tests and a VLM and an expert layer of synth Alpamayo-R1-10B; then
// that a corrupted payload is reported by DecodeStatus, naming its job.
func TestGPUDFBDecode(t *testing.T) {
	be := gpuBackend(t)
	type unit struct {
		name string
		blob *weights.Blob
		z    *bf16z.Unit
	}
	var units []unit
	for _, c := range zCases() {
		b := zBlob(t, 11, c.specs)
		units = append(units, unit{c.name, b, zEncode(t, b, c.minSaving, c.tileCols)})
	}
	for _, prefix := range []string{"vlm.model.language_model.layers.0.", "expert.layers.0."} {
		b := zLayer(t, prefix)
		units = append(units, unit{prefix, b, zEncode(t, b, 0, 0)})
	}
	for _, u := range units {
		t.Run(u.name, func(t *testing.T) {
			d := be.NewDFBDevice()
			defer func() {
				if err := d.Close(); err != nil {
					t.Error(err)
				}
			}()
			const off = 4 * weights.Align // a home at an arena's offset
			align := func(n int64) int64 { return (n + weights.Align - 1) / weights.Align * weights.Align }
			slot, err := d.AllocSlot(off + align(u.z.RawSize))
			must(t, err)
			staging, err := d.AllocStaging(align(max(u.z.Size(), 1)))
			must(t, err)
			host, err := HostAlloc(u.z.Size())
			must(t, err)
			defer func() { must(t, HostFree(host)) }()
			copy(host, u.z.Data)
			zb := &weights.Blob{Name: u.name, Data: host}
			must(t, d.PinHost(zb))
			cp, err := d.NewStream("copy")
			must(t, err)
			dec, err := d.NewStream("decode")
			must(t, err)
			copied, err := d.NewEvent("copied")
			must(t, err)
			run := func() layering.DecodeStatus {
				must(t, d.CopyAsync(staging, zb, cp))
				must(t, d.Record(copied, cp))
				must(t, d.Wait(dec, copied))
				must(t, d.Decode(slot, off, staging, u.z, 7, dec))
				st, err := d.DecodeStatus(dec)
				must(t, err)
				return st
			}
			if st := run(); st.Failed != 0 {
				t.Fatalf("%d jobs failed (%s), the first %s", st.Failed, st.Why, u.z.JobName(st.FirstJob-7))
			}
			zCheckRaw(t, u.name, u.blob.Entries, zSlotBytes(t, be, d, slot, off, u.z.RawSize), u.blob.Data)
			if len(u.z.Jobs) == 0 {
				return
			}
			// A payload byte of a coded tile, or a raw tile's, flipped in
			// pinned memory: the status names that job.
			k := len(u.z.Jobs) / 2
			j := u.z.Jobs[k]
			host[j.Src+j.Bytes/2] ^= 0x20
			st := run()
			if st.Failed == 0 {
				t.Fatalf("a corrupted payload decoded without a failure")
			}
			if st.FirstJob-7 != k {
				t.Errorf("the first failing job is %s, want %s", u.z.JobName(st.FirstJob-7), u.z.JobName(k))
			}
		})
	}
}

// TestGPUExecutorCompressed runs the executor on the GPU with compressed
// and raw streamed units (a VLM layer's parts and an expert layer's of
// synth Alpamayo-R1-10B, some resident), pipelined and sequential, three
// passes, and checks at every compute that its slot holds the raw blob's
// bytes for every tensor; a unit corrupted in pinned memory then fails the
// run with an error that names it and wraps bf16z.ErrCorrupt.
func TestGPUExecutorCompressed(t *testing.T) {
	be := gpuBackend(t)
	vlm, expert := zLayer(t, "vlm.model.language_model.layers.0."), zLayer(t, "expert.layers.0.")
	for _, mode := range []layering.Mode{layering.Pipelined, layering.Sequential} {
		t.Run(mode.String(), func(t *testing.T) {
			d := be.NewDFBDevice()
			var hosts [][]byte
			defer func() {
				if err := d.Close(); err != nil {
					t.Error(err)
				}
				for _, h := range hosts {
					must(t, HostFree(h))
				}
			}()
			pinned := func(b []byte) []byte {
				h, err := HostAlloc(int64(len(b)))
				must(t, err)
				copy(h, b)
				hosts = append(hosts, h)
				return h
			}
			raw := map[*layering.Unit][]byte{}
			var units []*layering.Unit
			for i, src := range []*weights.Blob{vlm, expert, vlm, expert, expert} {
				u := &layering.Unit{ID: placement.ID{Module: "test", Index: i}, Weights: placement.Streamed,
					Blob: &weights.Blob{Name: fmt.Sprint(i), Data: pinned(src.Data), Entries: src.Entries}}
				if i != 3 { // unit 3 streams raw
					z, err := bf16z.Encode(u.Blob, bf16z.Options{Alloc: HostAlloc})
					must(t, err)
					hosts = append(hosts, z.Data)
					u.Z = z
				}
				raw[u] = src.Data
				units = append(units, u)
			}
			checked := 0
			for _, u := range units {
				u.Run = func(sh layering.Shard) error {
					got := zSlotBytes(t, be, d, sh.Slot, sh.Offset, u.Blob.Entries[len(u.Blob.Entries)-1].Offset+u.Blob.Entries[len(u.Blob.Entries)-1].Size)
					for _, e := range u.Blob.Entries {
						if !bytes.Equal(got[e.Offset:e.Offset+e.Size], raw[u][e.Offset:e.Offset+e.Size]) {
							return fmt.Errorf("unit %s: tensor %q in slot %d differs from the raw blob", u.ID, e.Name, sh.Slot)
						}
					}
					checked++
					return nil
				}
			}
			e, err := layering.New(d, layering.Config{Mode: mode, Profile: true}, units)
			must(t, err)
			defer e.Close()
			p, err := e.Run(layering.Repeat("step", units, 3))
			must(t, err)
			if checked != 15 {
				t.Fatalf("%d computes checked, want 15", checked)
			}
			decoded := 0
			for _, tr := range p.Turns {
				if tr.Compressed {
					decoded++
					if tr.DecodeMs <= 0 {
						t.Errorf("turn of %s in %s: decode of %.3f ms", tr.Unit, tr.Pass, tr.DecodeMs)
					}
				}
			}
			if decoded != 12 {
				t.Fatalf("%d decoded turns, want 12", decoded)
			}
			// Corrupt unit 2's compressed bytes: the run fails, naming it.
			z := units[2].Z
			j := z.Jobs[len(z.Jobs)/3]
			z.Data[j.Src+j.Bytes/2] ^= 0x10
			for _, u := range units {
				u.Run = nil
			}
			_, err = e.Run(layering.Repeat("step", units, 1))
			if err == nil || !errors.Is(err, bf16z.ErrCorrupt) {
				t.Fatalf("a corrupted unit ran: %v", err)
			}
			if want := "unit test.2"; !bytes.Contains([]byte(err.Error()), []byte(want)) {
				t.Fatalf("the error does not name the unit (%q): %v", want, err)
			}
			z.Data[j.Src+j.Bytes/2] ^= 0x10
			_, err = e.Run(layering.Repeat("step", units, 1))
			must(t, err)
		})
	}
}

// must fails the test on an error.
func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
