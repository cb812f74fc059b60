package residency

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParseBudget(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"8G", 8e9}, {"8g", 8e9}, {"8GB", 8e9}, {"8GiB", 8 << 30}, {"8gib", 8 << 30}, {"8Gi", 8 << 30},
		{"16G", 16e9}, {"4G", 4e9}, {"1.5G", 1.5e9}, {"512M", 512e6}, {"512MiB", 512 << 20},
		{"1T", 1e12}, {"2KiB", 2048}, {"123", 123}, {"123B", 123}, {" 8G ", 8e9}, {"8 G", 8e9},
		{"none", 0}, {"None", 0}, {"unlimited", 0}, {"0", 0},
	} {
		got, err := ParseBudget(tc.in)
		if assert.NoError(t, err, tc.in) {
			assert.Equal(t, tc.want, got, tc.in)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"", "empty budget"},
		{"8X", `unknown unit "x"`},
		{"G", "not a number"},
		{"-1G", "negative"},
		{"0.5", "whole number of bytes"},
		{"0G", "zero bytes"},
		{"1e30T", "too large"},
		{"NaN", "unknown unit"},
	} {
		_, err := ParseBudget(tc.in)
		assert.ErrorContains(t, err, tc.want, tc.in)
	}
}
