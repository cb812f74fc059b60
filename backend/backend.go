// Package backend defines the compute interface that model code calls. The
// cpu and cuda packages implement it; model code never imports cgo.
//
// Conventions:
//   - Tensors are row-major. Activations are F32; weights may be F32, F16 or
//     BF16 and are read-only.
//   - Every op writes into a destination the caller allocated, so a model can
//     allocate its scratch once and a GPU backend can capture a pass in a
//     graph. Shapes are checked and a mismatch is an error, never a panic.
//   - A "matrix view" of a tensor folds all leading dimensions into rows:
//     shape [a, b, c] is a matrix of a*b rows and c columns.
//   - Elementwise ops (Add, SiLUMul, GELU) and the destinations of the norms
//     need equal element counts, not equal shapes, so a per-head view and
//     its [T, heads*headDim] original can be mixed.
//   - A nil optional operand (a bias) means none.
package backend

import (
	"errors"
	"fmt"
	"time"

	"vlanode/tensor"
)

// Tensor is a handle to memory owned by a backend.
type Tensor interface {
	DType() tensor.DType
	// Shape returns the dimensions; callers must not modify the slice.
	Shape() []int
}

// AttnOpts describes one scaled-dot-product attention call.
//
// Q is [Tq, Heads*HeadDim]; K and V are [>=NKV, KVHeads*HeadDim] (a KV
// cache, of which the first NKV rows are valid). Heads must be a multiple of
// KVHeads (grouped-query attention: query head h reads KV head
// h/(Heads/KVHeads)). The output is [Tq, Heads*HeadDim].
type AttnOpts struct {
	Heads, KVHeads, HeadDim int
	// NKV is the number of valid key/value rows.
	NKV int
	// Scale multiplies the dot products (usually 1/sqrt(HeadDim)).
	Scale float32
	// Causal masks key j for query i when j > QPos0+i.
	Causal bool
	// QPos0 is the key row of the first query, for causal masking.
	QPos0 int
	// MaskFrom and MaskTo, when MaskTo > MaskFrom, hide key rows
	// [MaskFrom, MaskTo) from every query (the action expert ignores the VLM
	// tokens generated after the trajectory start token).
	MaskFrom, MaskTo int
	// Segments, when non-empty, are cumulative boundaries [0, s1, s2, ..., NKV]
	// that split rows into independent blocks: query i attends only to keys of
	// its own block (per-image attention in a vision encoder). It requires
	// Tq == NKV and QPos0 == 0.
	Segments []int
}

// Validate checks the options against the operand shapes.
func (o AttnOpts) Validate(q, k, v, dst Tensor) error {
	if o.Heads <= 0 || o.KVHeads <= 0 || o.HeadDim <= 0 || o.Heads%o.KVHeads != 0 {
		return fmt.Errorf("attention: bad heads %d/%d, head dim %d", o.Heads, o.KVHeads, o.HeadDim)
	}
	qr, qc := Matrix(q)
	kr, kc := Matrix(k)
	vr, vc := Matrix(v)
	dr, dc := Matrix(dst)
	if qc != o.Heads*o.HeadDim || dc != qc || dr != qr {
		return fmt.Errorf("attention: q %v / out %v do not hold %d heads of %d", q.Shape(), dst.Shape(), o.Heads, o.HeadDim)
	}
	if kc != o.KVHeads*o.HeadDim || vc != kc || kr < o.NKV || vr < o.NKV {
		return fmt.Errorf("attention: k %v / v %v do not hold %d rows of %d kv heads of %d", k.Shape(), v.Shape(), o.NKV, o.KVHeads, o.HeadDim)
	}
	if o.NKV <= 0 {
		return errors.New("attention: no keys")
	}
	if o.MaskTo > o.MaskFrom && (o.MaskFrom < 0 || o.MaskTo > o.NKV) {
		return fmt.Errorf("attention: mask [%d, %d) outside the %d keys", o.MaskFrom, o.MaskTo, o.NKV)
	}
	if o.QPos0 < 0 {
		return fmt.Errorf("attention: negative QPos0 %d", o.QPos0)
	}
	if o.Causal && o.QPos0+qr > o.NKV {
		return fmt.Errorf("attention: causal queries at %d..%d reach past the %d keys", o.QPos0, o.QPos0+qr-1, o.NKV)
	}
	if len(o.Segments) > 0 {
		if qr != o.NKV || o.QPos0 != 0 {
			return errors.New("attention: segments need as many queries as keys")
		}
		if o.Segments[0] != 0 || o.Segments[len(o.Segments)-1] != o.NKV {
			return fmt.Errorf("attention: segments %v must run from 0 to %d", o.Segments, o.NKV)
		}
		for i := 1; i < len(o.Segments); i++ {
			if o.Segments[i] <= o.Segments[i-1] {
				return fmt.Errorf("attention: segments %v are not increasing", o.Segments)
			}
		}
	}
	return nil
}

