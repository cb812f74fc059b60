package cuda

import (
	"encoding/binary"
	"errors"
	"strings"
	"sync"
	"testing"
)

func TestThreadRunsCallsInTurn(t *testing.T) {
	th := newThread()
	bound := 0
	th.setBind(func() error { bound++; return nil })
	// Calls from many goroutines run one at a time, each after bind.
	var running, most, done int32
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				th.do(func() error {
					running++
					most = max(most, running)
					running--
					done++
					return nil
				})
			}
		}()
	}
	wg.Wait()
	if most != 1 || done != 400 || bound != 400 {
		t.Errorf("%d calls done, %d bound, %d at once", done, bound, most)
	}
	want := errors.New("boom")
	if err := th.do(func() error { return want }); err != want {
		t.Errorf("do returned %v, want %v", err, want)
	}
	err := th.do(func() error { var m map[string]int; m["x"] = 1; return nil })
	if err == nil || !strings.Contains(err.Error(), "cuda: internal error") {
		t.Errorf("a panic came back as %v", err)
	}
	th.setBind(func() error { return errors.New("no context") })
	if err := th.do(func() error { return nil }); err == nil || !strings.Contains(err.Error(), "no context") {
		t.Errorf("a failed bind came back as %v", err)
	}
	th.stop()
	th.stop()
	if err := th.do(func() error { return nil }); err != ErrClosed {
		t.Errorf("do after stop: %v", err)
	}
}

func TestSegmentBytes(t *testing.T) {
	b := segmentBytes([]int{0, 30, 50, 97})
	if len(b) != attSegsBytes || attSegsBytes != 2056 {
		t.Fatalf("%d bytes, want sizeof(struct vla_segments) = 2056", len(b))
	}
	ne := binary.NativeEndian
	if ne.Uint32(b) != 4 || ne.Uint32(b[4:]) != 0 || ne.Uint32(b[8:]) != 30 || ne.Uint32(b[16:]) != 97 || ne.Uint32(b[20:]) != 0 {
		t.Errorf("layout % x", b[:24])
	}
}

func TestElementwiseGrid(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want uint32
	}{{1, 1}, {256, 1}, {257, 2}, {1 << 40, maxGridBlocks}} {
		if g := elementwiseGrid(c.n); g[0] != c.want || g[1] != 1 || g[2] != 1 {
			t.Errorf("elementwiseGrid(%d) = %v, want %d blocks", c.n, g, c.want)
		}
	}
	for n, want := range map[int]int{1: 32, 72: 96, 128: 128, 4096: 256} {
		if got := rowThreads(n); got != want {
			t.Errorf("rowThreads(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestOptions(t *testing.T) {
	o := defaultOptions()
	for _, opt := range []Option{WithDevice(1), WithBudget(4 << 30), WithKernelCache("/tmp/k"), WithKernelRebuild(), WithCUBLASWorkspace(4 << 20)} {
		if err := opt(&o); err != nil {
			t.Fatal(err)
		}
	}
	if o.device != 1 || o.budget != 4<<30 || o.cacheDir != "/tmp/k" || !o.noCache || o.workspace != 4<<20 {
		t.Errorf("options %+v", o)
	}
	for _, bad := range []Option{WithDevice(-1), WithBudget(-1), WithCUBLASWorkspace(-1)} {
		if err := bad(&o); err == nil {
			t.Error("a bad option was accepted")
		}
	}
}

// TestAvailableWithoutGPU checks the one-line reason on a machine without
// the driver; on a GPU machine there is nothing to check.
func TestAvailableWithoutGPU(t *testing.T) {
	err := Available()
	if err == nil {
		t.Skip("CUDA is available here")
	}
	if strings.Contains(err.Error(), "\n") || !strings.HasPrefix(err.Error(), "cuda: ") {
		t.Errorf("Available() = %q: want one line starting with \"cuda: \"", err)
	}
	if _, nerr := New(); nerr == nil || nerr.Error() != err.Error() {
		t.Errorf("New() without CUDA: %v; want the same reason as Available: %v", nerr, err)
	}
}

func TestArgmaxMask(t *testing.T) {
	for _, c := range []struct {
		lo, hi, n int
		wlo, whi  int32
	}{
		{151669, 155703, 155704, 151669, 155703},
		{5, 3, 10, 0, -1},              // empty
		{-4, 2, 10, 0, 2},              // from before the start
		{90, 1 << 41, 100, 90, 99},     // over the end
		{1 << 40, 1 << 41, 100, 0, -1}, // past the end: none, not wrapped
		{-1, -1, 100, 0, -1},
	} {
		if lo, hi := argmaxMask(c.lo, c.hi, c.n); lo != c.wlo || hi != c.whi {
			t.Errorf("argmaxMask(%d, %d, %d) = [%d, %d], want [%d, %d]", c.lo, c.hi, c.n, lo, hi, c.wlo, c.whi)
		}
	}
}
