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

// CPUOrder lists the CPUs this process may run on in the order a pool takes
// them: one per physical core (its lowest-numbered hyperthread) ordered by
// NUMA node, then CPU number — so the first n share a node's memory
// controller and no two share a core's caches — then the cores' other
// hyperthreads in the same order. cores is the number of physical cores.
func CPUOrder() (cpus []int, cores int, err error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, 0, fmt.Errorf("kern: reading the process's CPU affinity: %w", err)
	}
	var allowed []int
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			allowed = append(allowed, c)
		}
	}
	cpus, cores = orderCPUs("/sys/devices/system/cpu", allowed)
	return cpus, cores, nil
}

// DefaultCPUs is what a pool runs on when Options sets neither CPUs nor
// Threads: the first CPU of each physical core, in CPUOrder's order.
func DefaultCPUs() ([]int, error) {
	cpus, cores, err := CPUOrder()
	if err != nil {
		return nil, err
	}
	return cpus[:cores], nil
}

// orderCPUs orders allowed as CPUOrder does, reading the topology under
// sysfs. A CPU whose topology cannot be read counts as its own core on
// node 0.
func orderCPUs(sysfs string, allowed []int) (cpus []int, cores int) {
	type core struct{ pkg, id int }
	type cpu struct{ n, node, rank int } // rank: 0 for a core's first CPU, 1 for its other hyperthreads
	seen := map[core]bool{}
	var all []cpu
	for _, c := range allowed {
		dir := filepath.Join(sysfs, fmt.Sprintf("cpu%d", c))
		pkg, err1 := readInt(filepath.Join(dir, "topology", "physical_package_id"))
		id, err2 := readInt(filepath.Join(dir, "topology", "core_id"))
		rank := 0
		if err1 == nil && err2 == nil {
			k := core{pkg, id}
			if seen[k] {
				rank = 1
			}
			seen[k] = true
		}
		if rank == 0 {
			cores++
		}
		all = append(all, cpu{c, nodeOf(dir), rank})
	}
	sort.SliceStable(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if a.rank != b.rank {
			return a.rank < b.rank
		}
		if a.node != b.node {
			return a.node < b.node
		}
		return a.n < b.n
	})
	cpus = make([]int, len(all))
	for i, c := range all {
		cpus[i] = c.n
	}
	return cpus, cores
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
