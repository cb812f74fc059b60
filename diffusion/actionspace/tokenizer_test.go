package actionspace

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHistoryTokensHandChecked: 16 poses at 10 m/s along x, the last at the
// origin, 1 m apart. The first "delta" is the oldest position (−15, 0, 0):
// x clamps to 0, y and z are 0 → 0.5·999 = 499.5 → 500 (ties to even).
// Every later delta is (1, 0, 0): x → (1+4)/8·999 = 624.375 → 624.
func TestHistoryTokensHandChecked(t *testing.T) {
	xyz, _ := straightHistory(16, 10, 0, 0)
	const offset = 151669 + 3000
	ids, err := DefaultDeltaTokenizer().HistoryTokens(xyz, offset)
	require.NoError(t, err)
	require.Len(t, ids, 48)
	want := []int32{0, 500, 500}
	for range 15 {
		want = append(want, 624, 500, 500)
	}
	for i := range want {
		want[i] += offset
	}
	assert.Equal(t, want, ids)
}

func TestDeltaTokenizerRounding(t *testing.T) {
	d := DefaultDeltaTokenizer()
	ids, err := d.Encode([][3]float32{{4, -4, 10}, {9, -9, 10}, {9.25, -9, 0}})
	require.NoError(t, err)
	// (4, −4, 10): 999, 0, 999; then (5, −5, 0): clamped 999, clamped 0, 500;
	// then (0.25, 0, −10): 4.25/8·999 = 530.71875 → 531, 500, 0
	assert.Equal(t, []int32{999, 0, 999, 999, 0, 500, 531, 500, 0}, ids)

	// with 6 bins the scale is 5: a midpoint gives 2.5, which rounds to even 2
	// (round-half-up would give 3); 0.75·5 = 3.75 rounds to 4
	six := DeltaTokenizer{Min: [3]float32{-1, -1, -1}, Max: [3]float32{1, 1, 1}, Bins: 6}
	ids, err = six.Encode([][3]float32{{0, 0.5, -1}})
	require.NoError(t, err)
	assert.Equal(t, []int32{2, 4, 0}, ids)
}

func TestDeltaTokenizerErrors(t *testing.T) {
	_, err := DeltaTokenizer{Bins: 1}.Encode(nil)
	assert.Error(t, err)
	_, err = DeltaTokenizer{Min: [3]float32{1, 0, 0}, Max: [3]float32{1, 1, 1}, Bins: 10}.Encode(nil)
	assert.Error(t, err)
}
