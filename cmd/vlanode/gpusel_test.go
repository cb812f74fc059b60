package main

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestResolveGPU: --gpu names one GPU for CUDA and NVML alike. With
// CUDA_VISIBLE_DEVICES=2,0 CUDA's ordinal 0 is the machine's third GPU:
// the UUID, not the index, is what NVML is asked for.
func TestResolveGPU(t *testing.T) {
	t.Setenv("CUDA_VISIBLE_DEVICES", "2,0")
	uuids := []string{"GPU-cccccccc-0000-0000-0000-000000000003", "GPU-aaaaaaaa-0000-0000-0000-000000000001"}
	noCUDA := errors.New("no driver")
	for _, c := range []struct {
		sel     string
		uuids   []string
		cudaErr error
		want    gpuSelection
		err     string
	}{
		{sel: "-1", want: gpuSelection{none: true}},
		{sel: "none", want: gpuSelection{none: true}},
		{sel: "0", uuids: uuids, want: gpuSelection{ordinal: 0, uuid: uuids[0]}},
		{sel: "1", uuids: uuids, want: gpuSelection{ordinal: 1, uuid: uuids[1]}},
		{sel: "GPU-AAAAAAAA-0000-0000-0000-000000000001", uuids: uuids, want: gpuSelection{ordinal: 1, uuid: uuids[1]}},
		{sel: "2", uuids: uuids, err: `--gpu 2: CUDA sees 2 GPU(s) (CUDA_VISIBLE_DEVICES="2,0")`},
		{sel: "GPU-bbbbbbbb-0000-0000-0000-000000000002", uuids: uuids, err: "not among the GPUs CUDA sees"},
		{sel: "0", cudaErr: noCUDA, want: gpuSelection{ordinal: 0}},
		{sel: "GPU-bbbbbbbb-0000-0000-0000-000000000002", cudaErr: noCUDA, want: gpuSelection{uuid: "GPU-bbbbbbbb-0000-0000-0000-000000000002"}},
		{sel: "-2", err: "want a CUDA ordinal"},
		{sel: "first", err: "want a CUDA ordinal (0, 1, …), a GPU UUID"},
	} {
		got, err := resolveGPU(c.sel, c.uuids, c.cudaErr)
		if c.err != "" {
			assert.ErrorContains(t, err, c.err, c.sel)
			continue
		}
		require.NoError(t, err, c.sel)
		assert.Equal(t, c.want, got, c.sel)
	}
}