// Backend is a compute device. Implementations are safe for use by one
// goroutine at a time (a model forward pass); they may use many threads
// inside each op.
type Backend interface {
	// Name identifies the backend ("cpu", "cuda").
	Name() string
	// Close releases everything the backend holds.
	Close() error

	// Alloc returns a zeroed tensor. Purpose names what the memory is for
	// ("activations", "kv-cache", ...) so that memory can be accounted.
	Alloc(purpose string, dt tensor.DType, shape ...int) (Tensor, error)
	// Weight makes a read-only tensor from little-endian host bytes. A backend
	// may alias data instead of copying it: the caller keeps data unchanged
	// and alive for as long as the tensor is used.
	Weight(purpose string, dt tensor.DType, shape []int, data []byte) (Tensor, error)
	// Free releases a tensor from Alloc or Weight. Views are not freed.
	Free(t Tensor)
	// Rows is a view of rows [start, start+n) of the first dimension.
	Rows(t Tensor, start, n int) (Tensor, error)
	// Reshape is a view with another shape of the same element count.
	Reshape(t Tensor, shape ...int) (Tensor, error)

	// Upload copies float32 values into an F32 tensor (len must match).
	Upload(dst Tensor, src []float32) error
	// Download copies an F32 tensor to the host.
	Download(src Tensor) ([]float32, error)
	// Sync waits until all queued work is done.
	Sync() error

	// Ops. All inputs and outputs are F32 unless said otherwise.

	// MatMul computes dst[M,N] = x[M,K] · wᵀ + bias, for w [N,K] (F32, F16 or
	// BF16) and an optional bias [N] (nil for none), accumulating in float32.
	MatMul(dst, x, w, bias Tensor) error
	// RMSNorm normalizes each row of x over its last dimension n = len(w):
	// dst = x / sqrt(mean(x²) + eps) · w. The last dimension of x must be a
	// multiple of n: [T, heads*headDim] with a [headDim] weight normalizes
	// each head on its own.
	RMSNorm(dst, x, w Tensor, eps float32) error
	// LayerNorm normalizes each row of x over its last dimension n = len(w):
	// dst = (x - mean) / sqrt(var + eps) · w + b (b may be nil).
	LayerNorm(dst, x, w, b Tensor, eps float32) error
	// Rope rotates x [T, heads*headDim] in place with rotate-half (NeoX)
	// rotary embeddings: for each row t, head and i < headDim/2,
	//   x1, x2 = x[i], x[i+half]
	//   x[i] = x1·cos[t,i] - x2·sin[t,i];  x[i+half] = x2·cos[t,i] + x1·sin[t,i]
	// cos and sin are [T, headDim/2].
	Rope(x, cos, sin Tensor, headDim int) error
	// Attention computes softmax(q·kᵀ·scale + mask)·v; see AttnOpts.
	Attention(dst, q, k, v Tensor, o AttnOpts) error
	// SiLU computes dst = x·sigmoid(x) elementwise.
	SiLU(dst, x Tensor) error
	// SiLUMul computes dst = silu(gate) · up elementwise.
	SiLUMul(dst, gate, up Tensor) error
	// GELU computes dst = gelu(x), with the tanh approximation when tanh is set.
	GELU(dst, x Tensor, tanh bool) error
	// Add computes dst = a + b elementwise (dst may alias a or b).
	Add(dst, a, b Tensor) error
	// Copy copies src into dst of the same element count (e.g. into KV-cache
	// rows obtained with Rows).
	Copy(dst, src Tensor) error
	// Embedding gathers rows ids of table [V, H] (F32, F16 or BF16) into
	// dst [len(ids), H] as float32. An id out of range is an error.
	Embedding(dst, table Tensor, ids []int32) error
}

