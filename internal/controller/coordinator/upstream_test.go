package coordinator_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"

	"github.com/vacate-dev/vacate/internal/controller/coordinator"
	"github.com/vacate-dev/vacate/internal/dev/gobuild"
	er "github.com/vacate-dev/vacate/internal/evictionrequest"
	"github.com/vacate-dev/vacate/internal/hook"
)

// mover is the upstream-style responder program's name
// (examples/eviction-responder), above vacate's in priority.
const mover = "mover.example.com/responder"

// TestAnUpstreamResponderGoesFirst: a pod declares two responders, an
// operator's (examples/eviction-responder, a separate program written only
// against the upstream types, at priority 8000) and vacate's (its HTTP
// hook, 5000). A descheduler asks for its eviction: the operator takes its
// turn first, heartbeats while it works, completes; only then is vacate's
// hook POSTed; once the hook completes, the evictor evicts the pod.
func TestAnUpstreamResponderGoesFirst(t *testing.T) {
	w, target, app := hookedWorld(t, 18094, corev1.EvictionResponder{Name: mover, Priority: ptr.To[int32](8000)})
	runResponder(t, w, "-work", "3s", "-heartbeat", "1s")
	w.request(target, "rebalance-9")
	ev := w.waitEviction(target, "the operator at work", func(ev *lifecyclev1alpha1.Eviction) bool {
		return state(ev, mover) == lifecyclev1alpha1.ResponderStateActive && strings.Contains(message(ev, mover), "moving the pod's data")
	})
	if state(ev, coordinator.Responder) != lifecyclev1alpha1.ResponderStateInactive || len(app.posted()) > 0 {
		t.Errorf("vacate's turn began while the operator's ran:\n%s", describe(ev))
	}
	w.waitEviction(target, "vacate's turn, the hook in progress", func(ev *lifecyclev1alpha1.Eviction) bool {
		return state(ev, coordinator.Responder) == lifecyclev1alpha1.ResponderStateActive && strings.Contains(message(ev, coordinator.Responder), "InProgress")
	})
	app.set(hook.Completed)
	ev = w.waitEviction(target, "TargetEvicted", func(ev *lifecyclev1alpha1.Eviction) bool {
		return meta.IsStatusConditionTrue(ev.Status.Conditions, string(lifecyclev1alpha1.EvictionConditionTargetEvicted))
	})
	t.Logf("at the end:\n%s", describe(ev))
	done := responderStatus(ev, mover)
	if state(ev, mover) != lifecyclev1alpha1.ResponderStateCompleted || done.CompletionTime == nil || done.HeartbeatTime == nil ||
		!done.HeartbeatTime.After(done.StartTime.Time) || message(ev, mover) != "the pod's data moved" {
		t.Errorf("the operator's turn: %+v; want Completed, with heartbeats after its start and its last message", done)
	}
	app.mu.Lock()
	firstPost := app.firstPost
	app.mu.Unlock()
	if done.CompletionTime != nil && firstPost.Before(done.CompletionTime.Time.Add(-time.Second)) { // completionTime has whole seconds
		t.Errorf("vacate's hook was POSTed at %s, before the operator completed at %s", firstPost, done.CompletionTime)
	}
	if state(ev, coordinator.Responder) != lifecyclev1alpha1.ResponderStateCompleted || state(ev, er.Evictor) != lifecyclev1alpha1.ResponderStateCompleted {
		t.Error("vacate's turn and the evictor's did not complete")
	}
	if n := w.acceptedEvictions(target); n != 1 {
		t.Errorf("the pod was evicted %d times, want once", n)
	}
}

// runResponder builds examples/eviction-responder and runs it as mover in
// the world's namespace until the test ends.
func runResponder(t *testing.T, w *world, args ...string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "eviction-responder")
	if err := gobuild.Build(context.Background(), gobuild.Options{}, "github.com/vacate-dev/vacate/examples/eviction-responder", bin); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(t.TempDir(), "responder.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"-kubeconfig", w.c.Kubeconfig, "-namespace", w.ns, "-name", mover}, args...)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		out, _ := os.ReadFile(log.Name())
		t.Logf("the responder's log:\n%s", out)
	})
}

// responderStatus is the responder's entry in the Eviction.
func responderStatus(ev *lifecyclev1alpha1.Eviction, name string) lifecyclev1alpha1.ResponderStatus {
	for _, r := range ev.Status.Responders {
		if r.Name == name {
			return r
		}
	}
	return lifecyclev1alpha1.ResponderStatus{}
}

// TestAStaleHeartbeatPassesTheTurnOn (make test-stale-heartbeat, outside
// the suite: it takes 20 real minutes): the operator's program takes its
// turn and then says nothing (-stall). The coordinator keeps the turn with
// it for 20 minutes from its last report, by the API server's clock, then
// marks it Interrupted and gives vacate's responder the turn; vacate's hook
// completes and the pod is evicted.
func TestAStaleHeartbeatPassesTheTurnOn(t *testing.T) {
	if os.Getenv("VACATE_STALE_HEARTBEAT") == "" {
		t.Skip("takes 20 minutes: run make test-stale-heartbeat")
	}
	w, target, app := hookedWorld(t, 18095, corev1.EvictionResponder{Name: mover, Priority: ptr.To[int32](8000)})
	runResponder(t, w, "-stall")
	w.request(target, "rebalance-11")
	ev := w.waitEviction(target, "the operator's turn", func(ev *lifecyclev1alpha1.Eviction) bool {
		return state(ev, mover) == lifecyclev1alpha1.ResponderStateActive
	})
	started := responderStatus(ev, mover).StartTime
	t.Logf("the operator's turn began at %s and it says nothing; waiting for the coordinator to interrupt it", started)
	time.Sleep(19 * time.Minute)
	if ev = w.waitEviction(target, "still the operator's turn", func(*lifecyclev1alpha1.Eviction) bool { return true }); state(ev, mover) != lifecyclev1alpha1.ResponderStateActive {
		t.Fatalf("the turn passed on before 20 minutes:\n%s", describe(ev))
	}
	ev = w.waitEvictionFor(target, "the operator interrupted, vacate's turn", 5*time.Minute, func(ev *lifecyclev1alpha1.Eviction) bool {
		return state(ev, mover) == lifecyclev1alpha1.ResponderStateInterrupted && state(ev, coordinator.Responder) == lifecyclev1alpha1.ResponderStateActive
	})
	t.Logf("interrupted at about %s, %s after its start:\n%s", time.Now().UTC().Format(time.RFC3339), time.Since(started.Time).Round(time.Second), describe(ev))
	app.set(hook.Completed)
	w.waitEviction(target, "TargetEvicted", func(ev *lifecyclev1alpha1.Eviction) bool {
		return meta.IsStatusConditionTrue(ev.Status.Conditions, string(lifecyclev1alpha1.EvictionConditionTargetEvicted))
	})
}
