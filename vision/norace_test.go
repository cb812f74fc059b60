//go:build !race

package vision

// raceEnabled: see race_test.go.
const raceEnabled = false
