package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/vacate-dev/vacate/internal/version"
	"github.com/vacate-dev/vacate/internal/version/buildinfo"
)

// Label names and values of the sidecar's metrics. Each label has a small,
// fixed set of values: nothing names a drain, a run, a node, a command or
// what it printed, so a reader of /metrics learns how many commands ran
// and how they ended, never what they did.
const (
	labelStep   = "step"
	labelResult = "result"
	labelMethod = "method"
	labelCode   = "code"

	resultSucceeded = "Succeeded"
	resultFailed    = "Failed"
	resultTimedOut  = "TimedOut"
	resultStopped   = "Stopped"

	methodOther = "other"
)

// steps are the steps a command runs for (VACATE_STEP).
var steps = []string{"evacuate", "status", "cancel"}

// metrics are vacate-hook's own, on a registry of their own.
type metrics struct {
	reg      *prometheus.Registry
	commands *prometheus.CounterVec
	duration *prometheus.HistogramVec
	requests *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vacate_sidecar_commands_total",
			Help: "Commands of the configuration that vacate-hook ran, by step (evacuate, status, cancel) and result (Succeeded, Failed, TimedOut, Stopped).",
		}, []string{labelStep, labelResult}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "vacate_sidecar_command_duration_seconds",
			Help:    "Time a command of the configuration ran, by step (evacuate, status, cancel).",
			Buckets: prometheus.ExponentialBuckets(0.1, 4, 10),
		}, []string{labelStep}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vacate_sidecar_requests_total",
			Help: "Requests to the evacuation protocol's path, by method (POST, GET, DELETE, other) and HTTP status code; 401 and 403 are callers refused.",
		}, []string{labelMethod, labelCode}),
	}
	m.reg.MustRegister(m.commands, m.duration, m.requests, buildinfo.Collector("vacate-hook", version.Get()))
	for _, s := range steps {
		m.duration.WithLabelValues(s)
		for _, r := range []string{resultSucceeded, resultFailed, resultTimedOut, resultStopped} {
			m.commands.WithLabelValues(s, r)
		}
	}
	return m
}

// command counts a command that ran for step, and how it ended.
func (m *metrics) command(step string, o outcome, took time.Duration) {
	r := resultSucceeded
	switch {
	case o.timedOut:
		r = resultTimedOut
	case o.stopped:
		r = resultStopped
	case o.err != nil:
		r = resultFailed
	}
	m.commands.WithLabelValues(step, r).Inc()
	m.duration.WithLabelValues(step).Observe(took.Seconds())
}

// counted counts every request h answers, by method and status code.
func (m *metrics) counted(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(sw, r)
		method := r.Method
		switch method {
		case http.MethodPost, http.MethodGet, http.MethodDelete:
		default:
			method = methodOther
		}
		m.requests.WithLabelValues(method, strconv.Itoa(sw.code)).Inc()
	})
}

// statusWriter keeps the status code written.
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.code, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// MetricsHandler serves GET /metrics (and HEAD), and nothing else: it
// only reads counters, so no request to it can start, change or cancel a
// drain.
func (s *Sidecar) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	return mux
}

// ServeMetrics serves MetricsHandler on l until ctx ends. It is a listener
// apart from the protocol's (configuration metricsListen), so that a
// NetworkPolicy can admit Prometheus to it without admitting anyone to the
// protocol.
func (s *Sidecar) ServeMetrics(ctx context.Context, l net.Listener) error {
	srv := newServer(s.MetricsHandler())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case <-ctx.Done():
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(shut)
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("serving metrics on %s: %w", l.Addr(), err)
	}
}
