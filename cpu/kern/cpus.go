package kern

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// DefaultCPUs lists the CPUs a pool uses when Options.CPUs is nil: of the
// CPUs this process may run on, one per physical core (the lowest-numbered
// hyperthread), ordered by NUMA node, then CPU number — so the first n share
// a node's memory controller and none shares a core's caches.
func DefaultCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("kern: reading the process's CPU affinity: %w", err)
	}
	var allowed []int
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			allowed = append(allowed, c)
		}
	}
	return physicalCores("/sys/devices/system/cpu", allowed), nil
}

// physicalCores keeps one CPU per (package, core) of allowed, read under
// sysfs, ordered by node and CPU. A CPU whose topology cannot be read counts
// as its own core on node 0.
func physicalCores(sysfs string, allowed []int) []int {
	type core struct{ pkg, id int }
	type cpu struct{ n, node int }
	seen := map[core]bool{}
	var out []cpu
	for _, c := range allowed {
		dir := filepath.Join(sysfs, fmt.Sprintf("cpu%d", c))
		pkg, err1 := readInt(filepath.Join(dir, "topology", "physical_package_id"))
		id, err2 := readInt(filepath.Join(dir, "topology", "core_id"))
		if err1 == nil && err2 == nil {
			k := core{pkg, id}
			if seen[k] {
				continue
			}
			seen[k] = true
		}
		out = append(out, cpu{c, nodeOf(dir)})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].node != out[j].node {
			return out[i].node < out[j].node
		}
		return out[i].n < out[j].n
	})
	cpus := make([]int, len(out))
	for i, c := range out {
		cpus[i] = c.n
	}
	return cpus
}

// nodeOf is the NUMA node of a CPU's sysfs directory (its nodeN link), or 0.
func nodeOf(dir string) int {
	m, _ := filepath.Glob(filepath.Join(dir, "node[0-9]*"))
	for _, p := range m {
		if n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(p), "node")); err == nil {
			return n
		}
	}
	return 0
}

func readInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}
