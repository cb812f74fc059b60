package bf16z

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"vlanode/safetensors"
	"vlanode/synth"
	"vlanode/tensor"
	"vlanode/weights"
)

var (
	flagCheckpoint = flag.String("bf16z.checkpoint", "", "TestCheckpoint: encode, decode and compare every tensor of this checkpoint")
	flagArch       = flag.String("bf16z.arch", "", "TestCheckpoint: name modules as synth's layout of this architecture does; with no -bf16z.checkpoint, write a sample of its synthetic checkpoint (every tensor outside the layer stacks, the first and last layer of each) and measure that")
	flagWorkers    = flag.Int("bf16z.workers", 0, "TestCheckpoint: encoder and decoder goroutines (0: GOMAXPROCS)")
	flagAll        = flag.Bool("bf16z.all", false, "TestCheckpoint: with -bf16z.arch and no -bf16z.checkpoint, write the whole synthetic checkpoint (22 GB for alpamayo-r1-10b), not a sample")
)

// layerRE finds the layer of a tensor name: "…layers.12." or "…blocks.3.".
var layerRE = regexp.MustCompile(`^(.*\.(?:layers|blocks)\.(\d+))\.`)

// units groups a checkpoint's tensor names as the model loaders do in
// spirit: a layer (or vision block) a unit; every other tensor alone.
func units(names []string) map[string][]string {
	out := map[string][]string{}
	for _, n := range names {
		key := n
		if m := layerRE.FindStringSubmatch(n); m != nil {
			key = m[1]
		}
		out[key] = append(out[key], n)
	}
	return out
}

// moduleStats sums one module's units.
type moduleStats struct {
	units, tensors, coded int
	raw, stored           int64
	exps                  [256]uint64 // exponent counts of the bf16 tensors, pooled
	ideal                 float64     // bytes if every bf16 tensor's exponents took their entropy
	encWall, decWall      time.Duration
	encCPU, decCPU        time.Duration
}

// cpuTime is the process's user and system time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measureCheckpoint encodes every unit of the checkpoint in dir, decodes
// it, compares the result with the raw blob byte for byte, and sums sizes
// and times by module.
func measureCheckpoint(t *testing.T, dir string, moduleOf func(name string) string, workers int) map[string]*moduleStats {
	c, err := safetensors.Open(dir)
	require.NoError(t, err)
	defer c.Close()
	groups := units(c.Names())
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	stats := map[string]*moduleStats{}
	var dst []byte
	for _, k := range keys {
		names := groups[k]
		refs := make([]weights.Ref, len(names))
		for i, n := range names {
			refs[i] = weights.Ref{Local: strings.TrimPrefix(n, k+"."), Checkpoint: n}
		}
		b, err := weights.Pack(k, c, refs, nil)
		require.NoError(t, err)
		w0, c0 := time.Now(), cpuTime()
		u, err := Encode(b, Options{Workers: workers})
		require.NoError(t, err, k)
		w1, c1 := time.Now(), cpuTime()
		if int64(cap(dst)) < u.RawSize {
			dst = make([]byte, u.RawSize)
		}
		dst = dst[:u.RawSize]
		require.NoError(t, u.Decode(dst, workers), k)
		w2, c2 := time.Now(), cpuTime()
		if !bytes.Equal(dst, b.Data) {
			for _, e := range b.Entries {
				require.True(t, bytes.Equal(b.Bytes(e), dst[e.Offset:e.Offset+e.Size]), "unit %s tensor %s differs after decoding", k, e.Name)
			}
			t.Fatalf("unit %s: padding differs after decoding", k)
		}
		m := moduleOf(names[0])
		s := stats[m]
		if s == nil {
			s = &moduleStats{}
			stats[m] = s
		}
		s.units++
		s.tensors += len(u.Tensors)
		for _, tt := range u.Tensors {
			if tt.Coded {
				s.coded++
			}
		}
		s.raw += u.RawSize
		s.stored += u.Size()
		for _, e := range b.Entries {
			if e.DType != tensor.BF16 {
				s.ideal += float64(e.Size)
				continue
			}
			var c [256]uint64
			exponentCounts(b.Bytes(e), &c)
			for i := range c {
				s.exps[i] += c[i]
			}
			s.ideal += float64(e.Size) * (8 + entropy(&c)) / 16
		}
		s.encWall += w1.Sub(w0)
		s.decWall += w2.Sub(w1)
		s.encCPU += c1 - c0
		s.decCPU += c2 - c1
	}
	return stats
}

