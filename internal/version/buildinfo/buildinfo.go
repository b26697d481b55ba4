// Package buildinfo exports a build's version (internal/version) as the
// metric vacate_build_info. It is apart from package version so that the
// CLI, which prints its version, does not link Prometheus' client.
package buildinfo

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/vacate-dev/vacate/internal/version"
)

// Collector is the gauge vacate_build_info, 1 with the labels of build i,
// for program's registry.
func Collector(program string, i version.Info) prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name:        "vacate_build_info",
		Help:        "Always 1; the labels say which build of vacate this process runs.",
		ConstLabels: prometheus.Labels{"program": program},
	}, []string{"version", "commit", "date", "goversion"})
	g.WithLabelValues(i.Version, i.Commit, i.Date, i.GoVersion).Set(1)
	return g
}
