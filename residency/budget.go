package residency

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseBudget reads a VRAM budget: a number of bytes with an optional unit,
// decimal (K, M, G, T: 10³ⁿ; "8G" = 8·10⁹) or binary (KiB, MiB, GiB, TiB:
// 2¹⁰ⁿ; "8GiB" = 8·2³⁰), "B" optional, case ignored. "none", "unlimited"
// and "0" mean no budget and return 0.
func ParseBudget(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	switch t {
	case "":
		return 0, fmt.Errorf("residency: empty budget (give bytes such as 8G or 8GiB, or none)")
	case "none", "unlimited", "0":
		return 0, nil
	}
	num := strings.TrimRightFunc(t, func(r rune) bool { return r >= 'a' && r <= 'z' })
	mult, ok := budgetUnits[strings.TrimSpace(t[len(num):])]
	if !ok {
		return 0, fmt.Errorf("residency: budget %q: unknown unit %q (use K, M, G, T for powers of 1000 or KiB, MiB, GiB, TiB for powers of 1024)", s, t[len(num):])
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("residency: budget %q is not a number of bytes", s)
	}
	n := v * mult
	switch {
	case v < 0:
		return 0, fmt.Errorf("residency: budget %q is negative", s)
	case n >= math.MaxInt64:
		return 0, fmt.Errorf("residency: budget %q is too large", s)
	case n != math.Trunc(n):
		return 0, fmt.Errorf("residency: budget %q is not a whole number of bytes", s)
	case n == 0:
		return 0, fmt.Errorf("residency: budget %q is zero bytes (write none or 0 for no budget)", s)
	}
	return int64(n), nil
}

var budgetUnits = map[string]float64{
	"": 1, "b": 1,
	"k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
	"ki": 1 << 10, "kib": 1 << 10, "mi": 1 << 20, "mib": 1 << 20, "gi": 1 << 30, "gib": 1 << 30, "ti": 1 << 40, "tib": 1 << 40,
}

// ErrBudgetTooSmall is wrapped by the error for a budget below the minimum.
var ErrBudgetTooSmall = errors.New("budget below the minimum")

// BudgetError is a budget the plan cannot fit in.
type BudgetError struct {
	Budget, Min int64
	// Fixed are the fixed costs by purpose, Slot one DFB slot, Staging
	// one staging buffer of compressed streaming (0: none).
	Fixed   map[Purpose]int64
	Slot    int64
	Staging int64
}

func (e *BudgetError) Error() string {
	gb := func(p Purpose) float64 { return float64(e.Fixed[p]) / 1e9 }
	staging := ""
	if e.Staging > 0 {
		staging = fmt.Sprintf(" and 2 staging buffers of %.2f GB", float64(e.Staging)/1e9)
	}
	return fmt.Sprintf("residency: the budget of %s is below the minimum of %s: "+
		"KV cache %.2f GB, activations %.2f GB, workspaces %.2f GB, context %.2f GB and 2 DFB slots of %.2f GB%s",
		FormatBytes(e.Budget), FormatBytes(e.Min), gb(PurposeKV), gb(PurposeActivations), gb(PurposeWorkspaces),
		gb(PurposeContext), float64(e.Slot)/1e9, staging)
}

// Unwrap makes errors.Is(err, ErrBudgetTooSmall) true.
func (e *BudgetError) Unwrap() error { return ErrBudgetTooSmall }

// FormatBytes writes n as "8,000,000,000 bytes (8.00 GB)".
func FormatBytes(n int64) string {
	return fmt.Sprintf("%s bytes (%.2f GB)", GroupDigits(n), float64(n)/1e9)
}

// GroupDigits writes n with thousands separators: 8,000,000,000.
func GroupDigits(n int64) string {
	s := fmt.Sprint(n)
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
