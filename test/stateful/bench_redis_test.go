//go:build stateful_bench

package stateful_test

import (
	"context"
	"testing"

	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testservers"
	"github.com/vacate-dev/vacate/internal/dev/testservers/redis"
)

func init() {
	benchSystems = append(benchSystems, benchSystem{name: "redis", recipe: "redis-sentinel", start: startRedisBench})
}

// redisBench is Redis with Sentinel under the WAIT 1 load. Its members
// have no preStop hook in the usual charts: kubectl drain's eviction only
// stops the primary, and the sentinels fail over once they see it down.
type redisBench struct {
	rc   *redis.Cluster
	load *redis.Load
}

func startRedisBench(t *testing.T, a *app) benchRun {
	rc, err := redis.Start(testenv.Context(t), redis.Config{IPs: a.IPs(), Dir: t.TempDir(), Password: "bench"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Stop)
	return &redisBench{rc: rc}
}

func (r *redisBench) sidecarEnv(i int) []string { return r.rc.SidecarEnv(i) }

func (r *redisBench) leader(ctx context.Context) (int, error) { return r.rc.View(ctx).PrimaryIndex() }

func (r *redisBench) startLoad(ctx context.Context) error {
	r.load = r.rc.StartLoad(ctx, redis.LoadOptions{})
	return nil
}

func (r *redisBench) progress(ctx context.Context) error { return r.load.WaitProgress(ctx, 20) }

func (r *redisBench) preStop(context.Context, int) error { return nil }

func (r *redisBench) stopMember(i int) { _ = r.rc.StopMember(i) }

func (r *redisBench) stopLoad(ctx context.Context) (testservers.Report, error) {
	return r.load.Stop(ctx)
}
