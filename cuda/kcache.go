package cuda

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
)

// kernelCacheVersion changes when the cache's layout or meaning does.
const kernelCacheVersion = "vlanode-kernels-1"

// defaultKernelCacheDir is $XDG_CACHE_HOME/vlanode/kernels, else
// ~/.cache/vlanode/kernels; "" when neither is known.
func defaultKernelCacheDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "vlanode", "kernels")
}

// kernelCacheKey names a CUBIN by everything that determines it: the
// source, the options (the architecture among them) and NVRTC's version.
func kernelCacheKey(src string, opts []string, nvrtcVersion string) string {
	h := sha256.New()
	for _, part := range append([]string{kernelCacheVersion, src, nvrtcVersion}, opts...) {
		fmt.Fprintf(h, "%d:%s\x00", len(part), part)
	}
	return hex.EncodeToString(h.Sum(nil))[:40]
}

// elfMagic starts every CUBIN.
var elfMagic = []byte("\x7fELF")

// readCachedCubin returns the cached CUBIN at path, if there is a
// plausible one.
func readCachedCubin(path string) ([]byte, bool) {
	data, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(data, elfMagic) {
		return nil, false
	}
	return data, true
}

// writeCachedCubin stores a CUBIN at path atomically (a reader sees the
// old file, none, or the whole new one).
func writeCachedCubin(path string, cubin []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("cuda: kernel cache: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".cubin-*")
	if err != nil {
		return fmt.Errorf("cuda: kernel cache: %w", err)
	}
	_, werr := f.Write(cubin)
	cerr := f.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(f.Name(), path)
	}
	if werr != nil {
		os.Remove(f.Name())
		return fmt.Errorf("cuda: kernel cache: %w", werr)
	}
	return nil
}
