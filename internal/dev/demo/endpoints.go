package demo

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/servedrain"
	"github.com/vacate-dev/vacate/internal/dev/traffic"
)

// endpointsPrefix is where the demo's web servers get their addresses: a
// network namespace of its own, never routed anywhere else.
var endpointsPrefix = netip.MustParsePrefix("10.222.0.0/16")

// endpointAware shows a service drained without dropping a request: web
// servers (real processes on their pods' addresses, stopping at SIGTERM
// like an app without a preStop sleep) behind a load balancer that follows
// EndpointSlices a second late, drained once with `kubectl drain` and once
// by vacate with the readiness gate vacate.dev/serving.
func (d *demo) endpointAware(ctx context.Context) error {
	network, err := traffic.NewNetwork("vacate-demo-web", endpointsPrefix)
	if err != nil {
		d.step("skipping the endpoint-aware scene: it needs a network namespace for the servers' addresses (root): %v", err)
		return nil
	}
	defer network.Close()
	s := servedrain.Setup{Cluster: d.c, Client: d.cl, Network: network, Kubectl: d.c.Binaries[devcluster.Kubectl], Out: indent(d.out)}
	d.step("endpoint-aware eviction: web, 8 HTTP servers on 4 new nodes behind a load balancer that routes 200 requests/s to the " +
		"endpoints EndpointSlices show ready, learning changes 1s late (as kube-proxy does); each server stops listening at SIGTERM. " +
		"Two of the nodes are drained twice, on fresh nodes each time: with kubectl drain, then by vacate with the readiness gate")
	var results []servedrain.Result
	for i, sc := range []servedrain.Scenario{{Drainer: servedrain.Kubectl}, {Drainer: servedrain.Vacate, Gate: true}} {
		res, err := servedrain.Run(ctx, s, sc, i)
		if err != nil {
			return fmt.Errorf("%s: %w", sc, err)
		}
		results = append(results, res)
	}
	for _, r := range results {
		d.step("%-34s %4d of %4d requests failed; drain took %s", r.Scenario.String()+":", r.Requests.Lost(), r.Requests.Sent, r.DrainTime.Round(100*time.Millisecond))
	}
	gate := results[len(results)-1]
	if lost := gate.Requests.Lost(); lost > 0 {
		d.step("with the gate, %d request(s) still failed: this machine delayed the load balancer's view by more than the settle "+
			"time's margin over its lag (2s against 1s); on a real cluster, set endpoints.settleTime above your data planes' lag "+
			"(docs/endpoint-aware.md)", lost)
		return nil
	}
	d.step("with the gate, vacate took each pod out of its Service (condition vacate.dev/serving False), waited until its EndpointSlice " +
		"showed it not ready and endpoints.settleTime (2s) more, then evicted it: no request reached a stopped server (docs/endpoint-aware.md)")
	return nil
}
