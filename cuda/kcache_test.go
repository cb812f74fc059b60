package cuda

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"vlanode/tensor"
)

func TestKernelCacheKey(t *testing.T) {
	opts := []string{"--gpu-architecture=sm_90", "--std=c++17"}
	k := kernelCacheKey("src", opts, "13.0")
	if !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(k) {
		t.Fatalf("key %q is not 40 hex digits", k)
	}
	if k != kernelCacheKey("src", opts, "13.0") {
		t.Error("the key is not stable")
	}
	for name, other := range map[string]string{
		"source":  kernelCacheKey("src2", opts, "13.0"),
		"arch":    kernelCacheKey("src", []string{"--gpu-architecture=sm_100", "--std=c++17"}, "13.0"),
		"options": kernelCacheKey("src", opts[:1], "13.0"),
		"nvrtc":   kernelCacheKey("src", opts, "13.1"),
		// a boundary moved between parts must not collide
		"split": kernelCacheKey("sr", []string{"c--gpu-architecture=sm_90", "--std=c++17"}, "13.0"),
	} {
		if other == k {
			t.Errorf("changing the %s keeps the key", name)
		}
	}
}

func TestKernelCacheFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "k.cubin")
	if _, ok := readCachedCubin(path); ok {
		t.Fatal("a missing file reads as cached")
	}
	cubin := append([]byte("\x7fELF"), make([]byte, 100)...)
	if err := writeCachedCubin(path, cubin); err != nil {
		t.Fatal(err)
	}
	got, ok := readCachedCubin(path)
	if !ok || string(got) != string(cubin) {
		t.Fatalf("read back %d bytes, ok %v", len(got), ok)
	}
	if err := os.WriteFile(path, []byte("not a cubin"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := readCachedCubin(path); ok {
		t.Error("a non-ELF file reads as cached")
	}
	blocker := filepath.Join(dir, "file")
	os.WriteFile(blocker, nil, 0o644)
	if err := writeCachedCubin(filepath.Join(blocker, "k.cubin"), cubin); err == nil || !strings.HasPrefix(err.Error(), "cuda: kernel cache:") {
		t.Errorf("writing under a file: %v", err)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "sub"))
	if len(entries) != 1 {
		t.Errorf("the cache folder holds %d files, want 1 (no temp files left)", len(entries))
	}
}

func TestDefaultKernelCacheDir(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", "/tmp/xdg")
	if got := defaultKernelCacheDir(); got != "/tmp/xdg/vlanode/kernels" {
		t.Errorf("with XDG_CACHE_HOME: %q", got)
	}
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "/home/robot")
	if got := defaultKernelCacheDir(); got != "/home/robot/.cache/vlanode/kernels" {
		t.Errorf("without XDG_CACHE_HOME: %q", got)
	}
}

func TestKernelSource(t *testing.T) {
	src, err := kernelSource()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(src, "#line 1 \"common.cuh\"\n") {
		t.Error("the source does not start with common.cuh")
	}
	for _, name := range kernelNames(t) {
		if !strings.Contains(src, `extern "C" __global__ void `+name+"(") &&
			!strings.Contains(src, "\n    "+name+"(") && !strings.Contains(src, "_KERNEL("+name+", ") {
			t.Errorf("kernel %s is not defined in the source", name)
		}
	}
	if strings.Contains(src, "#include") {
		t.Error("a kernel includes a header: NVRTC needs the CUDA include path for it")
	}
}

// kernelNames lists the names kernelSet.load looks up.
func kernelNames(t *testing.T) []string {
	var names []string
	for _, e := range (&kernelSet{}).entries() {
		names = append(names, e.name)
	}
	return names
}

func TestPickArch(t *testing.T) {
	known := []int{75, 80, 86, 87, 89, 90, 100, 120}
	for _, c := range []struct {
		cc   int
		want int
		ok   bool
	}{
		{90, 90, true}, {86, 86, true}, {88, 87, true}, {121, 120, true},
		{103, 100, true}, {70, 0, false}, {130, 0, false},
	} {
		got, err := pickArch(c.cc, known)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("pickArch(%d) = %d, %v; want %d (ok %v)", c.cc, got, err, c.want, c.ok)
		}
	}
	if got, err := pickArch(90, nil); got != 90 || err != nil {
		t.Errorf("pickArch without a list = %d, %v", got, err)
	}
}

func TestCompileOptions(t *testing.T) {
	got := strings.Join(compileOptions("sm_90a", []string{"/usr/local/cuda/include"}), " ")
	if got != "--gpu-architecture=sm_90a --std=c++17 -I/usr/local/cuda/include" {
		t.Errorf("options %q", got)
	}
	for _, c := range []struct {
		arch, rtc int
		want      string
	}{{90, 13, "sm_90a"}, {90, 12, "sm_90a"}, {90, 11, "sm_90"}, {89, 13, "sm_89"}, {100, 13, "sm_100"}} {
		if got := archName(c.arch, c.rtc); got != c.want {
			t.Errorf("archName(%d, NVRTC %d) = %s, want %s", c.arch, c.rtc, got, c.want)
		}
	}
	dir := t.TempDir()
	if got := existingDirs([]string{dir, filepath.Join(dir, "missing"), dir}); len(got) != 1 || got[0] != dir {
		t.Errorf("existingDirs = %v", got)
	}
}

// TestKernelConstants checks that the Go side agrees with the #defines of
// the kernel sources it launches.
func TestKernelConstants(t *testing.T) {
	src, err := kernelSource()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{
		"VLA_F32":                 int(dtypeCode(tensor.F32)),
		"VLA_F16":                 int(dtypeCode(tensor.F16)),
		"VLA_BF16":                int(dtypeCode(tensor.BF16)),
		"VLA_ATT_THREADS":         attThreads,
		"VLA_ATT_TILE":            attTile,
		"VLA_ATT_DIMS_PER_THREAD": attMaxHeadDim / attThreads,
		"VLA_ATT_MAX_BOUNDS":      attMaxBounds,
		"VLA_ARGMAX_THREADS":      argmaxThreads,
		"VLA_ARGMAX_BLOCKS":       argmaxBlocks,
		"VLA_ROWS_BN":             rowsBN,
		"VLA_ROWS_ALIGN":          rowsAlign,
		"VLA_ROWS_BK":             rowsBK,
		"VLA_ROWS_THREADS":        rowsThreads,
		"VLA_ROWS_OPS":            rowsOps,
		"VLA_ROWS_STAGES":         rowsStages,
		"VLA_ROWS_MAX_SPLITS":     rowsMaxSplits,
		"VLA_GSTREAM_WARPS":       gstreamWarps,
		"VLA_GSTREAM_PIECE":       gstreamPiece,
		"VLA_GSTREAM_ROWS":        gstreamRows,
		"VLA_GSTREAM_OPS":         gstreamOps,
		"VLA_SILU_U":              siluUnroll,
	} {
		m := regexp.MustCompile(`#define ` + name + ` +(\d+)`).FindStringSubmatch(src)
		if m == nil {
			t.Errorf("%s is not defined in the kernels", name)
			continue
		}
		if got, _ := strconv.Atoi(m[1]); got != want {
			t.Errorf("%s is %d in the kernels, %d in Go", name, got, want)
		}
	}
}
