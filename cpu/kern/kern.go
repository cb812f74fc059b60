// Package kern holds the host CPU's bf16 matrix kernels for co-execution:
// y = x·Wᵀ (+ bias) for bf16 weights read in place from host memory (whole
// matrices, row ranges and column ranges), and a fused SwiGLU MLP shard, run
// on a pool of pinned worker threads.
//
// One binary carries four paths, chosen by CPUID at run time: AMX-BF16
// (tiles; for M at or above a row threshold), AVX-512-BF16 (vdpbf16ps; the
// GEMV path), AVX2+FMA (x86 CPUs without either) and portable C. x is
// rounded to bf16 once per call, as the GPU rounds matmul inputs; products
// accumulate in float32.
//
// Every output element is computed by one worker in an order fixed by the
// path, so for a given path and shape the result is the same bits run after
// run and for every thread count. The path may depend on M (Auto picks AMX
// from Options.AMXMinRows rows up), so a row's result can depend on M.
package kern

/*
#cgo CFLAGS: -O3 -std=gnu11 -Wall -Wno-unused-function
#cgo LDFLAGS: -lm -lpthread
#include <stdlib.h>
#include "kern.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// Path is a kernel implementation.
type Path int

// Paths, slowest first. The values match the C side's.
const (
	Auto   Path = iota // per call: AMX from Options.AMXMinRows rows up, else the best of the others
	Scalar             // portable C
	AVX2               // AVX2 + FMA
	AVX512             // AVX-512 F/BW/VL/DQ + AVX512_BF16
	AMX                // AMX-TILE + AMX-BF16 (with the AVX-512 path's requirements)
)

// AllPaths lists every concrete path, slowest first.
func AllPaths() []Path { return []Path{Scalar, AVX2, AVX512, AMX} }

var pathNames = map[Path]string{Auto: "auto", Scalar: "scalar", AVX2: "avx2", AVX512: "avx512", AMX: "amx"}

func (p Path) String() string {
	if s, ok := pathNames[p]; ok {
		return s
	}
	return fmt.Sprintf("Path(%d)", int(p))
}

// ParsePath is the inverse of Path.String.
func ParsePath(s string) (Path, error) {
	for p, n := range pathNames {
		if n == strings.ToLower(s) {
			return p, nil
		}
	}
	return 0, fmt.Errorf("kern: unknown path %q (want auto, scalar, avx2, avx512 or amx)", s)
}

// Features is what the CPU and the OS support.
type Features struct {
	AVX2       bool // AVX2 and FMA, YMM state saved by the OS
	AVX512     bool // AVX-512 F, BW, VL, DQ, ZMM state saved by the OS
	AVX512BF16 bool // AVX512_BF16
	AMX        bool // AMX-TILE and AMX-BF16, tile state supported by the OS
}

// Detect reads the CPU's features (CPUID and XCR0).
func Detect() Features {
	f := int(C.kern_features())
	return Features{
		AVX2:       f&C.KERN_F_AVX2 != 0,
		AVX512:     f&C.KERN_F_AVX512 != 0,
		AVX512BF16: f&C.KERN_F_AVX512BF16 != 0,
		AMX:        f&C.KERN_F_AMXBF16 != 0,
	}
}

func (f Features) String() string {
	var s []string
	for _, x := range []struct {
		on   bool
		name string
	}{{f.AVX2, "avx2+fma"}, {f.AVX512, "avx512f/bw/vl/dq"}, {f.AVX512BF16, "avx512_bf16"}, {f.AMX, "amx-bf16"}} {
		if x.on {
			s = append(s, x.name)
		}
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// Supported says whether path p can run here: nil, or why not. For AMX it
// asks Linux for permission to use tile data (a process-wide request that
// later calls repeat harmlessly).
func Supported(p Path) error {
	f := Detect()
	switch p {
	case Scalar:
		return nil
	case AVX2:
		if !f.AVX2 {
			return errors.New("kern: the CPU (or OS) lacks AVX2+FMA")
		}
		return nil
	case AVX512:
		if !f.AVX512 || !f.AVX512BF16 {
			return fmt.Errorf("kern: the CPU (or OS) lacks AVX-512 with AVX512_BF16 (has %s)", f)
		}
		return nil
	case AMX:
		if !f.AVX512 || !f.AVX512BF16 || !f.AMX {
			return fmt.Errorf("kern: the CPU (or OS) lacks AMX-BF16 with AVX-512-BF16 (has %s)", f)
		}
		if e := C.kern_amx_request(); e != 0 {
			return fmt.Errorf("kern: Linux refused AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM): %w", syscall.Errno(e))
		}
		return nil
	}
	return fmt.Errorf("kern: %v is not a concrete path", p)
}

// Defaults of Options.
const (
	// DefaultAMXMinRows is the M from which Auto uses AMX rather than
	// AVX-512-BF16 (bench/results/cpu-kernels.md).
	DefaultAMXMinRows = 4
	// DefaultWorkerSpin is how long an idle worker spins before it sleeps.
	DefaultWorkerSpin = 100 * time.Microsecond
	// DefaultCallerSpin is how long the calling thread spins for a job's
	// end before it sleeps.
	DefaultCallerSpin = 10 * time.Microsecond
	// MaxRows bounds M of one call.
	MaxRows = 4096
)

// Options configure a Pool.
type Options struct {
	// Threads is the number of workers: the first Threads of CPUs, or of
	// CPUOrder when CPUs is nil. 0 means all of CPUs, or one per physical
	// core (DefaultCPUs).
	Threads int
	// CPUs are the CPUs the workers are pinned to, worker i to CPUs[i].
	// A CPU may repeat (oversubscribing it: tests only).
	CPUs []int
	// Path forces one path for every call; Auto picks per call.
	Path Path
	// AMXMinRows is Auto's AMX threshold; 0 means DefaultAMXMinRows.
	AMXMinRows int
	// WorkerSpin and CallerSpin bound busy waiting before a futex sleep;
	// 0 means the defaults.
	WorkerSpin, CallerSpin time.Duration
}

// Pool is a set of pinned worker threads that run one operation at a time.
// Its methods are safe for concurrent use (calls are serialized). A Pool
// MUST be released with Close.
type Pool struct {
	mu     sync.Mutex
	c      *C.kern_pool // nil once closed
	cpus   []int
	forced Path  // Options.Path
	small  Path  // Auto's path below amxMin rows
	amx    bool  // Auto may use AMX
	amxErr error // why not, when the CPU has AMX but Linux refused it
	amxMin int
	// Knobs that tests and benchmarks set: the AMX path's K chunk in
	// columns (a multiple of 32) and the AVX-512/AMX software prefetch
	// distance in columns (< 0: none); 0 means the built-in value.
	amxKC, prefetch int
}

// ErrClosed is returned by calls on a closed Pool.
var ErrClosed = errors.New("kern: pool is closed")

// NewPool starts a pool's workers.
func NewPool(o Options) (*Pool, error) {
	if o.Path < Auto || o.Path > AMX {
		return nil, fmt.Errorf("kern: unknown path %v", o.Path)
	}
	if o.Threads < 0 || o.AMXMinRows < 0 || o.WorkerSpin < 0 || o.CallerSpin < 0 {
		return nil, fmt.Errorf("kern: negative option in %+v", o)
	}
	cpus, n := o.CPUs, o.Threads
	if cpus == nil {
		order, cores, err := CPUOrder()
		if err != nil {
			return nil, err
		}
		if cpus = order; n == 0 {
			n = cores
		}
	}
	if n == 0 {
		n = len(cpus)
	}
	if n > len(cpus) {
		return nil, fmt.Errorf("kern: %d threads asked for, %d CPUs to pin them to (%v)", n, len(cpus), cpus)
	}
	if n == 0 {
		return nil, errors.New("kern: no CPUs to run on")
	}
	cpus = append([]int(nil), cpus[:n]...)
	for _, c := range cpus {
		if c < 0 {
			return nil, fmt.Errorf("kern: CPU %d does not exist", c)
		}
	}

	p := &Pool{cpus: cpus, forced: o.Path, amxMin: o.AMXMinRows}
	if p.amxMin == 0 {
		p.amxMin = DefaultAMXMinRows
	}
	if o.Path != Auto {
		if err := Supported(o.Path); err != nil {
			return nil, err
		}
	}
	p.small = Scalar
	for _, q := range []Path{AVX512, AVX2} {
		if Supported(q) == nil {
			p.small = q
			break
		}
	}
	if Detect().AMX {
		p.amxErr = Supported(AMX)
		p.amx = p.amxErr == nil
	}

	ws, cs := o.WorkerSpin, o.CallerSpin
	if ws == 0 {
		ws = DefaultWorkerSpin
	}
	if cs == 0 {
		cs = DefaultCallerSpin
	}
	ccpus := (*C.int)(C.malloc(C.size_t(n) * C.size_t(unsafe.Sizeof(C.int(0)))))
	defer C.free(unsafe.Pointer(ccpus))
	for i, c := range cpus {
		unsafe.Slice(ccpus, n)[i] = C.int(c)
	}
	var msg [256]C.char
	if rc := C.kern_pool_new(ccpus, C.int(n), C.int64_t(ws.Nanoseconds()), C.int64_t(cs.Nanoseconds()),
		&p.c, &msg[0], C.int(len(msg))); rc != 0 {
		return nil, fmt.Errorf("kern: new pool on CPUs %v: %s: %w", cpus, C.GoString(&msg[0]), syscall.Errno(rc))
	}
	return p, nil
}

// Close stops the workers. Later calls return ErrClosed.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.c == nil {
		return ErrClosed
	}
	C.kern_pool_free(p.c)
	p.c = nil
	return nil
}

// Threads is the number of workers.
func (p *Pool) Threads() int { return len(p.cpus) }

// CPUs lists the CPU of each worker.
func (p *Pool) CPUs() []int { return append([]int(nil), p.cpus...) }

// PathFor is the path a call with m rows of x runs on.
func (p *Pool) PathFor(m int) Path {
	switch {
	case p.forced != Auto:
		return p.forced
	case p.amx && m >= p.amxMin:
		return AMX
	}
	return p.small
}

// AMXError says why Auto never uses AMX on a CPU that has it (Linux refused
// the tile data permission), or nil.
func (p *Pool) AMXError() error { return p.amxErr }

func (p *Pool) String() string {
	if p.forced != Auto {
		return fmt.Sprintf("kern pool: %d threads on CPUs %v, path %v", len(p.cpus), p.cpus, p.forced)
	}
	if p.amx {
		return fmt.Sprintf("kern pool: %d threads on CPUs %v, path %v below %d rows, amx from %d",
			len(p.cpus), p.cpus, p.small, p.amxMin, p.amxMin)
	}
	return fmt.Sprintf("kern pool: %d threads on CPUs %v, path %v", len(p.cpus), p.cpus, p.small)
}
