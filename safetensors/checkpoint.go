package safetensors

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"vlanode/tensor"
)

// File names of the Hugging Face checkpoint layout.
const (
	// SingleFileName is the weights file of an unsharded checkpoint.
	SingleFileName = "model.safetensors"
	// IndexFileName maps tensor names to shard files in a sharded checkpoint.
	IndexFileName = "model.safetensors.index.json"
)

// Checkpoint is a Hugging Face checkpoint: one safetensors file, or several
// shards tied together by model.safetensors.index.json. It offers the lookup
// API of File across all shards; tensor data are slices of the shards'
// read-only mappings and are invalid after Close.
type Checkpoint struct {
	dir    string
	files  []*File          // in the order of their paths
	byName map[string]*File // tensor name -> the file that holds it
}

// Open opens the checkpoint in dir. If dir holds model.safetensors.index.json
// every shard its weight_map names is opened, and every tensor it names must
// be in its shard; otherwise dir/model.safetensors is opened, or else the one
// *.safetensors file in dir. dir may also be the path of a single
// safetensors file.
func Open(dir string) (*Checkpoint, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("safetensors: open checkpoint: %w", err)
	}
	if st.Mode().IsRegular() {
		return openSingle(dir, dir)
	}
	idx := filepath.Join(dir, IndexFileName)
	switch _, err := os.Stat(idx); {
	case err == nil:
		return openIndexed(dir, idx)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("safetensors: open checkpoint: %w", err)
	}
	single := filepath.Join(dir, SingleFileName)
	switch _, err := os.Stat(single); {
	case err == nil:
		return openSingle(dir, single)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("safetensors: open checkpoint: %w", err)
	}
	matches, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil {
		return nil, fmt.Errorf("safetensors: open checkpoint %s: %w", dir, err)
	}
	if len(matches) == 1 {
		return openSingle(dir, matches[0])
	}
	msg := fmt.Sprintf("safetensors: no %s or %s in %s", SingleFileName, IndexFileName, dir)
	if len(matches) > 1 {
		for i, m := range matches {
			matches[i] = filepath.Base(m)
		}
		msg += fmt.Sprintf(", and %d other .safetensors files (%s) without an index",
			len(matches), strings.Join(matches, ", "))
	}
	return nil, errors.New(msg)
}

// openSingle opens a checkpoint of one file.
func openSingle(dir, path string) (*Checkpoint, error) {
	f, err := OpenFile(path)
	if err != nil {
		return nil, err
	}
	c := &Checkpoint{dir: dir, files: []*File{f}, byName: make(map[string]*File, len(f.hdr.tensors))}
	for name := range f.hdr.tensors {
		c.byName[name] = f
	}
	return c, nil
}

// openIndexed opens every shard named by the index at idx.
func openIndexed(dir, idx string) (*Checkpoint, error) {
	weightMap, err := readIndex(idx)
	if err != nil {
		return nil, err
	}
	// The first tensor (by name) of each shard, to name in errors.
	shards := map[string]string{}
	for name, shard := range weightMap {
		if first, ok := shards[shard]; !ok || name < first {
			shards[shard] = name
		}
	}
	shardNames := make([]string, 0, len(shards))
	for s := range shards {
		shardNames = append(shardNames, s)
	}
	sort.Strings(shardNames)

	c := &Checkpoint{dir: dir, byName: make(map[string]*File, len(weightMap))}
	opened := map[string]*File{}
	for _, shard := range shardNames {
		if !filepath.IsLocal(shard) {
			c.Close()
			return nil, fmt.Errorf("safetensors %s: shard %q of tensor %q is not a file name inside %s",
				idx, shard, shards[shard], dir)
		}
		path := filepath.Join(dir, shard)
		f, err := OpenFile(path)
		if err != nil {
			c.Close()
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("safetensors %s: shard %q, named for tensor %q, is missing: %w",
					idx, shard, shards[shard], err)
			}
			return nil, fmt.Errorf("shard %q of %s: %w", shard, idx, err)
		}
		c.files = append(c.files, f)
		opened[shard] = f
	}
	for name, shard := range weightMap {
		f := opened[shard]
		if !f.Has(name) {
			c.Close()
			return nil, fmt.Errorf("safetensors %s: tensor %q is mapped to shard %q, which lacks it: %w",
				idx, name, shard, ErrNotFound)
		}
		c.byName[name] = f
	}
	return c, nil
}

// Dir is the checkpoint's directory (or file) as given to Open.
func (c *Checkpoint) Dir() string { return c.dir }

// Files returns the paths of the checkpoint's files, sorted.
func (c *Checkpoint) Files() []string {
	out := make([]string, len(c.files))
	for i, f := range c.files {
		out[i] = f.path
	}
	return out
}

// Close unmaps every file; all Info.Data obtained from the checkpoint become
// invalid. It returns the first error.
func (c *Checkpoint) Close() error {
	var first error
	for _, f := range c.files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Tensor returns the named tensor. A missing tensor gives an error that
// wraps ErrNotFound.
func (c *Checkpoint) Tensor(name string) (Info, error) {
	f, ok := c.byName[name]
	if !ok {
		return Info{}, fmt.Errorf("tensor %q %w in %s", name, ErrNotFound, c.dir)
	}
	return f.Tensor(name)
}

// Has reports whether the checkpoint holds the named tensor.
func (c *Checkpoint) Has(name string) bool {
	_, ok := c.byName[name]
	return ok
}

// Names returns the names of all tensors, sorted. With an index these are
// the tensors of its weight_map.
func (c *Checkpoint) Names() []string {
	names := make([]string, 0, len(c.byName))
	for n := range c.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Metadata returns the __metadata__ of the checkpoint's files merged; where
// two shards disagree on a key the first file (in path order) wins.
func (c *Checkpoint) Metadata() map[string]string {
	out := map[string]string{}
	for i := len(c.files) - 1; i >= 0; i-- {
		for k, v := range c.files[i].hdr.metadata {
			out[k] = v
		}
	}
	return out
}

// Expect returns the named tensor after checking its dtype and shape. A dt
// of tensor.Invalid accepts any floating-point dtype. The shape is always
// checked: no shape arguments means a scalar, and -1 matches any size of its
// dimension. A mismatch gives an error that wraps ErrMismatch, such as
// `tensor "w" in DIR/model.safetensors: shape [4 8], want [4 16]`.
func (c *Checkpoint) Expect(name string, dt tensor.DType, shape ...int) (Info, error) {
	return expect(c, name, dt, shape)
}
