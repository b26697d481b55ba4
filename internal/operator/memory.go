package operator

import (
	"os"
	"runtime/debug"
)

// DefaultGCPercent is vacate-controller's GOGC when its environment sets
// none. The Go collector lets the heap grow to 1+GOGC/100 times what was
// live after the last collection; at the default 100, a controller with
// 10,000 pods in its cache (about 35 MB live) peaked at 112 to 130 MiB of
// RSS. At 50 the heap grows half as far between collections, for more
// frequent ones (docs/performance.md has both figures).
const DefaultGCPercent = 50

// TuneGC sets the collector's target to DefaultGCPercent unless GOGC is
// set (GOMEMLIMIT, a soft limit, works with either).
func TuneGC() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(DefaultGCPercent)
	}
}
