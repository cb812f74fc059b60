package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"vlanode/tensor"
	"vlanode/weights/bf16z"
)

// TestZKernelsOnCPU runs kernels/bf16z.cu, compiled by g++ with a shim of
// the CUDA intrinsics it uses (testdata/zemu), on the CPU: the GPU tests'
// decodes, plans and corruptions, checked against the Go decoder the same
// way. It needs no GPU, so CI checks the kernels' logic; the GPU tests
// check them on the hardware.
func TestZKernelsOnCPU(t *testing.T) {
	gxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skipf("SKIPPED: no g++ to build the CPU emulation of the bf16z kernels: %v", err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "zemu")
	args := []string{"-std=c++20", "-O2", "-Wall", "-Wextra", "-Wno-unknown-pragmas", "-Wno-unused-function"}
	if san := os.Getenv("ZEMU_SANITIZE"); san != "" { // e.g. undefined: the kernels' C++ under a sanitizer
		args = append(args, "-fsanitize="+san, "-fno-sanitize-recover=all", "-g")
	}
	out, err := exec.Command(gxx, append(args, "-o", bin, "testdata/zemu/zemu.cpp")...).CombinedOutput()
	if err != nil {
		t.Fatalf("g++: %v\n%s", err, out)
	}
	if len(out) > 0 {
		t.Logf("g++ warnings:\n%s", out)
	}
	run := emuRunner(bin, dir)
	t.Run("decode", func(t *testing.T) { zTestDecode(t, run, zAllCases()) })
	t.Run("plan", func(t *testing.T) { zTestPlan(t, run) })
	t.Run("corrupt", func(t *testing.T) { zTestCorrupt(t, run) })
	t.Run("hostile", func(t *testing.T) { zTestHostile(t, run) })
}

// zTestHostile decodes hostile units: job fields, stream offsets,
// payload and table bytes and the compressed size changed at random. The
// kernels must neither crash nor touch memory outside the buffers (which
// the emulator allocates at their exact sizes: run with
// ZEMU_SANITIZE=address for the sanitizer to check it), and must report
// any job whose output could be wrong.
func zTestHostile(t *testing.T, run zRunner) {
	b := zBlob(t, 11, []zSpec{
		{"w", tensor.BF16, []int{3, 9000}, zNormal(0.05)}, // a coded tile of 4 warp-streams
		{"v", tensor.BF16, []int{100}, zNormal(1)},        // raw
	})
	u := zEncode(t, b, 0, 0)
	if !u.Tensors[0].Coded || u.Tensors[1].Coded {
		t.Fatalf("want w coded and v raw: %+v", u.Tensors)
	}
	r := rand.New(rand.NewPCG(5, 5))
	values := func(valid int64) uint64 { // near a valid value, or anywhere
		switch r.IntN(5) {
		case 0:
			return r.Uint64()
		case 1:
			return uint64(r.Uint32())
		case 2:
			return uint64(valid) + uint64(r.IntN(5)) - 2
		default:
			return uint64(r.Int64N(2*max(valid, 1) + 64))
		}
	}
	for trial := 0; trial < 32; trial++ {
		d := append([]byte(nil), u.Data...)
		srcBytes := int64(len(d))
		for c := 0; c < 1+r.IntN(3); c++ {
			ji := r.IntN(len(u.Jobs))
			j, at := u.Jobs[ji], u.JobsOffset+int64(ji*bf16z.JobBytes)
			le := binary.LittleEndian
			switch r.IntN(8) {
			case 0: // a job field
				f := r.IntN(9)
				valid := []int64{j.Src, j.Dst, j.LUT, int64(j.Rows), int64(j.Cols), j.Pitch, int64(j.Kind), int64(j.Sum), j.Bytes}[f]
				if f < 3 {
					le.PutUint64(d[at+int64(8*f):], values(valid))
				} else {
					le.PutUint32(d[at+24+int64(4*(f-3)):], uint32(values(valid)))
				}
			case 1: // a stream offset of the coded tile
				if j.Kind == bf16z.KindCoded {
					le.PutUint32(d[j.Src+int64(4*r.IntN(5)):], uint32(values(int64(le.Uint32(d[j.Src+4:])))))
				}
			case 2: // the compressed size
				srcBytes = r.Int64N(srcBytes + 1)
			default: // payload or table bytes
				for k := 0; k < 1+r.IntN(20); k++ {
					d[u.JobsOffset+r.Int64N(int64(len(d))-u.JobsOffset)] ^= byte(1 + r.IntN(255))
				}
			}
		}
		// The Go decoder, over the same bytes and jobs: the jobs it
		// refuses are the jobs the kernels must report.
		v := *u
		v.Data = d[:srcBytes]
		jobs := make([]bf16z.Job, len(u.Jobs))
		for i := range jobs {
			jobs[i] = zJob(d[u.JobsOffset+int64(i*bf16z.JobBytes):])
		}
		out := make([]byte, u.RawSize)
		failed, first := 0, -1
		var goErr error
		for i, j := range jobs {
			if err := v.DecodeJobs(out, []bf16z.Job{j}, 1); err != nil {
				failed++
				if first < 0 {
					first, goErr = i, err
				}
			}
		}
		for _, k := range zKernels {
			l := unitLaunch(u, d, k)
			l.srcBytes = srcBytes
			_, st := run(t, l)
			if st.Failed != failed || st.FirstJob != first {
				t.Fatalf("trial %d, %v kernel: status %+v; the Go decoder fails %d jobs from %d (%v)", trial, k, st, failed, first, goErr)
			}
		}
	}
}

