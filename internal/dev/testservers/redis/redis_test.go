package redis

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// TestTwoClustersOnTheSameAddresses starts two clusters on the same IPs, as
// two runs of test/stateful on one machine do when their dev clusters' pod
// ranges coincide: each cluster must listen on ports of its own, so that
// every process of both runs, and each keeps its own data.
func TestTwoClustersOnTheSameAddresses(t *testing.T) {
	// Outside the dev clusters' pod ranges (127.64.0.0 to 127.191.255.255).
	ips := []string{"127.250.41.1", "127.250.41.2"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var clusters []*Cluster
	for range 2 {
		c, err := Start(ctx, Config{IPs: ips, Dir: t.TempDir(), Password: "two-runs"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Stop)
		clusters = append(clusters, c)
	}
	for n, c := range clusters {
		for _, m := range c.Members() {
			for _, p := range []*Process{m.Server, m.Sentinel} {
				if !p.Running() {
					data, _ := os.ReadFile(p.logPath)
					t.Errorf("cluster %d: %s (%s) exited:\n%s", n, p.Name, p.Addr, data)
				}
			}
		}
	}
	if t.Failed() {
		return
	}
	a, b := clusters[0], clusters[1]
	if a.Member(0).Server.Addr == b.Member(0).Server.Addr || a.SentinelAddrs()[0] == b.SentinelAddrs()[0] {
		t.Fatalf("both clusters listen on %s and %s", a.Member(0).Server.Addr, a.SentinelAddrs()[0])
	}
	pa, err := a.View(ctx).AgreedPrimary()
	if err != nil {
		t.Fatal(err)
	}
	pb, err := b.View(ctx).AgreedPrimary()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Client(pa).Set(ctx, "written-to", "the first cluster", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := b.Client(pb).Get(ctx, "written-to").Result(); !errors.Is(err, goredis.Nil) {
		t.Fatalf("the second cluster's primary %s has the first's key: %q (%v)", pb, v, err)
	}
}
