package cuda

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"vlanode/cuda/driver"
)

// TestKernelsCompile compiles every kernel with NVRTC, which needs no GPU:
// it runs wherever libnvrtc is found, the GPU machine included.
func TestKernelsCompile(t *testing.T) {
	rtc, err := driver.OpenNVRTC()
	if err != nil {
		t.Skipf("SKIPPED: no NVRTC on this machine, kernels not compiled: %v", err)
	}
	defer rtc.Close()
	major, minor, _ := rtc.Version()
	archs, err := rtc.SupportedArchs()
	if err != nil {
		t.Fatal(err)
	}
	arch := 90
	if len(archs) > 0 && !slices.Contains(archs, arch) {
		arch = slices.Max(archs)
	}
	dir := t.TempDir()
	name := archName(arch, major) // sm_90a where NVRTC knows it: the wgmma kernels too
	cubin, info, err := buildKernels(rtc, name, dir, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("NVRTC %d.%d compiled %d bytes for %s in %v", major, minor, len(cubin), info.Arch, info.CompileTime)
	if info.Log != "" {
		t.Logf("compiler messages:\n%s", info.Log)
	}
	if info.FromCache || info.CacheError != "" || !bytes.HasPrefix(cubin, elfMagic) {
		t.Errorf("first build: %+v", info)
	}
	for _, name := range kernelNames(t) {
		if !bytes.Contains(cubin, []byte(name)) {
			t.Errorf("kernel %s is missing from the CUBIN", name)
		}
	}
	again, info2, err := buildKernels(rtc, name, dir, false)
	if err != nil || !info2.FromCache || !bytes.Equal(again, cubin) {
		t.Errorf("second build did not come from the cache: %+v, %v", info2, err)
	}
}

// TestKernelsEnterPDL checks that every kernel begins with vla_pdl_enter
// or vla_pdl_launch_enter (or, for the GEMVs, vla_gemv_enter, which may
// load weights first): Go
// launches every kernel of the module with programmatic dependent launch,
// and a kernel that touched memory before its wait would race with the
// kernel ahead of it.
func TestKernelsEnterPDL(t *testing.T) {
	src, err := kernelSource()
	if err != nil {
		t.Fatal(err)
	}
	// The templates the GEMV and row-product kernels call, which load
	// weights before they wait: each waits (the first string) before it
	// reads x (the second).
	gemvBodies := map[string][2]string{
		"vla_gemv<":        {"vla_gemv_enter(", "vla_gemv_dot<"},
		"vla_gemv3<":       {"vla_gemv_enter(", "vla_gemv_dot<"},
		"vla_gemv_swiglu<": {"vla_gemv_enter(", "vla_gemv_dot<"},
		"vla_gemm_rows<":   {"vla_pdl_enter(", "vla_rows_stream_at<WG>(x"},
		"vla_gemv_stream<": {"vla_pdl_enter(", "vla_gstream_dot<"},
		// the decode attention loads old cache rows before it waits
		"vla_attn_decode_t<": {"vla_pdl_enter(", "float4 qr["},
	}
	for name, marks := range gemvBodies {
		def := "void " + strings.TrimSuffix(name, "<") + "("
		i := strings.Index(src, def)
		if i < 0 {
			t.Fatalf("no definition %q", def)
		}
		body := src[i:]
		enter, first := strings.Index(body, marks[0]), strings.Index(body, marks[1])
		if enter < 0 || first < 0 || enter > first {
			t.Errorf("%s does not call %s before %s", name, marks[0], marks[1])
		}
	}
	n := 0
	for rest := src; ; {
		i := strings.Index(rest, "__global__")
		if i < 0 {
			break
		}
		rest = rest[i+len("__global__"):]
		open := strings.Index(rest, "{")
		head := strings.ReplaceAll(rest[:open], "\\\n", "\n")
		// No parameter list holds a parenthesis: the last one opens it.
		before := strings.Fields(head[:strings.LastIndex(head, "(")])
		name := before[len(before)-1]
		body := strings.TrimLeft(strings.ReplaceAll(rest[open+1:], "\\\n", "\n"), " \t\n")
		stmt := body[:strings.Index(body, ";")]
		ok := strings.HasPrefix(stmt, "vla_pdl_enter()") || strings.HasPrefix(stmt, "vla_pdl_launch_enter()") ||
			strings.HasPrefix(stmt, "vla_pdl_launch_enter_if(")
		for g := range gemvBodies {
			ok = ok || strings.HasPrefix(stmt, g)
		}
		if !ok {
			t.Errorf("kernel %s begins with %q, not vla_pdl_enter()", name, stmt)
		}
		n++
	}
	if n < 30 { // a macro defines several of the module's 47
		t.Errorf("found only %d kernel definitions in the source", n)
	}
}
