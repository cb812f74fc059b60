package safetensors

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/tensor"
)

// writeSharded writes a two-shard checkpoint into dir and its index.
func writeSharded(t *testing.T, dir string) {
	t.Helper()
	s1 := []Tensor{F32Tensor("model.a", []int{2}, []float32{1, 2}), F32Tensor("model.b", nil, []float32{3})}
	s2 := []Tensor{I64Tensor("model.c", []int{1}, []int64{4})}
	require.NoError(t, WriteFile(filepath.Join(dir, "model-00001-of-00002.safetensors"), s1, map[string]string{"format": "pt", "shard": "1"}))
	require.NoError(t, WriteFile(filepath.Join(dir, "model-00002-of-00002.safetensors"), s2, map[string]string{"format": "pt", "shard": "2"}))
	require.NoError(t, WriteIndex(dir, map[string]string{
		"model.a": "model-00001-of-00002.safetensors",
		"model.b": "model-00001-of-00002.safetensors",
		"model.c": "model-00002-of-00002.safetensors",
	}, 20))
}

func TestOpenSharded(t *testing.T) {
	dir := t.TempDir()
	writeSharded(t, dir)
	c := openDir(t, dir)
	assert.Equal(t, []string{"model.a", "model.b", "model.c"}, c.Names())
	assert.Equal(t, []string{
		filepath.Join(dir, "model-00001-of-00002.safetensors"),
		filepath.Join(dir, "model-00002-of-00002.safetensors"),
	}, c.Files())
	assert.Equal(t, map[string]string{"format": "pt", "shard": "1"}, c.Metadata(), "first shard wins")

	a, err := c.Tensor("model.a")
	require.NoError(t, err)
	v, err := a.F32()
	require.NoError(t, err)
	assert.Equal(t, []float32{1, 2}, v)
	assert.Equal(t, filepath.Join(dir, "model-00001-of-00002.safetensors"), a.File)

	cc, err := c.Expect("model.c", tensor.I64, 1)
	require.NoError(t, err)
	iv, err := cc.I64()
	require.NoError(t, err)
	assert.Equal(t, []int64{4}, iv)
	assert.Equal(t, filepath.Join(dir, "model-00002-of-00002.safetensors"), cc.File)

	assert.True(t, c.Has("model.b"))
	assert.False(t, c.Has("model.d"))
	_, err = c.Tensor("model.d")
	require.ErrorIs(t, err, ErrNotFound)
	assert.EqualError(t, err, `tensor "model.d" not found in `+dir)
}

func TestOpenShardErrorsMatch(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, WriteIndex(dir, map[string]string{"w": "gone.safetensors"}, 0))
	_, err := Open(dir)
	assert.ErrorIs(t, err, fs.ErrNotExist)

	dir = t.TempDir()
	require.NoError(t, WriteFile(filepath.Join(dir, "s.safetensors"), nil, nil))
	require.NoError(t, WriteIndex(dir, map[string]string{"w": "s.safetensors"}, 0))
	_, err = Open(dir)
	assert.ErrorIs(t, err, ErrNotFound)
}

func TestOpenIndexIgnoresUnmappedTensors(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, WriteFile(filepath.Join(dir, "s.safetensors"), []Tensor{
		F32Tensor("a", nil, []float32{1}), F32Tensor("extra", nil, []float32{2}),
	}, nil))
	require.NoError(t, WriteIndex(dir, map[string]string{"a": "s.safetensors"}, 4))
	c := openDir(t, dir)
	assert.Equal(t, []string{"a"}, c.Names())
	assert.False(t, c.Has("extra"))
}

func TestWriteIndexFormat(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, WriteIndex(dir, map[string]string{"b": "s2", "a": "s1"}, 123))
	b, err := os.ReadFile(filepath.Join(dir, IndexFileName))
	require.NoError(t, err)
	assert.JSONEq(t, `{"metadata":{"total_size":123},"weight_map":{"a":"s1","b":"s2"}}`, string(b))

	err = WriteIndex(dir, map[string]string{"a": "../x.safetensors"}, 0)
	assert.ErrorContains(t, err, `shard "../x.safetensors" of tensor "a" is not a plain file name`)
}

