package bf16z

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/tensor"
	"vlanode/weights"
)

// subRect is rows × cols of a rowsTotal × colsTotal matrix of esize-byte
// elements at data, packed (pitch = the rectangle's row).
func subRect(data []byte, colsTotal, esize int, rows, cols [2]int) []byte {
	var out []byte
	for r := rows[0]; r < rows[1]; r++ {
		out = append(out, data[(r*colsTotal+cols[0])*esize:(r*colsTotal+cols[1])*esize]...)
	}
	return out
}

// TestPlan decodes row suffixes and column ranges of tensors elsewhere,
// as a sharder's share, and compares them with the raw tensor's.
func TestPlan(t *testing.T) {
	b := blob(t, "u", 5, []spec{
		{"down", tensor.BF16, []int{2000, 1000}, normal(0, 0.03)},
		{"q", tensor.BF16, []int{100, 4096}, normal(0, 0.02)},
		{"bias", tensor.F32, []int{100, 3}, randomBytes},
	})
	u, err := Encode(b, Options{TileCols: func(e weights.Entry) int {
		if e.Name == "down" {
			return 96
		}
		return 0
	}})
	require.NoError(t, err)
	down, _ := u.Tensor("down")
	require.Equal(t, 96, down.TileCols)
	require.Equal(t, 682, down.TileRows)
	for _, tc := range []struct {
		name       string
		tensor     string
		rows, cols [2]int
	}{
		{"down column suffix", "down", [2]int{0, 2000}, [2]int{192, 1000}},
		{"down column range", "down", [2]int{0, 2000}, [2]int{96, 480}},
		{"down row and column suffix", "down", [2]int{682, 2000}, [2]int{960, 1000}},
		{"q row suffix", "q", [2]int{48, 100}, [2]int{0, 4096}},
		{"q one tile", "q", [2]int{16, 32}, [2]int{0, 4096}},
		{"raw f32 rows", "bias", [2]int{0, 100}, [2]int{0, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tt, err := u.Tensor(tc.tensor)
			require.NoError(t, err)
			e := u.Entries[tt.Entry]
			want := subRect(b.Bytes(e), tt.Cols, tt.ESize, tc.rows, tc.cols)
			pitch := int64(tc.cols[1]-tc.cols[0]) * int64(tt.ESize)
			jobs, err := u.Plan(tc.tensor, tc.rows, tc.cols, 512, pitch)
			require.NoError(t, err)
			dst := make([]byte, 512+len(want))
			require.NoError(t, u.DecodeJobs(dst, jobs, 2))
			assert.True(t, bytes.Equal(want, dst[512:]))
			assert.Equal(t, make([]byte, 512), dst[:512], "nothing written before the rectangle")
			// The same plan as a job table round-trips.
			tab, err := MarshalJobs(jobs)
			require.NoError(t, err)
			for i := range jobs {
				assert.Equal(t, jobs[i], getJob(tab[i*JobBytes:]))
			}
		})
	}
	for _, bad := range []struct {
		rows, cols [2]int
	}{
		{[2]int{50, 100}, [2]int{0, 4096}}, // 50 is not a multiple of 16
		{[2]int{0, 100}, [2]int{0, 4000}},  // nor 4000 of 4096
		{[2]int{0, 101}, [2]int{0, 4096}},
		{[2]int{32, 32}, [2]int{0, 4096}},
	} {
		_, err := u.Plan("q", bad.rows, bad.cols, 0, 8192)
		assert.Error(t, err, "rows %v cols %v", bad.rows, bad.cols)
	}
	_, err = u.Plan("nope", [2]int{0, 1}, [2]int{0, 1}, 0, 2)
	assert.ErrorIs(t, err, weights.ErrNotFound)
	_, err = u.Plan("q", [2]int{0, 32}, [2]int{0, 4096}, 0, 100)
	assert.Error(t, err, "pitch shorter than a row")
}
