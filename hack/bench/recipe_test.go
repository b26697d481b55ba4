package main

import (
	"testing"
	"time"
)

func TestResolveCount(t *testing.T) {
	for _, c := range []struct {
		in    string
		total int
		want  int
		err   bool
	}{
		{"10", 20, 10, false}, {"10%", 200, 20, false}, {"10%", 5, 1, false}, {"15%", 10, 2, false},
		{"0", 20, 0, true}, {"21", 20, 0, true}, {"0%", 20, 0, true}, {"x", 20, 0, true},
	} {
		got, err := resolveCount(c.in, c.total)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("resolveCount(%q, %d) = %d, %v; want %d, error %t", c.in, c.total, got, err, c.want, c.err)
		}
	}
}

func TestRecipeSplit(t *testing.T) {
	r := recipe{pods: 480, perDeploy: 45, stsSize: 30}
	if d, sts := r.split(); d != 10 || len(sts) != 1 || sts[0] != 30 {
		t.Errorf("480 pods: %d Deployments, StatefulSets %v; want 10 and [30]", d, sts)
	}
	r.pods = 10000
	d, sts := r.split()
	if d*45+sum(sts) != 10000 || d != 208 {
		t.Errorf("10000 pods: %d Deployments, StatefulSets %v", d, sts)
	}
	for _, n := range sts {
		if n > 30 {
			t.Errorf("StatefulSet of %d pods, more than 30", n)
		}
	}
}

func TestFirstEvictionDelays(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	reqs := []request{
		{user: adminUser, verb: "create", resource: "nodedrains", name: "node-0", code: 201, received: at(0)},
		{user: controllerUser, verb: "patch", resource: "nodes", code: 200, received: at(10)},
		{user: controllerUser, verb: "create", resource: "pods", subresource: "eviction", code: 201, received: at(2050)},
		{user: controllerUser, verb: "create", resource: "pods", subresource: "eviction", code: 201, received: at(2060)},
		{user: adminUser, verb: "create", resource: "nodedrains", name: "node-1", code: 201, received: at(5000)},
		{user: controllerUser, verb: "create", resource: "pods", subresource: "eviction", code: 429, received: at(5030)},
	}
	got := firstEvictionDelays(reqs, adminUser)
	if len(got) != 2 || got[0] != 2050*time.Millisecond || got[1] != 30*time.Millisecond {
		t.Errorf("delays = %v, want [2.05s 30ms] (first call, whatever its answer)", got)
	}
}
