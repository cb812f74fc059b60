package cuda

import (
	"bytes"
	"slices"
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
	cubin, info, err := buildKernels(rtc, arch, dir, false)
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
	again, info2, err := buildKernels(rtc, arch, dir, false)
	if err != nil || !info2.FromCache || !bytes.Equal(again, cubin) {
		t.Errorf("second build did not come from the cache: %+v, %v", info2, err)
	}
}
