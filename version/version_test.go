package version

import "testing"

func TestString(t *testing.T) {
	for _, c := range []struct {
		in   Info
		want string
	}{
		{Info{Release: "0.1.0", Go: "go1.26.0"}, "0.1.0 (go1.26.0)"},
		{Info{Release: "0.1.0", Commit: "4f87764a1b2c3d4e5f60718293a4b5c6d7e8f901", Go: "go1.26.0"}, "0.1.0 (commit 4f87764a1b2c, go1.26.0)"},
		{Info{Release: "0.1.0", Commit: "4f87764", Modified: true, Go: "go1.26.0"}, "0.1.0 (commit 4f87764, modified, go1.26.0)"},
	} {
		if got := c.in.String(); got != c.want {
			t.Errorf("%+v: got %q, want %q", c.in, got, c.want)
		}
	}
}

func TestReadRelease(t *testing.T) {
	i := Read()
	if i.Release != Release || i.Go == "" {
		t.Fatalf("Read() = %+v: want release %s and a Go version", i, Release)
	}
}
