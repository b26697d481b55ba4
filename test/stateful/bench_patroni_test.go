//go:build stateful_bench

package stateful_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testservers"
	"github.com/vacate-dev/vacate/internal/dev/testservers/patroni"
)

func init() {
	benchSystems = append(benchSystems, benchSystem{name: "postgresql", recipe: "postgresql-patroni", start: startPatroniBench})
}

// patroniBench is PostgreSQL under Patroni, committing a row every 10 ms.
// Spilo's pods have no preStop hook: kubectl drain's eviction stops the
// primary's Patroni (SIGTERM), which shuts PostgreSQL down and gives up the
// leader lock, and a replica takes over.
type patroniBench struct {
	pc   *patroni.Cluster
	load *patroni.Load
}

// benchDCS numbers the etcd of each run, on an address outside the pods'.
var benchDCS atomic.Int32

func startPatroniBench(t *testing.T, a *app) benchRun {
	var ips []netip.Addr
	for _, ip := range a.IPs() {
		ips = append(ips, netip.MustParseAddr(ip))
	}
	dcs := netip.MustParseAddr(fmt.Sprintf("127.254.%d.1", benchDCS.Add(1)))
	pc, err := patroni.Start(testenv.Context(t), patroni.Options{Dir: t.TempDir(), DCSIP: dcs, MemberIPs: ips})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pc.Stop)
	return &patroniBench{pc: pc}
}

func (p *patroniBench) sidecarEnv(i int) []string { return p.pc.SidecarEnv(i) }

func (p *patroniBench) leader(ctx context.Context) (int, error) {
	v, err := p.pc.View(ctx)
	if err != nil {
		return -1, err
	}
	if i := p.pc.Index(v.Leader); i >= 0 {
		return i, nil
	}
	return -1, fmt.Errorf("no leader: %s", v)
}

func (p *patroniBench) startLoad(ctx context.Context) (err error) {
	p.load, err = p.pc.StartLoad(ctx, 10*time.Millisecond)
	return err
}

func (p *patroniBench) progress(ctx context.Context) error { return p.load.WaitAcked(ctx, 20) }

func (p *patroniBench) preStop(context.Context, int) error { return nil }

func (p *patroniBench) stopMember(i int) { p.pc.StopMember(i, 30*time.Second) }

func (p *patroniBench) stopLoad(ctx context.Context) (testservers.Report, error) {
	return p.load.Stop(ctx)
}
