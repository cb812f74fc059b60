package driver

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"unsafe"
)

// gpuContext locks the test to its OS thread and makes device 0's primary
// context current there, or skips the test, loudly, without a GPU.
func gpuContext(t *testing.T) (*Driver, Stream) {
	t.Helper()
	d, err := OpenDriver()
	if err != nil {
		t.Skipf("SKIPPED: no CUDA driver/GPU on this machine: %v", err)
	}
	if err := d.Init(); err != nil {
		d.Close()
		t.Skipf("SKIPPED: no CUDA driver/GPU on this machine: cuInit: %v", err)
	}
	if n, err := d.DeviceCount(); err != nil || n == 0 {
		d.Close()
		t.Skipf("SKIPPED: no CUDA driver/GPU on this machine: %d devices, %v", n, err)
	}
	runtime.LockOSThread() // cleanups run on this goroutine, so on this thread
	dev, err := d.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := d.PrimaryContextRetain(dev)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetCurrent(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := d.StreamCreate(StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		check(t, d.StreamDestroy(s))
		check(t, d.SetCurrent(0))
		check(t, d.PrimaryContextRelease(dev))
		check(t, d.Close())
		runtime.UnlockOSThread()
	})
	return d, s
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Error(err)
	}
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func TestGPUMemoryAndCopies(t *testing.T) {
	d, s := gpuContext(t)
	t.Logf("%v", d)
	free, total, err := d.MemInfo()
	if err != nil || free <= 0 || free > total {
		t.Fatalf("MemInfo = %d, %d, %v", free, total, err)
	}
	const n = 1 << 20
	p := must[DevicePtr](t)(d.MemAlloc(n))
	defer func() { check(t, d.MemFree(p)) }()
	if p%256 != 0 {
		t.Errorf("cuMemAlloc returned %#x, not 256-byte aligned", p)
	}

	// memset, then device to pinned host memory.
	check(t, d.MemsetD8Async(p, 0x5a, n, s))
	h := must[unsafe.Pointer](t)(d.HostAlloc(n, 0))
	defer func() { check(t, d.FreeHost(h)) }()
	check(t, d.CopyDtoHAsync(h, p, n, s))
	check(t, d.StreamSynchronize(s))
	if !bytes.Equal(unsafe.Slice((*byte)(h), n), bytes.Repeat([]byte{0x5a}, n)) {
		t.Error("memset + DtoH did not give 0x5a everywhere")
	}

	// mmap + cuMemHostRegister, host to device, device to device, back to Go memory.
	m, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(m)
	for i := range m {
		m[i] = byte(i * 7)
	}
	check(t, d.HostRegister(unsafe.Pointer(&m[0]), n, 0))
	p2 := must[DevicePtr](t)(d.MemAlloc(n))
	defer func() { check(t, d.MemFree(p2)) }()
	check(t, d.CopyHtoDAsync(p2, unsafe.Pointer(&m[0]), n, s))
	check(t, d.CopyDtoDAsync(p, p2, n, s))
	back := make([]byte, n)
	check(t, d.CopyDtoH(back, p, s))
	check(t, d.HostUnregister(unsafe.Pointer(&m[0])))
	if !bytes.Equal(back, m) {
		t.Error("registered HtoD + DtoD + DtoH lost the pattern")
	}
	goData := bytes.Repeat([]byte{1, 2, 3}, n/3)
	check(t, d.CopyHtoD(p2, goData, s))
	back = make([]byte, len(goData))
	check(t, d.CopyDtoH(back, p2, s))
	if !bytes.Equal(back, goData) {
		t.Error("Go memory HtoD + DtoH lost the pattern")
	}

	// A failed call is an *Error with the driver's name for the status.
	_, err = d.MemAlloc(1 << 60)
	var de *Error
	if !errors.As(err, &de) || !strings.HasPrefix(de.Name, "CUDA_ERROR_") || de.Text == "" || de.Call != "cuMemAlloc_v2" {
		t.Errorf("allocating 1 EiB: %#v", err)
	}
	t.Logf("as expected: %v", err)
}

