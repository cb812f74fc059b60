package residency

import (
	"testing"
	"vlanode/placement"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestInterleave(t *testing.T) {
	for _, tc := range []struct {
		n, k int
		want []int
	}{
		{36, 0, []int{}},
		{36, 1, []int{0}},
		{36, 2, []int{0, 17}},
		{36, 5, []int{0, 7, 14, 21, 28}}, // the paper's ⌊i·35/k⌋
		{36, 7, []int{0, 5, 10, 15, 20, 25, 30}},
		{36, 36, nil}, // all
		{36, 40, nil},
		{1, 1, []int{0}},
		{2, 1, []int{0}},
		{4, 3, []int{0, 1, 2}},
	} {
		got := interleave(tc.n, tc.k)
		if tc.want == nil {
			require.Len(t, got, tc.n)
			for i, v := range got {
				assert.Equal(t, i, v)
			}
			continue
		}
		assert.Equal(t, tc.want, got, "n=%d k=%d", tc.n, tc.k)
	}
	// Every k < n: k distinct increasing indices, the first included, the
	// last excluded, gaps of at least ⌊(n−1)/k⌋.
	for _, n := range []int{2, 3, 27, 36} {
		for k := 1; k < n; k++ {
			got := interleave(n, k)
			require.Len(t, got, k)
			assert.Equal(t, 0, got[0])
			assert.NotContains(t, got, n-1)
			for i := 1; i < k; i++ {
				assert.GreaterOrEqual(t, got[i]-got[i-1], (n-1)/k, "n=%d k=%d", n, k)
			}
		}
	}
}

func TestMaxRun(t *testing.T) {
	assert.Equal(t, 0, maxRun(nil))
	assert.Equal(t, 1, maxRun([]int{0, 2, 4}))
	assert.Equal(t, 3, maxRun([]int{0, 1, 2, 5, 6}))
	// Eq. 8 keeps runs short while k ≤ (n−1)/2: none longer than 1.
	for k := 1; k <= 17; k++ {
		assert.Equal(t, 1, maxRun(interleave(36, k)), "k=%d", k)
	}
	assert.Equal(t, 4, maxRun(interleave(36, 28)))
	// Past (n−1)/2 the runs are as even as they can be: ⌈k/(n−k)⌉.
	for _, n := range []int{12, 27, 36} {
		for k := 1; k < n; k++ {
			want := (k + n - k - 1) / (n - k)
			assert.Equal(t, want, maxRun(interleave(n, k)), "n=%d k=%d", n, k)
		}
	}
	assert.Equal(t, []int{0, 1, 2, 4, 5, 6, 8, 9, 10}, interleave(12, 9)) // Eq. 8 would run 0…4
	assert.Equal(t, 17, maxRun(interleave(36, 34)))                       // Eq. 8: 34
}

// TestConsecutiveLimit: in a DMA-intensive stack whose copy hides only two
// computes (⌊C_DMA/C_EXE⌋ = 2), the middle residents Eq. 8 can keep in
// runs of at most 2 save R·C_DMA; beyond, R·(C_DMA − C_EXE).
func TestConsecutiveLimit(t *testing.T) {
	const n, dma, exe, passes = 12, 5.0, 2.0, 3
	var items []item
	for i := range n {
		items = append(items, item{Unit: placement.Unit{ID: placement.ID{Module: placement.Expert, Index: i}, Bytes: 1e6,
			Work: []placement.Work{{Stage: placement.StageDiffusion, Passes: passes, ExeMs: exe}}}, dma: dma})
	}
	l := newLayout(items)
	marg := l.marginals(l.modules[0])
	require.Len(t, marg, n)
	assert.Equal(t, passes*dma, marg[0], "the first")
	for k := 2; k < n; k++ {
		want := passes * dma
		if maxRun(interleave(n, k)) > 2 {
			want = passes * (dma - exe)
		}
		assert.Equal(t, want, marg[k-1], "k=%d", k)
	}
	assert.Equal(t, passes*(dma-exe), marg[n-1], "the last")
	assert.Equal(t, passes*dma, marg[7], "8 of 12: runs of 2")
	assert.Equal(t, passes*(dma-exe), marg[8], "9 of 12: runs of 3")
}
