package safetensors

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// writeRaw writes a file made of an 8-byte header length n, then rest, and
// returns its path. It builds corrupt files that WriteFile would refuse.
func writeRaw(t *testing.T, dir, name string, n uint64, rest []byte) string {
	t.Helper()
	b := binary.LittleEndian.AppendUint64(nil, n)
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, append(b, rest...), 0o644))
	return path
}

// writeHeader writes a file with the given JSON header followed by data.
func writeHeader(t *testing.T, dir, name, header string, data []byte) string {
	t.Helper()
	return writeRaw(t, dir, name, uint64(len(header)), append([]byte(header), data...))
}

// openFile opens path and closes it when the test ends.
func openFile(t *testing.T, path string) *File {
	t.Helper()
	f, err := OpenFile(path)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, f.Close()) })
	return f
}

// openDir opens the checkpoint in dir and closes it when the test ends.
func openDir(t *testing.T, dir string) *Checkpoint {
	t.Helper()
	c, err := Open(dir)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

// seq returns n bytes 0, 1, 2, ... (mod 256).
func seq(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

// writeBytes writes b to path.
func writeBytes(t *testing.T, path string, b []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, b, 0o644))
}
