package cuda

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"vlanode/cuda/driver"
)

// kernelFiles holds the CUDA C sources of every kernel.
//
//go:embed kernels/*.cuh kernels/*.cu
var kernelFiles embed.FS

// kernelProgram is the name NVRTC gives the one program of all kernels.
const kernelProgram = "vlanode_kernels.cu"

// kernelSource assembles the program: common.cuh, then every .cu file in
// name order, each after a #line directive so that compiler messages name
// the file and line.
func kernelSource() (string, error) {
	var b strings.Builder
	add := func(name string) error {
		data, err := kernelFiles.ReadFile("kernels/" + name)
		if err != nil {
			return fmt.Errorf("cuda: kernel source %s: %w", name, err)
		}
		fmt.Fprintf(&b, "#line 1 %q\n", name)
		b.Write(data)
		b.WriteString("\n")
		return nil
	}
	if err := add("common.cuh"); err != nil {
		return "", err
	}
	names, err := fs.Glob(kernelFiles, "kernels/*.cu")
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	for _, n := range names {
		if err := add(filepath.Base(n)); err != nil {
			return "", err
		}
	}
	return b.String(), nil
}

// includeCandidates are the folders searched for CUDA headers such as
// cuda_bf16.h. vlanode's kernels include none today; the folders that
// exist are passed to NVRTC (which finds no header by itself) so that a
// kernel may.
func includeCandidates() []string {
	var dirs []string
	for _, env := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if v := os.Getenv(env); v != "" {
			dirs = append(dirs, filepath.Join(v, "include"))
		}
	}
	return append(dirs,
		"/usr/local/cuda/include",
		"/usr/local/cuda/targets/x86_64-linux/include",
		"/usr/local/cuda/targets/sbsa-linux/include",
	)
}

// existingDirs keeps the folders of dirs that exist, without repeats.
func existingDirs(dirs []string) []string {
	var out []string
	for _, d := range dirs {
		if st, err := os.Stat(d); err == nil && st.IsDir() && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// archName is the architecture the kernels are compiled for: sm_90a (the
// features of sm_90 alone, such as wgmma) where the device is sm_90 and
// NVRTC knows it (12 and later), else sm_<arch>.
func archName(arch, rtcMajor int) string {
	if arch == 90 && rtcMajor >= 12 {
		return "sm_90a"
	}
	return fmt.Sprintf("sm_%d", arch)
}

// compileOptions are the NVRTC options for an architecture (archName).
func compileOptions(arch string, includes []string) []string {
	opts := []string{"--gpu-architecture=" + arch, "--std=c++17"}
	for _, d := range includes {
		opts = append(opts, "-I"+d)
	}
	return opts
}

// pickArch chooses the architecture to compile for a device of compute
// capability cc (major*10+minor) with an NVRTC that supports archs (nil:
// unknown, assume cc). A CUBIN for sm_XY runs on devices X.Z with Z >= Y,
// so when NVRTC does not know cc, the newest known arch of the same major
// below it will do.
func pickArch(cc int, archs []int) (int, error) {
	if len(archs) == 0 || slices.Contains(archs, cc) {
		return cc, nil
	}
	best := -1
	for _, a := range archs {
		if a/10 == cc/10 && a < cc && a > best {
			best = a
		}
	}
	if best < 0 {
		return 0, fmt.Errorf("cuda: this NVRTC cannot compile for the device's sm_%d (it knows %v): install a newer CUDA toolkit", cc, archs)
	}
	return best, nil
}

// KernelInfo says how the kernel module was obtained.
type KernelInfo struct {
	Arch        string        // e.g. "sm_90"
	Options     []string      // NVRTC options
	CacheFile   string        // "" without a disk cache
	FromCache   bool          // loaded from CacheFile, not compiled
	CompileTime time.Duration // time NVRTC took (0 from the cache)
	CubinBytes  int
	CacheError  string // why the CUBIN could not be cached, if it could not
	Log         string // NVRTC warnings
}

// buildKernels returns the CUBIN of every kernel for arch, from the disk
// cache when it holds one for this source, options and NVRTC version, else
// compiled by NVRTC (and stored). skipCache forces a compilation.
func buildKernels(rtc *driver.NVRTC, arch string, cacheDir string, skipCache bool) ([]byte, KernelInfo, error) {
	src, err := kernelSource()
	if err != nil {
		return nil, KernelInfo{}, err
	}
	major, minor, err := rtc.Version()
	if err != nil {
		return nil, KernelInfo{}, fmt.Errorf("cuda: nvrtc version: %w", err)
	}
	opts := compileOptions(arch, existingDirs(includeCandidates()))
	info := KernelInfo{Arch: arch, Options: opts}
	key := kernelCacheKey(src, opts, fmt.Sprintf("%d.%d", major, minor))
	if cacheDir != "" {
		info.CacheFile = filepath.Join(cacheDir, key+".cubin")
		if !skipCache {
			if cubin, ok := readCachedCubin(info.CacheFile); ok {
				info.FromCache, info.CubinBytes = true, len(cubin)
				return cubin, info, nil
			}
		}
	}
	start := time.Now()
	cubin, log, err := rtc.CompileCUBIN(src, kernelProgram, opts)
	info.CompileTime, info.Log = time.Since(start), log
	if err != nil {
		return nil, info, fmt.Errorf("cuda: kernels: %w", err)
	}
	info.CubinBytes = len(cubin)
	if info.CacheFile != "" {
		if err := writeCachedCubin(info.CacheFile, cubin); err != nil {
			info.CacheError = err.Error()
		}
	}
	return cubin, info, nil
}
