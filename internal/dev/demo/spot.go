package demo

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/agent"
	"github.com/vacate-dev/vacate/internal/agent/gcp"
	"github.com/vacate-dev/vacate/internal/dev/doubles/gcptest"
	"github.com/vacate-dev/vacate/internal/progress"
)

// spotNotice shows a node leaving by a spot notice: a cloud metadata
// server (the Compute Engine stand-in of the agent's tests) says the VM is
// preempted, which gives it 30 seconds; vacate-agent, run in this process
// with its GCP source, requests the node's drain with that deadline, and
// the node is drained before it. The VM does not really go: withdrawing
// the notice gives the node back.
func (d *demo) spotNotice(ctx context.Context, node string) error {
	md, err := gcptest.Listen()
	if err != nil {
		return err
	}
	defer md.Stop()
	a := agent.New(agent.Options{Client: d.cl, Node: node, Log: logr.Discard(),
		Sources: []agent.Source{gcp.New(gcp.Options{Endpoint: md.URL(), Log: logr.Discard()})}})
	actx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(actx) }()
	defer func() {
		cancel()
		<-done
	}()

	d.step("%s gets a spot preemption notice: its metadata server (Compute Engine's, simulated) turns instance/preempted to TRUE, "+
		"which leaves the VM 30s; vacate-agent on the node requests its drain with that deadline", node)
	md.SetPreempted(true)
	noticed := time.Now()
	nd := &v1alpha1.NodeDrain{}
	requester := agent.RequesterPrefix + gcp.SourcePreempted
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := d.cl.Get(ctx, types.NamespacedName{Name: node}, nd)
		return err == nil && nd.Status.Deadline != nil && nd.Status.Deadline.Requester == requester, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for vacate-agent's drain of %s: %w", node, err)
	}
	f := progress.NewFollower(d.out, clock.RealClock{}, []string{node})
	if err := f.Until(ctx, d.cl, time.Minute, nil); err != nil {
		return fmt.Errorf("following the drain of %s: %w", node, err)
	}
	if err := d.cl.Get(ctx, types.NamespacedName{Name: node}, nd); err != nil {
		return err
	}
	if nd.Status.Phase != v1alpha1.PhaseDrained || nd.Status.CompletionTime == nil {
		return fmt.Errorf("the drain of %s ended %s, not Drained", node, nd.Status.Phase)
	}
	d.step("%s drained %s after the notice, %s before its deadline (requester %s, mode %s): the VM may go",
		node, nd.Status.CompletionTime.Sub(noticed).Round(100*time.Millisecond),
		nd.Status.Deadline.Time.Sub(nd.Status.CompletionTime.Time).Round(time.Second), requester, nd.Spec.Mode)

	d.step("this VM is not really going: the notice is withdrawn, and vacate-agent gives %s back", node)
	md.SetPreempted(false)
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := d.cl.Get(ctx, types.NamespacedName{Name: node}, &v1alpha1.NodeDrain{})
		return apierrors.IsNotFound(err), nil
	})
}
