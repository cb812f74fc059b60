// Package version says which vlanode a binary is: its release and, when Go
// recorded them at build time, the commit it was built from and whether the
// working tree had changes.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Release is vlanode's release number (semantic versioning). The NATS micro
// service, the HTTP API's /v1/version and `vlanode version` report it.
const Release = "0.1.0"

// Info describes the running binary.
type Info struct {
	Release  string `json:"release"`            // Release
	Commit   string `json:"commit,omitempty"`   // the VCS revision the binary was built from; "" when not recorded
	Time     string `json:"time,omitempty"`     // that commit's time (RFC 3339)
	Modified bool   `json:"modified,omitempty"` // the working tree had uncommitted changes
	Go       string `json:"go"`                 // the Go toolchain that built it
}

// Read returns the binary's Info. Go records the commit when the binary is
// built with `go build` inside a git checkout (not with `go run` or `go
// test`).
func Read() Info {
	i := Info{Release: Release, Go: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return i
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Commit = s.Value
		case "vcs.time":
			i.Time = s.Value
		case "vcs.modified":
			i.Modified = s.Value == "true"
		}
	}
	return i
}

// String returns one line: "0.1.0 (commit 4f87764a1b2c, modified, go1.26.0)".
func (i Info) String() string {
	s := i.Release + " ("
	if i.Commit != "" {
		c := i.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		s += "commit " + c
		if i.Modified {
			s += ", modified"
		}
		s += ", "
	}
	return fmt.Sprintf("%s%s)", s, i.Go)
}
