package cuda

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Report is where the device memory went, per purpose.
type Report struct {
	Budget   int64 // as configured; 0 = unlimited
	Limit    int64 // bytes allowed: the budget, or the device's memory
	InUse    int64 // bytes counted now
	Peak     int64 // most bytes counted at once
	Purposes []PurposeUsage
}

// PurposeUsage is the memory of one purpose.
type PurposeUsage struct {
	Purpose string
	Bytes   int64 // counted now
	Peak    int64 // most counted at once
	Blocks  int   // live allocations (0 for memory charged, not allocated)
}

// Bytes returns the bytes counted for purpose now.
func (r Report) Bytes(purpose string) int64 {
	for _, p := range r.Purposes {
		if p.Purpose == purpose {
			return p.Bytes
		}
	}
	return 0
}

// sort orders the purposes by name.
func (r *Report) sort() {
	sort.Slice(r.Purposes, func(i, j int) bool { return r.Purposes[i].Purpose < r.Purposes[j].Purpose })
}

// String is a table of the report, one line per purpose.
func (r Report) String() string {
	var b strings.Builder
	limit := "budget " + formatBytes(r.Limit)
	if r.Budget == 0 {
		limit = "no budget, device " + formatBytes(r.Limit)
	}
	fmt.Fprintf(&b, "device memory: %s in use, peak %s (%s)\n", formatBytes(r.InUse), formatBytes(r.Peak), limit)
	for _, p := range r.Purposes {
		fmt.Fprintf(&b, "  %-18s %10s  peak %10s  %d blocks\n", p.Purpose, formatBytes(p.Bytes), formatBytes(p.Peak), p.Blocks)
	}
	return b.String()
}

// byteUnits are the binary units, largest first.
var byteUnits = []struct {
	size int64
	name string
}{{1 << 40, "TiB"}, {1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}}

// unitOf picks the unit to print n in.
func unitOf(n int64) (int64, string) {
	for _, u := range byteUnits {
		if n >= u.size {
			return u.size, u.name
		}
	}
	return 1, "B"
}

// formatBytes prints n with one decimal in its unit: "1.2 GiB", "512 B".
func formatBytes(n int64) string {
	size, name := unitOf(n)
	if size == 1 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", float64(n)/float64(size), name)
}

// formatOf prints "3.1 of 4.0 GiB" in the unit of the total, with more
// decimals (up to 3) while one cannot tell n from the total.
func formatOf(n, total int64) string {
	size, name := unitOf(total)
	if size == 1 {
		return fmt.Sprintf("%d of %d B", n, total)
	}
	var a, b string
	for prec := 1; prec <= 3; prec++ {
		a = strconv.FormatFloat(float64(n)/float64(size), 'f', prec, 64)
		b = strconv.FormatFloat(float64(total)/float64(size), 'f', prec, 64)
		if a != b || n == total {
			break
		}
	}
	return fmt.Sprintf("%s of %s %s", a, b, name)
}
