package version

import (
	"strings"
	"testing"
)

func TestSkew(t *testing.T) {
	for _, c := range []struct {
		mine, theirs string
		warn         bool
	}{
		{"v0.3.1", "v0.3.0", false},
		{"v0.3.0", "v0.4.0", true},
		{"v1.3.0", "v0.3.0", true},
		{"v0.3.0-rc.1", "v0.3.2", false},
		{"dev", "v0.3.0", false},
		{"v0.3.0", "", false},
		{"v0.3.0", "0.5.0", true},
	} {
		got := Skew(c.mine, c.theirs)
		if (got != "") != c.warn {
			t.Errorf("Skew(%q, %q) = %q, want a warning: %t", c.mine, c.theirs, got, c.warn)
		}
		if got != "" && (!strings.Contains(got, c.mine) || !strings.Contains(got, c.theirs)) {
			t.Errorf("Skew(%q, %q) = %q: names neither", c.mine, c.theirs, got)
		}
	}
}

func TestLabelValue(t *testing.T) {
	for in, want := range map[string]string{
		"v0.1.0":                  "v0.1.0",
		"v0.1.0+build.5":          "v0.1.0_build.5",
		"v0.1.0-3-gabcdef0-dirty": "v0.1.0-3-gabcdef0-dirty",
		"-x-":                     "x",
		strings.Repeat("a", 70):   strings.Repeat("a", 63),
		"v1/2":                    "v1_2",
	} {
		if got := LabelValue(in); got != want {
			t.Errorf("LabelValue(%q) = %q, want %q", in, got, want)
		}
	}
}
