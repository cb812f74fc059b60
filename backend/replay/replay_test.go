package replay

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/backend"
	"vlanode/backend/handoff/handofftest"
	"vlanode/cpu"
)

// plain hides every capability of the backend it wraps.
type plain struct{ backend.Backend }

// TestExchange: the wrapped backend's host exchange serves through the
// wrapper, and a backend without one is refused by name.
func TestExchange(t *testing.T) {
	host, err := cpu.New(cpu.WithThreads(1))
	require.NoError(t, err)
	defer host.Close()
	handofftest.Run(t, New(host), handofftest.Chain{N: 64, Tickets: 20})
	_, err = New(plain{host}).NewExchange(4, 4)
	assert.ErrorContains(t, err, "replay: the wrapped cpu backend has no host exchange")
}