// Matrix returns the matrix view of t: all leading dimensions folded into
// rows, the last dimension as columns. A scalar is 1×1.
func Matrix(t Tensor) (rows, cols int) {
	s := t.Shape()
	if len(s) == 0 {
		return 1, 1
	}
	cols = s[len(s)-1]
	rows = 1
	for _, d := range s[:len(s)-1] {
		rows *= d
	}
	return rows, cols
}

// Elements is the element count of t.
func Elements(t Tensor) int { return tensor.NumElements(t.Shape()) }

// Graph is a recorded sequence of a backend's GPU work, replayed by Launch
// with one call (see Capturer).
type Graph interface {
	// Launch queues one replay, in order with the ops around it.
	Launch() error
	// Close releases the graph once its queued replays have run.
	Close() error
}

// Capturer is a backend that can record the ops a function queues into a
// Graph instead of running them (cuda). Inside fn only ops that queue
// device work are allowed: no Alloc, Free, Upload, Download or Sync. The
// graph keeps the device addresses its ops used: their tensors must stay
// allocated while it lives, and their contents feed each replay.
type Capturer interface {
	CaptureGraph(fn func() error) (Graph, error)
}

// Argmaxer is a backend that picks a greedy token on the device (cuda): a
// decode step then brings back one index instead of the vocabulary's
// logits.
type Argmaxer interface {
	// Argmax is sample.Greedy of the values of x (F32, one row) with those
	// at [maskLo, maskHi] taken as -Inf (none when maskHi < maskLo): the
	// lowest index of the largest value, never a NaN's, -1 when every
	// value is NaN.
	Argmax(x Tensor, maskLo, maskHi int) (int, error)
}

// TokenFeed is a backend whose decode steps can take their token from
// device memory (cuda): the greedy token one step picks (ArgmaxAt) is
// embedded by the next on the device (EmbeddingAt), so that the host
// queues step t+1 before it reads token t (FetchI32).
type TokenFeed interface {
	// HostTable returns a read-only tensor of dt and shape [rows, cols]
	// over a copy of data in page-locked host memory that kernels read in
	// place, over the bus: an embedding table for EmbeddingAt that takes
	// no device memory. Free releases it once the queued work has run.
	HostTable(dt tensor.DType, rows, cols int, data []byte) (Tensor, error)
	// EmbeddingAt is Embedding with the ids read from device memory when
	// it runs: ids is an I32 tensor of one id a row of dst. An id outside
	// the table's rows gives a row of zeros (the device cannot return an
	// error; ArgmaxAt gives -1 when every value is NaN).
	EmbeddingAt(dst, table, ids Tensor) error
	// ArgmaxAt is Argmax with the index written to dst (an I32 tensor of
	// one element) when it runs, instead of returned: nothing waits.
	ArgmaxAt(dst, x Tensor, maskLo, maskHi int) error
	// FetchI32 queues a copy of src (I32, at most FetchMax elements) to
	// the host, in order with the queued ops. Every Fetch must be waited
	// for or released.
	FetchI32(src Tensor) (Fetch, error)
}

// FetchMax is the most elements a TokenFeed's FetchI32 copies.
const FetchMax = 16

// Fetch is a copy to the host queued by TokenFeed.FetchI32.
type Fetch interface {
	// Wait waits until the copy has run (not for the ops queued after
	// it) and returns the values.
	Wait() ([]int32, error)
	// Release gives the copy up without waiting for it.
	Release()
}