// emuRunner runs launches with the emulator bin, its files in dir.
func emuRunner(bin, dir string) zRunner {
	return func(t *testing.T, l zLaunch) ([]byte, ZStatus) {
		t.Helper()
		src, jobs, dst := filepath.Join(dir, "src"), filepath.Join(dir, "jobs"), filepath.Join(dir, "dst")
		tab := l.jobs
		if l.jobsOff >= 0 {
			tab = l.src[l.jobsOff:]
		}
		for _, f := range []struct {
			path string
			data []byte
		}{{src, l.src}, {jobs, tab}} {
			if err := os.WriteFile(f.path, f.data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command(bin, l.k.String(), src, jobs, strconv.Itoa(l.njobs), strconv.FormatInt(l.dstBytes, 10),
			strconv.FormatInt(l.srcBytes, 10), dst)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("zemu: %v\n%s%s", err, out, stderr.String())
		}
		var failed, first, codes uint32
		if _, err := fmt.Sscan(strings.TrimSpace(string(out)), &failed, &first, &codes); err != nil {
			t.Fatalf("zemu printed %q: %v", out, err)
		}
		st := ZStatus{Failed: int(failed), FirstJob: -1, Codes: codes}
		if failed > 0 {
			st.FirstJob = int(^first)
		}
		got, err := os.ReadFile(dst)
		if err != nil {
			t.Fatal(err)
		}
		return got, st
	}
}

func TestZStatusErr(t *testing.T) {
	if err := (ZStatus{FirstJob: -1}).Err(nil); err != nil {
		t.Fatalf("no failure: %v", err)
	}
	err := ZStatus{Failed: 3, FirstJob: 7, Codes: ZErrStream | ZErrSum}.Err(func(j int) string { return fmt.Sprintf("tile %d of q_proj", j) })
	if !errors.Is(err, bf16z.ErrCorrupt) {
		t.Fatalf("%v does not wrap bf16z.ErrCorrupt", err)
	}
	want := "cuda: bf16z decode: 3 jobs failed (a warp-stream that does not decode; checksum mismatch), the first tile 7 of q_proj: corrupt compressed data"
	if err.Error() != want {
		t.Fatalf("got  %q\nwant %q", err, want)
	}
}