// report logs a markdown table of stats, modules in order, with the
// streamed total (every module but "embedding": its rows are gathered on
// the host) and, where scale gives a module's full size, the ratio applied
// to it. It returns the streamed ratio.
func report(t *testing.T, stats map[string]*moduleStats, order []string, scale map[string]int64) float64 {
	var b strings.Builder
	fmt.Fprintf(&b, "\n| module | units | tensors coded | raw MB | stored MB | ratio | ideal: Σ (8 + H)/16, H a tensor's exponent entropy | pooled exponent entropy, bits | encode MB/s (wall, per CPU s) | decode MB/s (wall, per CPU s) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	var raw, stored, fullRaw, fullStored float64
	rate := func(bytes int64, d time.Duration) float64 { return float64(bytes) / max(d.Seconds(), 1e-9) / 1e6 }
	for _, m := range order {
		s := stats[m]
		if s == nil {
			continue
		}
		r := float64(s.stored) / float64(s.raw)
		fmt.Fprintf(&b, "| %s | %d | %d/%d | %.1f | %.1f | %.4f | %.4f | %.3f | %.0f, %.0f | %.0f, %.0f |\n", m, s.units, s.coded, s.tensors,
			float64(s.raw)/1e6, float64(s.stored)/1e6, r, s.ideal/float64(s.raw), entropy(&s.exps),
			rate(s.raw, s.encWall), rate(s.raw, s.encCPU), rate(s.raw, s.decWall), rate(s.raw, s.decCPU))
		if m == string(synth.ModEmbedding) || m == "embedding" {
			continue
		}
		raw += float64(s.raw)
		stored += float64(s.stored)
		if full, ok := scale[m]; ok {
			fullRaw += float64(full)
			fullStored += r * float64(full)
		}
	}
	fmt.Fprintf(&b, "\nstreamed (all but the embedding): %.1f MB → %.1f MB, ratio %.4f\n", raw/1e6, stored/1e6, stored/raw)
	if fullRaw > 0 {
		fmt.Fprintf(&b, "each module's ratio applied to its full size: %.2f GB → %.2f GB, ratio %.4f\n", fullRaw/1e9, fullStored/1e9, fullStored/fullRaw)
	}
	t.Log(b.String())
	if fullRaw > 0 {
		return fullStored / fullRaw
	}
	return stored / raw
}

// TestCheckpoint measures the codec on a real-size checkpoint: every
// tensor encoded, decoded and compared, the ratio and rates per module.
// It needs -bf16z.checkpoint or -bf16z.arch and skips without them:
//
//	vlanode synth --arch alpamayo-r1-10b --out /tmp/a10b
//	go test ./weights/bf16z -run TestCheckpoint -v -timeout 2h -args -bf16z.checkpoint /tmp/a10b -bf16z.arch alpamayo-r1-10b
//	go test ./weights/bf16z -run TestCheckpoint -v -timeout 1h -args -bf16z.arch alpamayo-r1-10b   # a sample, 2.7 GB in a temporary folder
//	go test ./weights/bf16z -run TestCheckpoint -v -timeout 2h -args -bf16z.arch alpamayo-r1-10b -bf16z.all   # all of it, 22 GB
//
// With Alpamayo-R1-10B, the streamed ratio must be at most 0.72 (issue 30).
func TestCheckpoint(t *testing.T) {
	if *flagCheckpoint == "" && *flagArch == "" {
		t.Skip("SKIPPED: measures a real-size checkpoint; give -bf16z.checkpoint DIR and/or -bf16z.arch ARCH")
	}
	moduleOf := func(name string) string {
		if m := layerRE.FindStringSubmatch(name); m != nil {
			return strings.TrimSuffix(m[1], "."+m[2])
		}
		return name
	}
	var order []string
	scale := map[string]int64{}
	dir := *flagCheckpoint
	if *flagArch != "" {
		arch, err := synth.ParseArch(*flagArch)
		require.NoError(t, err)
		l, err := synth.NewLayout(arch)
		require.NoError(t, err)
		mod := map[string]string{}
		for _, tt := range l.Tensors {
			mod[tt.Name] = string(tt.Module)
		}
		moduleOf = func(name string) string {
			if m, ok := mod[name]; ok {
				return m
			}
			return "not in " + *flagArch
		}
		for _, m := range l.Breakdown() {
			order = append(order, string(m.Module))
			scale[string(m.Module)] = m.Bytes
		}
		switch {
		case dir == "" && *flagAll:
			dir = writeSynth(t, l)
			scale = nil
		case dir == "":
			dir = writeSample(t, l)
		default:
			scale = nil // every tensor is measured
		}
	}
	workers := *flagWorkers
	if workers == 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	t.Logf("checkpoint %s, %d workers", dir, workers)
	stats := measureCheckpoint(t, dir, moduleOf, workers)
	if order == nil {
		for m := range stats {
			order = append(order, m)
		}
		sort.Strings(order)
	}
	ratio := report(t, stats, order, scale)
	if *flagArch == string(synth.AlpamayoR1_10B) {
		require.LessOrEqual(t, ratio, 0.72, "streamed bytes of Alpamayo-R1-10B")
	}
}

// writeSynth writes l's whole checkpoint as vlanode synth does (seed 1)
// into a temporary folder.
func writeSynth(t *testing.T, l *synth.Layout) string {
	dir := filepath.Join(t.TempDir(), "synth")
	t0 := time.Now()
	res, err := synth.Write(context.Background(), dir, l, synth.Options{Seed: 1})
	require.NoError(t, err)
	t.Logf("wrote %s: %d tensors, %.2f GB in %v", l.Arch, res.Tensors, float64(res.TensorBytes)/1e9, time.Since(t0).Round(time.Second))
	return dir
}

// writeSample writes the tensors of l outside the layer stacks but the
// embedding, and the first and last layer of each stack, as synth writes
// them with seed 1 (vlanode synth's default; each tensor's values depend
// only on the seed and its name), into a temporary folder.
func writeSample(t *testing.T, l *synth.Layout) string {
	last := map[string]int{}
	for _, tt := range l.Tensors {
		if m := layerRE.FindStringSubmatch(tt.Name); m != nil {
			var i int
			fmt.Sscan(m[2], &i)
			key := strings.TrimSuffix(m[1], "."+m[2])
			last[key] = max(last[key], i)
		}
	}
	sample := *l
	sample.Tensors = nil
	for _, tt := range l.Tensors {
		if tt.Module == synth.ModEmbedding {
			continue
		}
		if m := layerRE.FindStringSubmatch(tt.Name); m != nil {
			var i int
			fmt.Sscan(m[2], &i)
			if i != 0 && i != last[strings.TrimSuffix(m[1], "."+m[2])] {
				continue
			}
		}
		sample.Tensors = append(sample.Tensors, tt)
	}
	dir := filepath.Join(t.TempDir(), "sample")
	t0 := time.Now()
	res, err := synth.Write(context.Background(), dir, &sample, synth.Options{Seed: 1})
	require.NoError(t, err)
	t.Logf("wrote a sample of %s: %d tensors, %.2f GB in %v", l.Arch, res.Tensors, float64(res.TensorBytes)/1e9, time.Since(t0).Round(time.Second))
	return dir
}

// TestReferenceCheckpoints round-trips every tensor of the reference
// checkpoints (testdata/reference), as the loaders' units would hold
// them: as encoded (small tensors mostly stay raw) and with every bf16
// tensor coded.
func TestReferenceCheckpoints(t *testing.T) {
	dirs, err := filepath.Glob("../../testdata/reference/*/model*.safetensors*")
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, p := range dirs {
		dir := filepath.Dir(p)
		if seen[dir] {
			continue
		}
		seen[dir] = true
		t.Run(filepath.Base(dir), func(t *testing.T) {
			c, err := safetensors.Open(dir)
			require.NoError(t, err)
			defer c.Close()
			var raw, stored [2]int64
			var exps [256]uint64
			dtypes := map[string]int64{}
			for k, names := range units(c.Names()) {
				refs := make([]weights.Ref, len(names))
				for i, n := range names {
					refs[i] = weights.Ref{Checkpoint: n}
				}
				b, err := weights.Pack(k, c, refs, nil)
				require.NoError(t, err)
				for _, e := range b.Entries {
					dtypes[e.DType.String()] += e.Size
					if e.DType == tensor.BF16 {
						exponentCounts(b.Bytes(e), &exps)
					}
				}
				for f, force := range []bool{false, true} {
					u, err := Encode(b, Options{Workers: 2, MinSaving: forceIf(force)})
					require.NoError(t, err)
					dst := make([]byte, u.RawSize)
					require.NoError(t, u.Decode(dst, 2))
					require.True(t, bytes.Equal(b.Data, dst), "unit %s (all coded: %v) differs after decoding", k, force)
					raw[f] += u.RawSize
					stored[f] += u.Size()
				}
			}
			t.Logf("%s: %d units, %d bytes (by dtype %v; bf16 exponent entropy %.2f bits): stored %.3f of raw as encoded, %.3f with every bf16 tensor coded",
				filepath.Base(dir), len(units(c.Names())), raw[0], dtypes, entropy(&exps), float64(stored[0])/float64(raw[0]), float64(stored[1])/float64(raw[1]))
		})
	}
	require.Greater(t, len(seen), 3, "reference checkpoints found")
}
