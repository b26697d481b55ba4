package devcluster_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
)

// TestPauseResumeAndRestartAPIServer freezes the API server, continues it,
// then kills and restarts it: requests fail while it is frozen, work again
// after, the restarted server keeps the cluster's data, and the State file
// names the new pid, so `vacate dev down` stops it.
func TestPauseResumeAndRestartAPIServer(t *testing.T) {
	c := testenv.Start(t)
	ctx := testenv.Context(t)
	ns := testenv.Namespace(t, c)

	t.Log("freezing the API server (SIGSTOP)")
	if err := c.Pause(devcluster.KubeAPIServer); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err := c.Client.CoreV1().Namespaces().Get(short, ns, metav1.GetOptions{})
	cancel()
	if err == nil {
		t.Error("a frozen API server answered")
	}
	if err := c.Resume(devcluster.KubeAPIServer); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
		t.Fatalf("after SIGCONT: %v", err)
	}

	before, err := devcluster.ReadState(c.Dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("killing and restarting the API server")
	if err := c.Restart(ctx, devcluster.KubeAPIServer); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
		t.Fatalf("after the restart, the namespace created before: %v", err)
	}
	after, err := devcluster.ReadState(c.Dir)
	if err != nil {
		t.Fatal(err)
	}
	pid := func(s devcluster.State) (int, string) {
		for _, comp := range s.Components {
			if comp.Name == devcluster.KubeAPIServer {
				return comp.PID, comp.Binary
			}
		}
		return 0, ""
	}
	oldPID, _ := pid(before)
	newPID, bin := pid(after)
	if newPID == oldPID || !devcluster.ProcessAlive(newPID, bin) {
		t.Errorf("State file names API server pid %d (before %d), want the live restarted one", newPID, oldPID)
	}
	if devcluster.ProcessAlive(oldPID, bin) {
		t.Errorf("the old API server (pid %d) still runs", oldPID)
	}
	if len(after.Components) != len(before.Components) {
		t.Errorf("State file lists %d components after the restart, %d before", len(after.Components), len(before.Components))
	}
}