func TestGPUStreamsAndEvents(t *testing.T) {
	d, s := gpuContext(t)
	const n = 64 << 20
	p := must[DevicePtr](t)(d.MemAlloc(n))
	defer func() { check(t, d.MemFree(p)) }()
	q := must[DevicePtr](t)(d.MemAlloc(n))
	defer func() { check(t, d.MemFree(q)) }()
	s2 := must[Stream](t)(d.StreamCreate(StreamNonBlocking))
	defer func() { check(t, d.StreamDestroy(s2)) }()
	e0 := must[Event](t)(d.EventCreate(EventDefault))
	defer func() { check(t, d.EventDestroy(e0)) }()
	e1 := must[Event](t)(d.EventCreate(EventDefault))
	defer func() { check(t, d.EventDestroy(e1)) }()

	check(t, d.EventRecord(e0, s))
	check(t, d.MemsetD8Async(p, 7, n, s))
	check(t, d.EventRecord(e1, s))
	// s2 copies p only after s has set it.
	check(t, d.StreamWaitEvent(s2, e1))
	check(t, d.CopyDtoDAsync(q, p, n, s2))
	check(t, d.StreamSynchronize(s2))
	if done, err := d.EventDone(e1); err != nil || !done {
		t.Errorf("EventDone after the waiting stream finished: %v %v", done, err)
	}
	ms, err := d.EventElapsed(e0, e1)
	if err != nil || ms <= 0 {
		t.Errorf("EventElapsed = %v, %v", ms, err)
	}
	t.Logf("memset of 64 MiB: %.3f ms", ms)
	tail := make([]byte, 4096)
	check(t, d.CopyDtoH(tail, q+n-4096, s2))
	if !bytes.Equal(tail, bytes.Repeat([]byte{7}, 4096)) {
		t.Error("the stream that waited on the event did not see the memset")
	}
}

