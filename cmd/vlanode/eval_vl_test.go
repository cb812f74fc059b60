package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/safetensors"
	"vlanode/tensor"
)

// vlCase is a tiny Qwen3-VL checkpoint made by transformers, with its
// inputs (three images) and expected logits (scripts/reference).
const vlCase = "../../testdata/reference/qwen3vl-d3-tied"

// vlInputs returns the reference inputs of vlCase as tensors to edit.
func vlInputs(t *testing.T) map[string]safetensors.Tensor {
	t.Helper()
	f, err := safetensors.OpenFile(filepath.Join(vlCase, "inputs.safetensors"))
	require.NoError(t, err)
	defer f.Close()
	out := map[string]safetensors.Tensor{}
	for _, name := range f.Names() {
		info, err := f.Tensor(name)
		require.NoError(t, err)
		out[name] = safetensors.Tensor{Name: name, DType: info.DType, Shape: info.Shape, Data: append([]byte(nil), info.Data...)}
	}
	require.Len(t, out, 4)
	return out
}

func writeVLInputs(t *testing.T, ts map[string]safetensors.Tensor) string {
	t.Helper()
	var list []safetensors.Tensor
	for _, x := range ts {
		list = append(list, x)
	}
	return writeInputs(t, list...)
}

func TestEvalQwen3VL(t *testing.T) {
	out := filepath.Join(t.TempDir(), "logits.safetensors")
	code, stdout, stderr := runCLI("eval", "--model", vlCase, "--inputs", filepath.Join(vlCase, "inputs.safetensors"),
		"--out", out, "--expect", filepath.Join(vlCase, "expected.safetensors"))
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "qwen3_vl, 3 layers")
	assert.Contains(t, stdout, "wrote logits [37, 320]")
	assert.Contains(t, stdout, "MATCH")
	f, err := safetensors.OpenFile(out)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.Expect("logits", tensor.F32, 37, 320)
	assert.NoError(t, err)

	// mm_token_type_ids is optional: derived from image_token_id.
	ts := vlInputs(t)
	delete(ts, "mm_token_type_ids")
	code, stdout, stderr = runCLI("eval", "--model", vlCase, "--inputs", writeVLInputs(t, ts),
		"--out", out, "--expect", filepath.Join(vlCase, "expected.safetensors"))
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "MATCH")
}

func TestEvalQwen3VLBadInputs(t *testing.T) {
	i64 := func(name string, shape []int, v ...int64) safetensors.Tensor {
		return safetensors.I64Tensor(name, shape, v)
	}
	cases := []struct {
		name string
		edit func(ts map[string]safetensors.Tensor)
		want string
	}{
		{"pixels without grid", func(ts map[string]safetensors.Tensor) { delete(ts, "image_grid_thw") }, "come together"},
		{"grid and pixels disagree", func(ts map[string]safetensors.Tensor) {
			ts["image_grid_thw"] = i64("image_grid_thw", []int{3, 3}, 1, 4, 6, 1, 6, 4, 1, 2, 4)
		}, "pixel_values has 52 patches, image_grid_thw's t·h·w add up to 56"},
		{"grid of two numbers", func(ts map[string]safetensors.Tensor) {
			ts["image_grid_thw"] = i64("image_grid_thw", []int{2, 2}, 4, 6, 6, 4)
		}, "want int64 [images, 3]"},
		{"grid not mergeable", func(ts map[string]safetensors.Tensor) {
			// the same 52 patches as two images: 24 + 28 (a 4×7 grid is not mergeable)
			ts["image_grid_thw"] = i64("image_grid_thw", []int{2, 3}, 1, 4, 6, 1, 4, 7)
		}, "not divisible by spatial_merge_size 2"},
		{"image tokens do not match the grids", func(ts map[string]safetensors.Tensor) {
			// 24 + 28 patches again, the second image as 2×14: 7 tokens where the prompt has 6
			ts["image_grid_thw"] = i64("image_grid_thw", []int{2, 3}, 1, 4, 6, 1, 2, 14)
		}, "image 1 has 6 image tokens"},
		{"token types of another length", func(ts map[string]safetensors.Tensor) {
			ts["mm_token_type_ids"] = i64("mm_token_type_ids", []int{1, 2}, 0, 0)
		}, "want [1, 37] like input_ids"},
		{"token types off the image tokens", func(ts map[string]safetensors.Tensor) {
			v := make([]int64, 37)
			ts["mm_token_type_ids"] = i64("mm_token_type_ids", []int{1, 37}, v...)
		}, "must have type 1"},
		{"wrong patch width", func(ts map[string]safetensors.Tensor) {
			ts["pixel_values"] = safetensors.F32Tensor("pixel_values", []int{52, 1535}, make([]float32, 52*1535))
		}, "not rows of 1536"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ts := vlInputs(t)
			c.edit(ts)
			code, _, stderr := runCLI("eval", "--model", vlCase, "--inputs", writeVLInputs(t, ts), "--out", filepath.Join(t.TempDir(), "o"))
			assert.Equal(t, 1, code)
			assert.Contains(t, stderr, c.want)
		})
	}
}

func TestEvalQwen3TakesNoImages(t *testing.T) {
	dir := writeModel(t, nil)
	ts := vlInputs(t)
	ts["input_ids"] = safetensors.I64Tensor("input_ids", []int{1, 3}, []int64{1, 2, 3})
	delete(ts, "mm_token_type_ids")
	code, _, stderr := runCLI("eval", "--model", dir, "--inputs", writeVLInputs(t, ts), "--out", filepath.Join(t.TempDir(), "o"))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "model_type qwen3 takes no images")
	// generate runs text models only
	code, _, stderr = runCLI("generate", "--model", vlCase, "--inputs", goodInputs(t))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, `model_type "qwen3_vl": this command runs [qwen3]`)
}