func TestOpenSingle(t *testing.T) {
	one := []Tensor{F32Tensor("w", []int{1}, []float32{5})}
	for _, tc := range []struct {
		name  string
		files []string // written with the tensors above
		open  string   // relative to the dir; "" opens the dir
		want  string   // the file the tensor comes from
	}{
		{"model.safetensors", []string{"model.safetensors"}, "", "model.safetensors"},
		{"model.safetensors beside others", []string{"model.safetensors", "other.safetensors"}, "", "model.safetensors"},
		{"the one *.safetensors", []string{"weights.safetensors"}, "", "weights.safetensors"},
		{"a file path", []string{"a.safetensors", "b.safetensors"}, "b.safetensors", "b.safetensors"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range tc.files {
				require.NoError(t, WriteFile(filepath.Join(dir, f), one, nil))
			}
			c := openDir(t, filepath.Join(dir, tc.open))
			w, err := c.Tensor("w")
			require.NoError(t, err)
			assert.Equal(t, filepath.Join(dir, tc.want), w.File)
			assert.Equal(t, []string{"w"}, c.Names())
		})
	}
}

func TestOpenErrors(t *testing.T) {
	one := []Tensor{F32Tensor("w", []int{1}, []float32{5})}
	shard := func(t *testing.T, dir, name string, tensors ...Tensor) {
		require.NoError(t, WriteFile(filepath.Join(dir, name), tensors, nil))
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  []string // substrings of the error; "DIR" stands for the dir
	}{
		{"empty dir", func(t *testing.T, dir string) {},
			[]string{"no model.safetensors or model.safetensors.index.json in DIR"}},
		{"two files, no index", func(t *testing.T, dir string) {
			shard(t, dir, "a.safetensors", one...)
			shard(t, dir, "b.safetensors", one...)
		}, []string{"no model.safetensors or model.safetensors.index.json in DIR",
			"2 other .safetensors files (a.safetensors, b.safetensors) without an index"}},
		{"missing dir", func(t *testing.T, dir string) { require.NoError(t, os.Remove(dir)) },
			[]string{"DIR", "no such file or directory"}},
		{"missing shard", func(t *testing.T, dir string) {
			shard(t, dir, "s1.safetensors", one...)
			require.NoError(t, WriteIndex(dir, map[string]string{"w": "s1.safetensors", "x": "s2.safetensors", "y": "s2.safetensors"}, 0))
		}, []string{`DIR/model.safetensors.index.json: shard "s2.safetensors", named for tensor "x", is missing`}},
		{"tensor missing from its shard", func(t *testing.T, dir string) {
			shard(t, dir, "s1.safetensors", one...)
			require.NoError(t, WriteIndex(dir, map[string]string{"w": "s1.safetensors", "v": "s1.safetensors"}, 0))
		}, []string{`DIR/model.safetensors.index.json: tensor "v" is mapped to shard "s1.safetensors", which lacks it`}},
		{"corrupt shard", func(t *testing.T, dir string) {
			writeHeader(t, dir, "s1.safetensors", `{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, nil)
			require.NoError(t, WriteIndex(dir, map[string]string{"w": "s1.safetensors"}, 0))
		}, []string{`shard "s1.safetensors" of DIR/model.safetensors.index.json`, "truncated"}},
		{"shard outside dir", func(t *testing.T, dir string) {
			writeBytes(t, filepath.Join(dir, IndexFileName), []byte(`{"weight_map":{"w":"../s.safetensors"}}`))
		}, []string{`shard "../s.safetensors" of tensor "w" is not a file name inside DIR`}},
		{"index not JSON", func(t *testing.T, dir string) {
			writeBytes(t, filepath.Join(dir, IndexFileName), []byte(`{`))
		}, []string{"DIR/model.safetensors.index.json: invalid JSON"}},
		{"index without weight_map", func(t *testing.T, dir string) {
			writeBytes(t, filepath.Join(dir, IndexFileName), []byte(`{"metadata":{}}`))
		}, []string{"DIR/model.safetensors.index.json: no weight_map"}},
		{"empty shard name", func(t *testing.T, dir string) {
			writeBytes(t, filepath.Join(dir, IndexFileName), []byte(`{"weight_map":{"w":""}}`))
		}, []string{`tensor "w" has an empty shard name`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			_, err := Open(dir)
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), strings.ReplaceAll(w, "DIR", dir))
			}
		})
	}
}