// FlowFeed is a backend that runs a flow's Euler steps on the device
// (cuda): the Fourier features of the state and the Euler update, with the
// step's time read from device memory, so that one captured graph serves
// every step and the state comes back once, at the end.
type FlowFeed interface {
	// Fourier writes the features of x [T, C] into dst [T, (C+1)·2H]: for
	// channel c of a row, sin(a_j)·√2 for j < H then cos(a_j)·√2, with
	// a_j = ((x·freqs[c][j])·2)·π (freqs [C, H]), each float product
	// rounded to float32 and the sine and cosine taken in double, then
	// rounded; then row *step of tf [steps, 2H] (step an I32 tensor of
	// one element; nil for row 0). The backend's sine and cosine may
	// differ from Go's in the last bit of a double.
	Fourier(dst, x, freqs, tf, step Tensor) error
	// EulerStep sets x += dt[*step]·v elementwise (the product rounded to
	// float32, then the sum), then *step += 1.
	EulerStep(x, v, dt, step Tensor) error
}

// Stopwatch is a backend that times the work it has queued without
// waiting for it (cuda): a stage's end is marked in the queue, and the
// host goes on queuing the next stage while the device finishes this one.
type Stopwatch interface {
	// Mark records a point in the queue, reached once the work queued
	// before it has run. Not during a capture.
	Mark() (Mark, error)
	// Elapsed waits until to is reached and returns the device's time
	// from from to to.
	Elapsed(from, to Mark) (time.Duration, error)
	// ReleaseMark frees m; a zero Mark is ignored.
	ReleaseMark(m Mark) error
}

// MemoryPeak is a backend that counts its device memory (cuda): the most
// bytes in use at once since the peak was last reset. A host backend has
// no device memory and does not implement it.
type MemoryPeak interface {
	// ResetPeak starts a new peak at the bytes in use now.
	ResetPeak()
	// PeakBytes is the most device memory, in bytes, in use at once since
	// ResetPeak (or since the backend started): weights, caches,
	// activations, workspaces and the allocator's cached free blocks, as
	// the budget counts them.
	PeakBytes() int64
}

// Mark is a point in a Stopwatch's queue; the zero Mark is none.
type Mark uint64

// DevicePos is a backend whose decode-step ops can read the step's token
// position from device memory, so that one captured graph serves every
// step (cuda). pos is an I32 tensor of one element (Alloc with
// tensor.I32), set with UploadI32.
type DevicePos interface {
	// UploadI32 copies int32 values into an I32 tensor.
	UploadI32(dst Tensor, src []int32) error
	// CopyRowsAt copies src's rows into dst from row *pos on.
	CopyRowsAt(dst, src, pos Tensor) error
	// AttentionAt is Attention with QPos0 = *pos and NKV = *pos + the
	// rows of q, bit for bit; o.NKV is the most keys it may see. The rows
	// of k and v below *pos are earlier steps': a backend may read them,
	// and pos, before the ops queued ahead of it have finished, so those
	// ops must write neither (they may write q and the rows from *pos on).
	AttentionAt(dst, q, k, v Tensor, o AttnOpts, pos Tensor) error
}

// ShardMLP is a backend that computes a share of a SwiGLU MLP straight
// from its full weights (a CPU engine's share of a split MLP, read in
// place from host memory): dst[M,H] = down[:, lo:hi] ·
// (silu(gate[lo:hi]·x) ⊙ (up[lo:hi]·x)) for x [M,K] (F32), gate and up
// [N,K] and down [H,N] (bf16 or f32), accumulating in float32. The
// partial sums of the other share are added by the caller.
type ShardMLP interface {
	MLPShare(dst, x, gate, up, down Tensor, lo, hi int) error
}

// ShardMatMul is a backend that computes a share of a matrix product
// straight from the full weights (a CPU engine's rows of a split LM head
// block, read in place from host memory): dst[M, hi−lo] = x[M,K] ·
// w[lo:hi]ᵀ for w [N,K] (bf16 or f32), accumulating in float32.
type ShardMatMul interface {
	MatMulShare(dst, x, w Tensor, lo, hi int) error
}
