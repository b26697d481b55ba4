// Package version is what a vacate binary knows of its own build: the
// release it is (set at link time by make release, make install, make
// images and hack/dist with -X), the commit and its date (from the link
// flags, else from the VCS stamp the go command records), and the Go
// toolchain. The controller and the agent export it as the metric
// vacate_build_info (package buildinfo) and log it first; the CLI prints it with `vacate
// version` and compares it with the controller's.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// Set at link time: -ldflags "-X github.com/vacate-dev/vacate/internal/version.version=v0.1.0 ...".
// LDFlags writes these.
var (
	version string
	commit  string
	date    string
)

// Path is this package's import path, for -X.
const Path = "github.com/vacate-dev/vacate/internal/version"

// Dev is the version of a build that was not given one.
const Dev = "dev"

// LDFlags are the linker flags that stamp a build with v, commit c and
// date d (RFC 3339); empty values are left out.
func LDFlags(v, c, d string) string {
	var fl []string
	for name, value := range map[string]string{"version": v, "commit": c, "date": d} {
		if value != "" {
			fl = append(fl, fmt.Sprintf("-X %s.%s=%s", Path, name, value))
		}
	}
	// Map order is random; the flags' order must not be (build cache keys).
	slices.Sort(fl)
	return strings.Join(fl, " ")
}

// Info is a build's identity.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"`
	Date      string `json:"date,omitempty"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Get is this binary's Info: the link-time values, and where those are
// missing the go command's VCS stamp (vcs.revision, vcs.time, "-dirty" for
// vcs.modified).
func Get() Info {
	i := Info{Version: version, Commit: commit, Date: date, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if i.Commit == "" {
					i.Commit = s.Value
				}
			case "vcs.time":
				if i.Date == "" {
					i.Date = s.Value
				}
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if modified && commit == "" && i.Commit != "" {
			i.Commit += "-dirty"
		}
	}
	if i.Version == "" {
		i.Version = Dev
	}
	return i
}

// String is the one line --version prints.
func (i Info) String() string {
	s := i.Version
	if i.Commit != "" {
		s += " (commit " + i.Commit
		if i.Date != "" {
			s += ", " + i.Date
		}
		s += ")"
	}
	return s + ", " + i.GoVersion + ", " + i.Platform
}

// KeysAndValues are the fields of a structured log line.
func (i Info) KeysAndValues() []any {
	return []any{"version", i.Version, "commit", i.Commit, "date", i.Date, "goVersion", i.GoVersion}
}

// Skew compares two versions of vacate (a CLI's and a controller's). It
// says nothing ("") when both are releases of the same major and minor
// version, and when either is not a release (a development build compares
// with anything); otherwise it says how they differ.
func Skew(mine, theirs string) string {
	a, errA := utilversion.ParseSemantic(mine)
	b, errB := utilversion.ParseSemantic(theirs)
	if errA != nil || errB != nil {
		return ""
	}
	if a.Major() == b.Major() && a.Minor() == b.Minor() {
		return ""
	}
	return fmt.Sprintf("this vacate is %s and the controller is %s: their minor versions differ, so fields or rules one of them knows may be missing in the other; use a CLI of the controller's version", mine, theirs)
}

// LabelValue is v as a Kubernetes label value (at most 63 characters of
// [A-Za-z0-9._-], starting and ending with an alphanumeric): a semver's
// build metadata "+..." becomes "_...".
func LabelValue(v string) string {
	b := []byte(v)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '-', c == '_':
		default:
			b[i] = '_'
		}
	}
	s := strings.Trim(string(b), "._-")
	if len(s) > 63 {
		s = strings.TrimRight(s[:63], "._-")
	}
	return s
}