func TestGPULaunchAndGemm(t *testing.T) {
	d, s := gpuContext(t)
	rtc, err := OpenNVRTC()
	if err != nil {
		t.Skipf("SKIPPED: no NVRTC on the GPU machine: %v", err)
	}
	defer rtc.Close()
	dev := must[Device](t)(d.Device(0))
	major, minor, err := d.ComputeCapability(dev)
	if err != nil {
		t.Fatal(err)
	}
	src := `extern "C" __global__ void scale(float *y, const float *x, float a, int n) {
		int i = blockIdx.x * blockDim.x + threadIdx.x;
		if (i < n) y[i] = a * x[i];
	}`
	opts := []string{fmt.Sprintf("--gpu-architecture=sm_%d%d", major, minor)}
	cubin, log, err := rtc.CompileCUBIN(src, "scale.cu", opts)
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	_, _, err = rtc.CompileCUBIN("this is not C++", "bad.cu", opts)
	var ce *CompileError
	if !errors.As(err, &ce) || ce.Log == "" {
		t.Errorf("a bad program: %v", err)
	}
	m := must[Module](t)(d.ModuleLoad(cubin))
	defer func() { check(t, d.ModuleUnload(m)) }()
	f := must[Function](t)(d.Function(m, "scale"))
	if _, err := d.Function(m, "missing"); err == nil {
		t.Error("a missing kernel was found")
	}

	const n = 1000
	x := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		binary.NativeEndian.PutUint32(x[4*i:], math.Float32bits(float32(i)))
	}
	px := must[DevicePtr](t)(d.MemAlloc(4 * n))
	defer func() { check(t, d.MemFree(px)) }()
	py := must[DevicePtr](t)(d.MemAlloc(4 * n))
	defer func() { check(t, d.MemFree(py)) }()
	check(t, d.CopyHtoD(px, x, s))
	a := NewArgs()
	a.Ptr(py).Ptr(px).F32(2.5).I32(n)
	check(t, d.Launch(f, Dim3{(n + 127) / 128, 1, 1}, Dim3{128, 1, 1}, 0, s, a))
	y := make([]byte, 4*n)
	check(t, d.CopyDtoH(y, py, s))
	for i := 0; i < n; i++ {
		if got := math.Float32frombits(binary.NativeEndian.Uint32(y[4*i:])); got != 2.5*float32(i) {
			t.Fatalf("y[%d] = %v, want %v", i, got, 2.5*float32(i))
		}
	}

	// cuBLAS: C[2x3] (column-major) = A[2x4] · B[4x3], all float32.
	blas, err := OpenBLAS()
	if err != nil {
		t.Skipf("SKIPPED: no cuBLAS on the GPU machine: %v", err)
	}
	defer blas.Close()
	ma, mi, pa, err := blas.Version()
	t.Logf("cuBLAS %d.%d.%d (%v)", ma, mi, pa, err)
	h := must[BLASHandle](t)(blas.Create())
	defer func() { check(t, blas.Destroy(h)) }()
	check(t, blas.SetStream(h, s))
	A := []float32{1, 2, 3, 4, 5, 6, 7, 8}                      // 2x4 column-major
	B := []float32{1, 0, 0, 0, 0, 1, 0, 0, 1, 1, 1, 1}          // 4x3 column-major
	want := []float32{1, 2, 3, 4, 1 + 3 + 5 + 7, 2 + 4 + 6 + 8} // 2x3 column-major
	pa32, pb32, pc32 := upload32(t, d, s, A), upload32(t, d, s, B), upload32(t, d, s, make([]float32, 6))
	check(t, blas.GemmEx(h, &Gemm{TransA: OpN, TransB: OpN, M: 2, N: 3, K: 4, Alpha: 1,
		A: pa32, AType: R32F, LDA: 2, B: pb32, BType: R32F, LDB: 4, C: pc32, CType: R32F, LDC: 2,
		Compute: Compute32F, Algo: GemmDefault}))
	c := make([]byte, 24)
	check(t, d.CopyDtoH(c, pc32, s))
	for i, w := range want {
		if got := math.Float32frombits(binary.NativeEndian.Uint32(c[4*i:])); got != w {
			t.Errorf("C[%d] = %v, want %v", i, got, w)
		}
	}
	err = blas.GemmEx(h, &Gemm{M: -1, N: 1, K: 1, Compute: Compute32F, Algo: GemmDefault})
	if !errors.As(err, new(*Error)) || err.(*Error).Lib != LibCUBLAS {
		t.Errorf("a GEMM with m = -1: %v", err)
	}
	t.Logf("as expected: %v", err)
}

// upload32 copies float32 values to new device memory, freed at cleanup.
func upload32(t *testing.T, d *Driver, s Stream, v []float32) DevicePtr {
	t.Helper()
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.NativeEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	p := must[DevicePtr](t)(d.MemAlloc(int64(len(b))))
	t.Cleanup(func() { check(t, d.MemFree(p)) })
	check(t, d.CopyHtoD(p, b, s))
	return p
}

// TestGPUDeviceUUID: every device has a UUID in NVML's form, each its own.
func TestGPUDeviceUUID(t *testing.T) {
	d, _ := gpuContext(t)
	n, err := d.DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i := range n {
		dev, err := d.Device(i)
		if err != nil {
			t.Fatal(err)
		}
		u, err := d.DeviceUUID(dev)
		if err != nil {
			t.Fatal(err)
		}
		if len(u) != len("GPU-")+36 || !strings.HasPrefix(u, "GPU-") || seen[u] {
			t.Fatalf("device %d: UUID %q", i, u)
		}
		seen[u] = true
		t.Logf("CUDA device %d: %s", i, u)
	}
}
