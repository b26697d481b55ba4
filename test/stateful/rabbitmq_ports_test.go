package stateful_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vacate-dev/vacate/internal/dev/testservers/rabbitmq"
)

// TestRabbitMQTwoClustersOnTheSameAddresses starts two two-member clusters
// of the harness at once on the same IPs, as two runs of this package on one
// machine do when their dev clusters' pod ranges coincide: each must listen
// on an AMQP port of its own and give the CLI tools beside its members a
// distribution port range of its own, so that both start, each keeps its own
// queues, and the CLI tools of both run at the same time on the same IP. It
// needs no dev cluster.
func TestRabbitMQTwoClustersOnTheSameAddresses(t *testing.T) {
	// Outside the dev clusters' pod ranges (127.64.0.0 to 127.191.255.255).
	ips := []string{"127.250.43.1", "127.250.43.2"}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	clusters := make([]*rabbitmq.Cluster, 2)
	errs := make([]error, len(clusters))
	var wg sync.WaitGroup
	for n := range clusters {
		dir := t.TempDir()
		wg.Add(1)
		go func() {
			defer wg.Done()
			clusters[n], errs[n] = rabbitmq.Start(ctx, rabbitmq.Config{IPs: ips, Dir: dir})
		}()
	}
	wg.Wait()
	for n, c := range clusters {
		if errs[n] != nil {
			t.Errorf("starting cluster %d on %v: %v", n, ips, errs[n])
			continue
		}
		t.Cleanup(func() { _ = c.Stop() })
	}
	if t.Failed() {
		return
	}
	a, b := clusters[0], clusters[1]
	if a.AMQPPort() == b.AMQPPort() || a.URL(0) == b.URL(0) {
		t.Fatalf("both clusters listen on %s", a.URL(0))
	}
	minA, maxA := rabbitmqCtlDistPorts(t, a.Env(0))
	minB, maxB := rabbitmqCtlDistPorts(t, b.Env(0))
	if minA <= maxB && minB <= maxA {
		t.Fatalf("the CLI tools of both clusters share distribution ports: %d-%d and %d-%d", minA, maxA, minB, maxB)
	}

	const queue = "only-in-the-first"
	if err := a.DeclareClassicQueue(0, queue); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Fill(0, queue, queue, 1); err != nil {
		t.Fatal(err)
	}
	// rabbitmqctl beside member 0 of each cluster at the same time: both
	// on member 0's IP, each in its cluster's range.
	outs := make([]string, len(clusters))
	for n, c := range clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := c.CLI(ctx, 0, "rabbitmqctl", "-q", "list_queues", "--no-table-headers", "name", "messages")
			outs[n], errs[n] = string(out), err
		}()
	}
	wg.Wait()
	for n := range clusters {
		if errs[n] != nil {
			t.Errorf("cluster %d: %v", n, errs[n])
		}
	}
	if t.Failed() {
		return
	}
	if !strings.Contains(outs[0], queue+"\t1") {
		t.Errorf("the first cluster lists %q: want %s with its message", outs[0], queue)
	}
	if strings.Contains(outs[1], queue) {
		t.Errorf("the second cluster lists the first's queue: %q", outs[1])
	}
}

// rabbitmqCtlDistPorts is the distribution port range an environment gives
// the RabbitMQ CLI tools.
func rabbitmqCtlDistPorts(t *testing.T, env []string) (lo, hi int) {
	t.Helper()
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "RABBITMQ_CTL_DIST_PORT_MIN":
			lo, _ = strconv.Atoi(v)
		case "RABBITMQ_CTL_DIST_PORT_MAX":
			hi, _ = strconv.Atoi(v)
		}
	}
	if lo == 0 || hi < lo {
		t.Fatalf("the environment gives the CLI tools no distribution port range (%d-%d): %q", lo, hi, env)
	}
	return lo, hi
}
