package agent

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metric label names.
const (
	labelSource = "source"
	labelReason = "reason"
)

// Metrics are the agent's Prometheus metrics. Register adds them to a
// registry; the agent serves them on its metrics address.
type Metrics struct {
	// Notices counts the notices that appeared, by source.
	Notices *prometheus.CounterVec
	// NoticeToDrained observes the time from a notice to its node Drained.
	NoticeToDrained *prometheus.HistogramVec
	// DeadlineMargin is, for the last notice of a source with a deadline
	// that ended, how long before its deadline the node was Drained
	// (negative: it was not Drained in time).
	DeadlineMargin *prometheus.GaugeVec
	// Problems is 1 for each problem a source has now.
	Problems *prometheus.GaugeVec
}

// NewMetrics returns the agent's metrics, not registered.
func NewMetrics() *Metrics {
	return &Metrics{
		Notices: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vacate_agent_notices_total",
			Help: "Notices that the machine is going away, by source (shutdown, sigterm, aws-spot, ...).",
		}, []string{labelSource}),
		NoticeToDrained: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "vacate_agent_notice_to_drained_seconds",
			Help:    "Time from a notice to the node's drain Drained, by source.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12),
		}, []string{labelSource}),
		DeadlineMargin: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "vacate_agent_deadline_margin_seconds",
			Help: "For the last notice with a deadline that ended, by source: seconds between Drained and the deadline (negative: the deadline came first).",
		}, []string{labelSource}),
		Problems: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "vacate_agent_problems",
			Help: "Problems a source has now (1 each), by source and reason, such as InhibitDelayTooShort.",
		}, []string{labelSource, labelReason}),
	}
}

// Register adds the metrics to r.
func (m *Metrics) Register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.Notices, m.NoticeToDrained, m.DeadlineMargin, m.Problems} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}
