package synth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"

	"vlanode/safetensors"
)

// ErrNotEmpty is returned by Write for a non-empty folder without
// Options.Overwrite.
var ErrNotEmpty = errors.New("folder is not empty")

// Options control Write.
type Options struct {
	// Seed selects the random weights; the same seed gives the same files.
	Seed uint64
	// ConfigOnly writes the config and tokenizer files, no weights.
	ConfigOnly bool
	// Overwrite allows writing into a non-empty folder (replacing files of
	// the same names).
	Overwrite bool
	// MaxShardBytes bounds the tensor bytes of one safetensors file; 0
	// means DefaultMaxShardBytes.
	MaxShardBytes int64
	// Workers generate values in parallel; 0 means GOMAXPROCS.
	Workers int
	// Progress, if set, is called from Write's goroutine with the bytes of
	// each tensor once they are written.
	Progress func(n int64)
}

// Result describes what Write wrote.
type Result struct {
	// Files are the paths written, relative to the folder.
	Files []string
	// Tensors and TensorBytes count the weights written.
	Tensors     int
	TensorBytes int64
}

// smallMax is the largest tensor that uses the two ordinary buffers;
// larger ones (the embedding and the LM head) share a third.
const smallMax = 256 << 20

// Write writes the layout's checkpoint into dir (created if needed): the
// config files, then the weights streamed one tensor at a time (shards
// and model.safetensors.index.json when they exceed Options.MaxShardBytes),
// the index last. The next tensor is generated while one is written; at
// most two are in memory, in buffers that are reused. On failure or
// cancellation the file being written is removed and the index is not
// written.
func Write(ctx context.Context, dir string, l *Layout, opts Options) (*Result, error) {
	if err := prepareDir(dir, opts.Overwrite); err != nil {
		return nil, err
	}
	files, err := l.ConfigFiles()
	if err != nil {
		return nil, err
	}
	res := &Result{}
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, fmt.Errorf("synth: %w", err)
		}
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			return nil, fmt.Errorf("synth: %w", err)
		}
		res.Files = append(res.Files, f.Path)
	}
	if opts.ConfigOnly {
		return res, nil
	}
	if err := writeWeights(ctx, dir, l, opts, res); err != nil {
		return nil, err
	}
	return res, nil
}

// prepareDir creates dir, or checks that it is empty unless overwrite.
func prepareDir(dir string, overwrite bool) error {
	f, err := os.Open(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("synth: %w", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("synth: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.IsDir() {
		return fmt.Errorf("synth: %s is not a folder", dir)
	}
	if _, err := f.Readdirnames(1); err == nil && !overwrite {
		return fmt.Errorf("synth: %s: %w (overwrite to replace its files)", dir, ErrNotEmpty)
	} else if err != nil && err != io.EOF {
		return fmt.Errorf("synth: reading %s: %w", dir, err)
	}
	return nil
}

// buffers recycles the memory of the tensors in flight: two buffers for
// ordinary tensors (one being written while the next is filled) and one for
// tensors larger than smallMax, so memory stays near the largest tensor
// plus two ordinary ones whatever the order of the tensors.
type buffers struct {
	small chan []byte // two buffers, each at most smallMax
	large chan []byte // one buffer, larger than smallMax once used
}

func newBuffers() *buffers {
	b := &buffers{small: make(chan []byte, 2), large: make(chan []byte, 1)}
	b.small <- nil
	b.small <- nil
	b.large <- nil
	return b
}

// get returns a buffer of n bytes, waiting until one of its kind is free.
func (b *buffers) get(ctx context.Context, n int) ([]byte, error) {
	pool := b.small
	if n > smallMax {
		pool = b.large
	}
	var buf []byte
	select {
	case buf = <-pool:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	switch {
	case cap(buf) >= n:
		return buf[:n], nil
	case n > smallMax:
		return make([]byte, n), nil
	}
	return make([]byte, n, max(n, min(2*cap(buf), smallMax))), nil
}

// put returns a buffer from get once its data is written.
func (b *buffers) put(buf []byte) {
	if cap(buf) > smallMax {
		b.large <- buf
	} else {
		b.small <- buf
	}
}

// errStopped reports that the generator ended early; its own error says why.
var errStopped = errors.New("generation stopped")

// writeWeights streams the tensors into their shards while a goroutine
// generates the next one.
func writeWeights(ctx context.Context, dir string, l *Layout, opts Options, res *Result) error {
	maxShard := opts.MaxShardBytes
	if maxShard <= 0 {
		maxShard = DefaultMaxShardBytes
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()

	ready := make(chan []byte) // unbuffered: one tensor written, the next filled
	bufs := newBuffers()
	genErr := make(chan error, 1)
	go func() { genErr <- generate(gctx, l, opts.Seed, workers, bufs, ready) }()

	metadata := map[string]string{"format": "pt", "synth": fmt.Sprintf("%s seed=%d", l.Arch, opts.Seed)}
	shards := l.shards(maxShard)
	weightMap := map[string]string{}
	for _, sh := range shards {
		if err := writeShard(gctx, dir, l, sh, metadata, ready, bufs, opts.Progress); err != nil {
			cancel()
			gerr := <-genErr
			switch {
			case ctx.Err() != nil && !errors.Is(err, ctx.Err()):
				return fmt.Errorf("%w: %w", err, ctx.Err())
			case gerr != nil && !errors.Is(gerr, context.Canceled):
				return fmt.Errorf("%w: %w", err, gerr)
			}
			return err
		}
		res.Files = append(res.Files, sh.file)
		for _, t := range l.Tensors[sh.first:sh.end] {
			weightMap[t.Name] = sh.file
		}
		res.Tensors += sh.end - sh.first
		res.TensorBytes += sh.bytes
	}
	if err := <-genErr; err != nil {
		return err
	}
	if len(shards) > 1 {
		if err := safetensors.WriteIndex(dir, weightMap, res.TensorBytes); err != nil {
			return err
		}
		res.Files = append(res.Files, safetensors.IndexFileName)
	}
	return nil
}

// generate fills the layout's tensors in order and sends them to ready.
func generate(ctx context.Context, l *Layout, seed uint64, workers int, bufs *buffers, ready chan<- []byte) error {
	defer close(ready)
	var ts tables
	for i := range l.Tensors {
		t := &l.Tensors[i]
		buf, err := bufs.get(ctx, int(t.Bytes()))
		if err != nil {
			return err
		}
		if err := fill(buf, t, seed, &ts, workers); err != nil {
			return err
		}
		select {
		case ready <- buf:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// writeShard writes one safetensors file from the generated stream.
func writeShard(ctx context.Context, dir string, l *Layout, sh shard, metadata map[string]string,
	ready <-chan []byte, bufs *buffers, progress func(int64)) error {
	tensors := l.Tensors[sh.first:sh.end]
	headers := make([]safetensors.Header, len(tensors))
	for i, t := range tensors {
		headers[i] = safetensors.Header{Name: t.Name, DType: t.DType, Shape: t.Shape}
	}
	path := filepath.Join(dir, sh.file)
	w, err := safetensors.Create(path, headers, metadata)
	if err != nil {
		return err
	}
	for _, t := range tensors {
		var data []byte
		var ok bool
		select {
		case data, ok = <-ready:
			if !ok {
				err = errStopped
			}
		case <-ctx.Done():
			err = ctx.Err()
		}
		if err == nil {
			err = w.Write(t.Name, data)
			bufs.put(data)
		}
		if err != nil {
			break
		}
		if progress != nil {
			progress(int64(len(data)))
		}
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("synth: writing %s (removed): %w", path, err)
	}
	return nil
}
