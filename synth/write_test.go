package synth

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/configs"
	"vlanode/safetensors"
	"vlanode/tensor"
)

// writeTiny writes the tiny checkpoint into a new folder.
func writeTiny(t *testing.T, opts Options) (string, *Result) {
	t.Helper()
	l, err := NewLayout(AlpamayoR1Tiny)
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "tiny")
	res, err := Write(context.Background(), dir, l, opts)
	require.NoError(t, err)
	return dir, res
}

func fileHash(t *testing.T, path string) [32]byte {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	h := sha256.New()
	_, err = io.Copy(h, f)
	require.NoError(t, err)
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// TestWriteTiny writes the tiny checkpoint and reads it back: every
// tensor's name, dtype and shape, the fixed buffers, the statistics of the
// random ones, and the configs.
func TestWriteTiny(t *testing.T) {
	t.Parallel()
	var progress int64
	dir, res := writeTiny(t, Options{Seed: 7, Progress: func(n int64) { progress += n }})
	l, err := NewLayout(AlpamayoR1Tiny)
	require.NoError(t, err)
	assert.Equal(t, []string{"config.json", "tokenizer.json", "vlm/config.json", "vlm/tokenizer.json", "model.safetensors"}, res.Files)
	assert.Equal(t, l.Bytes(), res.TensorBytes)
	assert.Equal(t, l.Bytes(), progress)
	assert.Equal(t, len(l.Tensors), res.Tensors)

	ck, err := safetensors.Open(dir)
	require.NoError(t, err)
	defer ck.Close()
	require.Len(t, ck.Names(), len(l.Tensors))
	for _, want := range l.Tensors {
		in, err := ck.Expect(want.Name, tensor.BF16, want.Shape...)
		require.NoError(t, err)
		_ = in
	}
	assert.Equal(t, "pt", ck.Metadata()["format"])

	// Buffers hold the bf16 values of ALPAMAYO.md §6.
	freqs, err := ck.Tensor("action_in_proj.sinus.0.freqs")
	require.NoError(t, err)
	fv, err := freqs.F32()
	require.NoError(t, err)
	assert.Equal(t, []float32{1, 1.671875, 2.78125, 4.65625, 7.75, 12.9375, 21.5, 36, 60, 100}, fv)
	for name, want := range map[string]float32{"action_space.accel_std": 0.6796875, "action_space.curvature_mean": 0.0002689361572265625} {
		in, err := ck.Expect(name, tensor.BF16)
		require.NoError(t, err)
		v, err := in.F32()
		require.NoError(t, err)
		assert.Equal(t, []float32{want}, v, name)
	}

	// Random tensors have the intended statistics.
	for _, c := range []struct {
		name      string
		mean, std float64
	}{
		{"vlm.model.language_model.layers.0.mlp.gate_proj.weight", 0, 1 / math.Sqrt(128)},
		{"vlm.model.language_model.embed_tokens.weight", 0, 1},
		{"vlm.model.language_model.layers.1.input_layernorm.weight", 1, normStd},
		{"vlm.model.visual.blocks.0.attn.qkv.bias", 0, biasStd},
	} {
		in, err := ck.Tensor(c.name)
		require.NoError(t, err)
		v, err := in.F32()
		require.NoError(t, err)
		var sum, sq float64
		for _, x := range v {
			sum += float64(x)
		}
		mean := sum / float64(len(v))
		for _, x := range v {
			sq += (float64(x) - mean) * (float64(x) - mean)
		}
		std := math.Sqrt(sq / float64(len(v)))
		tol := 4 / math.Sqrt(float64(len(v)))
		assert.InDelta(t, c.mean, mean, c.std*tol+1e-9, "%s mean", c.name)
		assert.InDelta(t, c.std, std, c.std*(0.02+tol), "%s std", c.name)
	}

	// The config parses, its VLM folder is found, and the VLM's sizes
	// match the tensors.
	cfg, err := configs.LoadAlpamayoR1(dir)
	require.NoError(t, err)
	vlm, err := cfg.LocateVLM(dir, configs.VLMLocator{WorkDir: t.TempDir(), Getenv: func(string) string { return "" }})
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "vlm", "config.json"), vlm.Path)
	raw, err := cfg.VLMConfigJSON(vlm)
	require.NoError(t, err)
	var full struct {
		TextConfig struct {
			VocabSize  int `json:"vocab_size"`
			HiddenSize int `json:"hidden_size"`
		} `json:"text_config"`
		VisionConfig struct {
			Depth int `json:"depth"`
		} `json:"vision_config"`
	}
	require.NoError(t, json.Unmarshal(raw, &full))
	_, err = ck.Expect("vlm.model.language_model.embed_tokens.weight", tensor.BF16, full.TextConfig.VocabSize, full.TextConfig.HiddenSize)
	assert.NoError(t, err)
	assert.True(t, ck.Has("vlm.model.visual.blocks."+itoaTest(full.VisionConfig.Depth-1)+".norm1.weight"))
	assert.Equal(t, 4096, *cfg.MinPixels)
}

func itoaTest(i int) string { b, _ := json.Marshal(i); return string(b) }

