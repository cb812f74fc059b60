package residency

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// defaultProfile is the shipped H200 profile.
func defaultProfile(t *testing.T) *Profile {
	t.Helper()
	p, err := DefaultProfile()
	require.NoError(t, err)
	return p
}
