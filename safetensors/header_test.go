package safetensors

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOpenFileCorrupt(t *testing.T) {
	const ok = `{"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]}}`
	for _, tc := range []struct {
		name  string
		write func(t *testing.T, dir string) string
		want  string
	}{
		{"empty file", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "f")
			writeBytes(t, p, nil)
			return p
		}, "file is 0 bytes, shorter than the 8-byte header length"},
		{"short file", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "f")
			writeBytes(t, p, []byte{1, 2, 3})
			return p
		}, "file is 3 bytes, shorter than the 8-byte header length"},
		{"absurd header length", func(t *testing.T, dir string) string {
			return writeRaw(t, dir, "f", 1<<40, []byte("{}"))
		}, "header length 1099511627776 is absurd"},
		{"header past end", func(t *testing.T, dir string) string {
			return writeRaw(t, dir, "f", 100, []byte("{}"))
		}, "truncated: header length 100 but only 2 bytes follow it"},
		{"invalid JSON", func(t *testing.T, dir string) string {
			return writeHeader(t, dir, "f", `{"w":`, nil)
		}, "invalid JSON header"},
		{"JSON null", func(t *testing.T, dir string) string {
			return writeHeader(t, dir, "f", `null`, nil)
		}, "invalid JSON header: not an object"},
		{"JSON array", func(t *testing.T, dir string) string {
			return writeHeader(t, dir, "f", `[1]`, nil)
		}, "invalid JSON header"},
		{"entry not an object", func(t *testing.T, dir string) string {
			return writeHeader(t, dir, "f", `{"w":3}`, nil)
		}, `tensor "w": invalid header entry`},
		{"bad metadata", func(t *testing.T, dir string) string {
			return writeHeader(t, dir, "f", `{"__metadata__":{"a":1}}`, nil)
		}, "__metadata__: want an object of strings"},
		{"unknown dtype", func(t *testing.T, dir string) string {
			return writeHeader(t, dir, "f", `{"w":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}}`, []byte{0})
		}, `tensor "w": unsupported dtype "F8_E4M3"`},
		{"no dtype", func(t *testing.T, dir string) string {
			return writeHeader(t, dir, "f", `{"w":{"shape":[1],"data_offsets":[0,1]}}`, []byte{0})
		}, `tensor "w": header entry has no dtype`},
		{"no shape", func(t *testing.T, dir string) string {
			return writeHeader(t, dir, "f", `{"w":{"dtype":"U8","data_offsets":[0,1]}}`, []byte{0})
		}, `tensor "w": header entry has no shape`},
		{"no offsets", func(t *testing.T, dir string) string {
			return writeHeader(t, dir, "f", `{"w":{"dtype":"U8","shape":[1]}}`, []byte{0})
		}, `tensor "w": header entry has no data_offsets`},
		{"three offsets", func(t *testing.T, dir string) string {
			return writeHeader(t, dir, "f", `{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}`, []byte{0})
		}, `tensor "w": data_offsets [0 1 2], want [begin, end]`},
		{"negative dim", func(t *testing.T, dir string) string {
			return writeHeader(t, dir, "f", `{"w":{"dtype":"U8","shape":[2,-1],"data_offsets":[0,0]}}`, nil)
		}, `tensor "w": negative dimension -1 in shape [2 -1]`},
		{"huge shape", func(t *testing.T, dir string) string {
			return writeHeader(t, dir, "f", `{"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`, nil)
		}, `tensor "w": shape [4294967296 4294967296] of F32 overflows int64 bytes`},
		{"reversed offsets", func(t *testing.T, dir string) string {
			return writeHeader(t, dir, "f", `{"w":{"dtype":"U8","shape":[1],"data_offsets":[1,0]}}`, []byte{0})
		}, `tensor "w": invalid data_offsets [1, 0]`},
		{"negative offset", func(t *testing.T, dir string) string {
			return writeHeader(t, dir, "f", `{"w":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}}`, []byte{0})
		}, `tensor "w": invalid data_offsets [-1, 0]`},
		{"size mismatch", func(t *testing.T, dir string) string {
			return writeHeader(t, dir, "f", `{"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,10]}}`, seq(10))
		}, `tensor "w": shape [2 3] of BF16 needs 12 bytes, offsets give 10`},
		{"truncated data", func(t *testing.T, dir string) string {
			return writeHeader(t, dir, "f", ok, seq(11))
		}, `truncated: tensor "w": data_offsets [0, 12] end past the 11-byte data region`},
		{"overlap", func(t *testing.T, dir string) string {
			return writeHeader(t, dir, "f",
				`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[2],"data_offsets":[3,5]}}`, seq(5))
		}, `tensors "a" [0, 4] and "b" [3, 5] overlap`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.write(t, t.TempDir())
			_, err := OpenFile(path)
			require.Error(t, err)
			assert.Contains(t, err.Error(), path, "the error names the file")
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestOpenFileValidEdgeCases(t *testing.T) {
	for _, tc := range []struct {
		name   string
		header string
		data   []byte
		names  []string
	}{
		{"empty header", `{}`, nil, []string{}},
		{"metadata only", `{"__metadata__":{"format":"pt"}}`, nil, []string{}},
		{"padded header", `{"w":{"dtype":"U8","shape":[],"data_offsets":[0,1]}}      `, []byte{9}, []string{"w"}},
		{"zero-size tensors share an offset", `{"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},` +
			`"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"c":{"dtype":"F32","shape":[3,0],"data_offsets":[1,1]}}`,
			[]byte{1}, []string{"a", "b", "c"}},
		{"unknown fields ignored, trailing bytes allowed", `{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1}}`,
			[]byte{1, 2, 3}, []string{"w"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := openFile(t, writeHeader(t, t.TempDir(), "f", tc.header, tc.data))
			assert.Equal(t, tc.names, f.Names())
		})
	}
}