// TestWriteDeterministic: the same seed gives the same bytes whatever the
// number of workers; another seed changes every random tensor but no
// buffer.
func TestWriteDeterministic(t *testing.T) {
	t.Parallel()
	a, _ := writeTiny(t, Options{Seed: 1, Workers: 2})
	b, _ := writeTiny(t, Options{Seed: 1, Workers: 1})
	c, _ := writeTiny(t, Options{Seed: 2})
	for _, f := range []string{"model.safetensors", "config.json", "tokenizer.json", "vlm/config.json"} {
		assert.Equal(t, fileHash(t, filepath.Join(a, f)), fileHash(t, filepath.Join(b, f)), f)
	}

	ca, err := safetensors.Open(a)
	require.NoError(t, err)
	defer ca.Close()
	cc, err := safetensors.Open(c)
	require.NoError(t, err)
	defer cc.Close()
	l, err := NewLayout(AlpamayoR1Tiny)
	require.NoError(t, err)
	for _, ts := range l.Tensors {
		x, err := ca.Tensor(ts.Name)
		require.NoError(t, err)
		y, err := cc.Tensor(ts.Name)
		require.NoError(t, err)
		if ts.Init.Kind == InitConst {
			assert.Equal(t, x.Data, y.Data, ts.Name)
		} else {
			assert.NotEqual(t, x.Data, y.Data, ts.Name)
		}
	}
}

// TestWriteSharded forces shards on the tiny layout: an index, every shard
// within the limit, and the checkpoint opens through the index.
func TestWriteSharded(t *testing.T) {
	t.Parallel()
	dir, res := writeTiny(t, Options{Seed: 3, MaxShardBytes: 30e6})
	// vision and the first layers | embedding | layers | LM head | expert, head
	assert.Contains(t, res.Files, "model-00005-of-00005.safetensors")
	assert.Contains(t, res.Files, safetensors.IndexFileName)
	ck, err := safetensors.Open(dir)
	require.NoError(t, err)
	defer ck.Close()
	assert.Len(t, ck.Files(), 5)
	assert.Equal(t, res.Tensors, len(ck.Names()))

	// Same bytes as unsharded.
	one, _ := writeTiny(t, Options{Seed: 3})
	c1, err := safetensors.Open(one)
	require.NoError(t, err)
	defer c1.Close()
	for _, name := range c1.Names() {
		x, _ := c1.Tensor(name)
		y, err := ck.Tensor(name)
		require.NoError(t, err)
		require.Equal(t, x.Data, y.Data, name)
	}
}

func TestWriteConfigOnly(t *testing.T) {
	l, err := NewLayout(AlpamayoR1_10B)
	require.NoError(t, err)
	dir := t.TempDir()
	res, err := Write(context.Background(), dir, l, Options{ConfigOnly: true, Overwrite: true})
	require.NoError(t, err)
	assert.Zero(t, res.Tensors)
	matches, _ := filepath.Glob(filepath.Join(dir, "*.safetensors*"))
	assert.Empty(t, matches)
	cfg, err := configs.LoadAlpamayoR1(dir)
	require.NoError(t, err)
	assert.Equal(t, 155697, cfg.VocabSize)
	assert.Equal(t, 155681, cfg.TrajTokenIDs.FutureStart)
	assert.Equal(t, "vlm", cfg.VLMNameOrPath)
}

func TestWriteRefusesNonEmpty(t *testing.T) {
	l, err := NewLayout(AlpamayoR1Tiny)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "keep.txt"), []byte("x"), 0o644))
	_, err = Write(context.Background(), dir, l, Options{ConfigOnly: true})
	assert.ErrorIs(t, err, ErrNotEmpty)
	_, err = Write(context.Background(), dir, l, Options{ConfigOnly: true, Overwrite: true})
	assert.NoError(t, err)
	assert.FileExists(t, filepath.Join(dir, "keep.txt"))

	file := filepath.Join(dir, "keep.txt")
	_, err = Write(context.Background(), file, l, Options{ConfigOnly: true, Overwrite: true})
	assert.ErrorContains(t, err, "not a folder")
}

// TestWriteCancelled: a cancelled write stops, removes the file it was
// writing and writes no index.
func TestWriteCancelled(t *testing.T) {
	t.Parallel()
	l, err := NewLayout(AlpamayoR1Tiny)
	require.NoError(t, err)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	_, err = Write(ctx, dir, l, Options{Overwrite: true, MaxShardBytes: 30e6, Progress: func(int64) {
		if n++; n == 100 { // in shard 3 of 5 (the VLM layers)
			cancel()
		}
	}})
	assert.ErrorIs(t, err, context.Canceled)
	assert.NoFileExists(t, filepath.Join(dir, safetensors.IndexFileName))
	// The shards left are complete; the one being written is gone.
	shards, _ := filepath.Glob(filepath.Join(dir, "model-*.safetensors"))
	assert.Len(t, shards, 2)
	assert.NoFileExists(t, filepath.Join(dir, "model-00003-of-00005.safetensors"))
	for _, s := range shards {
		f, err := safetensors.OpenFile(s)
		if assert.NoError(t, err, s) {
			f.Close()
		}
	}
}
