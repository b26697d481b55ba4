package patroni

import (
	"context"
	"net/netip"
	"testing"
	"time"
)

// TestTwoClustersOnTheSameAddresses starts two one-member clusters on the
// same IPs (the member's and the DCS's), as two runs of test/stateful on
// one machine do when their dev clusters' pod ranges coincide: each must
// listen on ports of its own (PostgreSQL, Patroni's REST API, etcd), so that
// both start and each keeps its own data.
func TestTwoClustersOnTheSameAddresses(t *testing.T) {
	// Outside the dev clusters' pod ranges (127.64.0.0 to 127.191.255.255).
	dcs, member := netip.MustParseAddr("127.250.42.253"), netip.MustParseAddr("127.250.42.1")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var clusters []*Cluster
	for n := range 2 {
		c, err := Start(ctx, Options{Dir: t.TempDir(), DCSIP: dcs, MemberIPs: []netip.Addr{member}})
		if err != nil {
			t.Fatalf("starting cluster %d on %s (DCS %s): %v", n, member, dcs, err)
		}
		t.Cleanup(c.Stop)
		clusters = append(clusters, c)
	}
	a, b := clusters[0], clusters[1]
	if a.RESTURL(0) == b.RESTURL(0) || a.DSN() == b.DSN() || a.DCSURL() == b.DCSURL() {
		t.Fatalf("both clusters listen on %s, %s and %s", a.RESTURL(0), a.DSN(), a.DCSURL())
	}
	ca, err := a.connectPrimary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close(context.Background())
	if _, err := ca.Exec(ctx, "CREATE TABLE only_in_the_first (id int)"); err != nil {
		t.Fatal(err)
	}
	cb, err := b.connectPrimary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close(context.Background())
	var found bool
	if err := cb.QueryRow(ctx, "SELECT to_regclass('only_in_the_first') IS NOT NULL").Scan(&found); err != nil {
		t.Fatal(err)
	}
	if found {
		t.Fatal("the second cluster has the first's table: both are one PostgreSQL")
	}
}
