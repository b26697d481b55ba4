package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/vacate-dev/vacate/internal/hook"
)

// TestHookCallCounts: a call counts under its method and result, and its
// duration is observed unless it was not made (NoToken); every method's
// and result's series exists from registration, at zero.
func TestHookCallCounts(t *testing.T) {
	Register()
	if n, want := testutil.CollectAndCount(HookCalls), 3*len(hook.Results); n < want {
		t.Errorf("%d series of vacate_hook_calls_total, want every method and result: %d", n, want)
	}
	calls := HookCalls.WithLabelValues("GET", hook.Completed)
	before, observed := testutil.ToFloat64(calls), histogramCount(t, "GET")
	HookCall(hook.Call{Method: "GET", Result: hook.Completed, Duration: 30 * time.Millisecond})
	if got := testutil.ToFloat64(calls); got != before+1 {
		t.Errorf("GET Completed: %v calls, want %v", got, before+1)
	}
	if got := histogramCount(t, "GET"); got != observed+1 {
		t.Errorf("GET durations observed: %d, want %d", got, observed+1)
	}
	HookCall(hook.Call{Method: "GET", Result: hook.ResultNoToken})
	if got := histogramCount(t, "GET"); got != observed+1 {
		t.Errorf("a call not made was observed: %d durations, want %d", got, observed+1)
	}
}

func histogramCount(t *testing.T, method string) uint64 {
	t.Helper()
	m := &dto.Metric{}
	if err := HookCallDuration.WithLabelValues(method).(prometheus.Metric).Write(m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}
