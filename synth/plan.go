package synth

import (
	"fmt"

	"vlanode/safetensors"
)

// DefaultMaxShardBytes is the largest shard Write makes (tensor bytes),
// Hugging Face's default max_shard_size of "5GB".
const DefaultMaxShardBytes = 5_000_000_000

// Layout is the checkpoint of an architecture: its tensors in file order
// and the configuration that goes with them. It is computed without
// writing anything.
type Layout struct {
	Arch    Arch
	Tensors []Tensor
	spec    *spec
}

// NewLayout computes the layout of arch.
func NewLayout(arch Arch) (*Layout, error) {
	s, err := specFor(arch)
	if err != nil {
		return nil, err
	}
	l := &Layout{Arch: arch, spec: s}
	switch {
	case s.alpamayo != nil:
		l.Tensors = alpamayoTensors(s)
	case s.textOnly:
		l.Tensors = qwen3Tensors(s)
	default:
		l.Tensors = qwen3VLTensors("", s)
	}
	return l, nil
}

// Bytes is the total size of the tensor data.
func (l *Layout) Bytes() int64 {
	var n int64
	for i := range l.Tensors {
		n += l.Tensors[i].Bytes()
	}
	return n
}

// ModuleSize is the share of one module in a layout.
type ModuleSize struct {
	Module  Module
	Tensors int
	Bytes   int64
}

// Breakdown returns the size of each module present, in a fixed order.
func (l *Layout) Breakdown() []ModuleSize {
	by := map[Module]*ModuleSize{}
	for i := range l.Tensors {
		t := &l.Tensors[i]
		m := by[t.Module]
		if m == nil {
			m = &ModuleSize{Module: t.Module}
			by[t.Module] = m
		}
		m.Tensors++
		m.Bytes += t.Bytes()
	}
	var out []ModuleSize
	for _, m := range moduleOrder {
		if s := by[m]; s != nil {
			out = append(out, *s)
		}
	}
	return out
}

// shard is one safetensors file of a checkpoint: a run of the layout's
// tensors.
type shard struct {
	file       string
	first, end int // Tensors[first:end]
	bytes      int64
}

// shards splits the tensors, in order, into files of at most maxBytes of
// tensor data (a larger tensor gets a file of its own). One file is named
// model.safetensors; several are model-0000i-of-0000n.safetensors.
func (l *Layout) shards(maxBytes int64) []shard {
	var out []shard
	cur := shard{}
	for i := range l.Tensors {
		n := l.Tensors[i].Bytes()
		if cur.end > cur.first && cur.bytes+n > maxBytes {
			out = append(out, cur)
			cur = shard{first: i, end: i}
		}
		cur.end = i + 1
		cur.bytes += n
	}
	out = append(out, cur)
	if len(out) == 1 {
		out[0].file = safetensors.SingleFileName
		return out
	}
	for i := range out {
		out[i].file = fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(out))
	}
	return out
}
