//go:build stateful_bench

package stateful_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testservers"
	"github.com/vacate-dev/vacate/internal/dev/testservers/rabbitmq"
)

func init() {
	benchSystems = append(benchSystems, benchSystem{name: "rabbitmq", recipe: "rabbitmq", start: startRabbitMQBench})
}

// rabbitBench is RabbitMQ with three quorum queues, all led at first by
// member 0, whose node drains, under publishers with confirms and a
// consumer. With kubectl drain, the pod's preStop hook is the one the
// RabbitMQ Cluster Operator sets.
type rabbitBench struct {
	rc     *rabbitmq.Cluster
	queues []string
	load   *rabbitmq.Load
}

func startRabbitMQBench(t *testing.T, a *app) benchRun {
	rc, err := rabbitmq.Start(testenv.Context(t), rabbitmq.Config{IPs: a.IPs(), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rc.Stop() })
	r := &rabbitBench{rc: rc}
	for q := range 3 {
		name := fmt.Sprintf("orders-%d", q)
		if err := rc.DeclareQuorumQueue(0, name); err != nil {
			t.Fatal(err)
		}
		r.queues = append(r.queues, name)
	}
	return r
}

func (r *rabbitBench) sidecarEnv(i int) []string { return r.rc.Env(i) }

func (r *rabbitBench) leader(context.Context) (int, error) { return 0, nil }

func (r *rabbitBench) startLoad(context.Context) error {
	r.load = rabbitmq.StartLoad(rabbitmq.LoadConfig{URLs: r.rc.URLs(), Queues: r.queues})
	return nil
}

func (r *rabbitBench) progress(ctx context.Context) error {
	target := r.load.Acked() + 50
	return waitErr(ctx, func() bool { return r.load.Acked() >= target })
}

func (r *rabbitBench) preStop(ctx context.Context, i int) error {
	return rabbitmqOperatorPreStop(ctx, r.rc, i)
}

// rabbitmqOperatorPreStop is the RabbitMQ Cluster Operator's preStop hook:
// wait until the node's quorum queues have a quorum plus one online and its
// mirrored classic queues a synchronised mirror, then drain the node (put
// it in maintenance).
func rabbitmqOperatorPreStop(ctx context.Context, rc *rabbitmq.Cluster, i int) error {
	for _, args := range [][]string{
		{"await_online_quorum_plus_one", "-t", "604800"},
		{"await_online_synchronized_mirror", "-t", "604800"},
		{"drain", "-t", "604800"},
	} {
		if _, err := rc.CLI(ctx, i, "rabbitmq-upgrade", args...); err != nil {
			return err
		}
	}
	return nil
}

func (r *rabbitBench) stopMember(i int) { _ = r.rc.StopMember(i) }

func (r *rabbitBench) stopLoad(ctx context.Context) (testservers.Report, error) {
	return r.load.Stop(ctx), nil
}
