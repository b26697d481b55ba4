package servedrain_test

import (
	"errors"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/servedrain"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/traffic"
	"github.com/vacate-dev/vacate/internal/metrics"
)

func TestMain(m *testing.M) {
	traffic.MaybeServe() // the pods' servers are this test binary, re-executed
	os.Exit(testenv.Main(m))
}

// runs numbers the scenario runs of this test process: every run gets
// nodes of its own names and pod addresses (the tests share one dev
// cluster, and -count reruns them in the same process).
var runs atomic.Int32

func nextRun() int { return int(runs.Add(1)) }

// TestGateDropsNoRequest (issue 15): under steady traffic through a load
// balancer that follows EndpointSlices a second late, draining two nodes
// of servers that stop at SIGTERM loses requests with `kubectl drain` (the
// harness sees the race) and none with vacate and the readiness gate; the
// endpoint-aware metrics count each pod.
func TestGateDropsNoRequest(t *testing.T) {
	c := testenv.Start(t)
	cl := testenv.Controller(t, c)
	network, err := traffic.NewNetwork("vacate-test-sd", netip.MustParsePrefix("10.223.0.0/16"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = network.Close() })
	// settleTime 3s against a lag of 1s: a margin for a loaded machine,
	// where the balancer's watch may see a change later than vacate's.
	s := servedrain.Setup{Cluster: c, Client: cl, Network: network, Kubectl: c.Binaries[devcluster.Kubectl],
		Settle: 3 * time.Second, Rate: 100, Out: testWriter{t}}
	ctx := testenv.Context(t)

	kubectl, err := servedrain.Run(ctx, s, servedrain.Scenario{Drainer: servedrain.Kubectl}, nextRun())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s, drain %s, %d pods evicted", kubectl.Scenario, kubectl.Requests, kubectl.DrainTime, kubectl.Evicted)
	if kubectl.Evicted == 0 || kubectl.Requests.Failed == 0 {
		t.Errorf("kubectl drain evicted %d pod(s) and failed %d request(s): the harness should see the requests sent to stopped servers",
			kubectl.Evicted, kubectl.Requests.Failed)
	}

	updates := sampleCount(t)
	evicted := testutil.ToFloat64(metrics.OutOfService.WithLabelValues("Evicted"))
	gate, err := servedrain.Run(ctx, s, servedrain.Scenario{Drainer: servedrain.Vacate, Gate: true}, nextRun())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s, drain %s, %d pods evicted", gate.Scenario, gate.Requests, gate.DrainTime, gate.Evicted)
	if gate.Evicted == 0 || gate.Requests.Sent == 0 {
		t.Fatalf("the gated drain evicted %d pod(s) under %d request(s): nothing was measured", gate.Evicted, gate.Requests.Sent)
	}
	if gate.Requests.Lost() != 0 {
		t.Errorf("vacate with the readiness gate lost %d of %d requests: %v", gate.Requests.Lost(), gate.Requests.Sent, gate.Requests.Errors)
	}
	if got := sampleCount(t) - updates; got < uint64(gate.Evicted) {
		t.Errorf("vacate_endpoints_update_seconds observed %d pod(s), want at least %d", got, gate.Evicted)
	}
	if got := testutil.ToFloat64(metrics.OutOfService.WithLabelValues("Evicted")) - evicted; got < float64(gate.Evicted) {
		t.Errorf("vacate_out_of_service_total{result=Evicted} grew by %v, want at least %d", got, gate.Evicted)
	}
}

// TestSurgeDropsNoRequestWithOneReplica (issue 26): the node of a
// one-replica web service is drained under steady traffic. Without a PDB,
// `kubectl drain` drops every request between its pod's end and a new pod
// serving; vacate with surge drops none (the replacement is Ready, and in
// the Service's EndpointSlice, before the pod leaves it). With a PDB of
// minAvailable 1, `kubectl drain` cannot evict it at all; vacate with
// surge drains it, again dropping nothing.
func TestSurgeDropsNoRequestWithOneReplica(t *testing.T) {
	c := testenv.Start(t)
	cl := testenv.Controller(t, c)
	network, err := traffic.NewNetwork("vacate-test-sg", netip.MustParsePrefix("10.224.0.0/16"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = network.Close() })
	ctx := testenv.Context(t)
	measure := func(pdb string, sc servedrain.Scenario) (servedrain.Result, error) {
		t.Helper()
		s := servedrain.Setup{Cluster: c, Client: cl, Network: network, Kubectl: c.Binaries[devcluster.Kubectl],
			Nodes: 2, Drain: 1, Replicas: 1, PDB: pdb, Settle: 3 * time.Second, Rate: 100, KubectlTimeout: 15 * time.Second, Out: testWriter{t}}
		res, err := servedrain.Run(ctx, s, sc, nextRun())
		if err == nil {
			t.Logf("PDB %q, %s: %s, drain %s, %d pod(s) evicted", pdb, res.Scenario, res.Requests, res.DrainTime, res.Evicted)
		}
		return res, err
	}
	surge := servedrain.Scenario{Drainer: servedrain.Vacate, Gate: true, Surge: true}

	kubectl, err := measure("none", servedrain.Scenario{Drainer: servedrain.Kubectl})
	if err != nil {
		t.Fatal(err)
	}
	if kubectl.Evicted != 1 || kubectl.Requests.Lost() == 0 {
		t.Errorf("kubectl drain evicted %d pod(s) and lost %d request(s): want its one pod, and the requests of the gap", kubectl.Evicted, kubectl.Requests.Lost())
	}
	handedOver := testutil.ToFloat64(metrics.Surges.WithLabelValues("HandedOver"))
	for _, pdb := range []string{"none", "minAvailable=1"} {
		res, err := measure(pdb, surge)
		if err != nil {
			t.Fatal(err)
		}
		if res.Evicted != 1 || res.Requests.Sent == 0 {
			t.Fatalf("the surge drain evicted %d pod(s) under %d request(s): nothing was measured", res.Evicted, res.Requests.Sent)
		}
		if res.Requests.Lost() != 0 {
			t.Errorf("PDB %q: vacate with surge lost %d of %d requests: %v", pdb, res.Requests.Lost(), res.Requests.Sent, res.Requests.Errors)
		}
	}
	if got := testutil.ToFloat64(metrics.Surges.WithLabelValues("HandedOver")) - handedOver; got != 2 {
		t.Errorf("vacate_surges_total{result=HandedOver} grew by %v, want 2", got)
	}
	_, err = measure("minAvailable=1", servedrain.Scenario{Drainer: servedrain.Kubectl})
	var ke *servedrain.KubectlError
	if !errors.As(err, &ke) || !strings.Contains(ke.Output, "disruption budget") {
		t.Errorf("kubectl drain of a pod whose PDB is minAvailable 1: %v, want it refused by the disruption budget until its timeout", err)
	}
}

// sampleCount is how many pods vacate_endpoints_update_seconds observed.
func sampleCount(t *testing.T) uint64 {
	t.Helper()
	m := &dto.Metric{}
	if err := metrics.EndpointsUpdate.Write(m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
