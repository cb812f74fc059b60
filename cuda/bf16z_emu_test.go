package cuda

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

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
	out, err := exec.Command(gxx, "-std=c++20", "-O2", "-Wall", "-Wextra", "-Wno-unknown-pragmas", "-Wno-unused-function",
		"-o", bin, "testdata/zemu/zemu.cpp").CombinedOutput()
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
		out, err := exec.Command(bin, l.k.String(), src, jobs, strconv.Itoa(l.njobs), strconv.FormatInt(l.dstBytes, 10),
			strconv.FormatInt(l.srcBytes, 10), dst).CombinedOutput()
		if err != nil {
			t.Fatalf("zemu: %v\n%s", err, out)
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
