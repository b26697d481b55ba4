package serving

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/index"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/metrics"
	"github.com/vacate-dev/vacate/internal/serving"
)

var (
	now     = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	drained = now.Add(-time.Minute) // when a drain took a pod out of service
)

// gated is a running pod on node n1 with vacate's readiness gate and an IP.
func gated(name string) *testutil.PodBuilder {
	b := testutil.Pod(name).OnNode("n1")
	p := b.Obj()
	p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: serving.Condition}}
	p.Status.PodIP = "10.0.0.7"
	return b
}

// withCondition gives the pod its vacate.dev/serving condition.
func withCondition(p *corev1.Pod, status corev1.ConditionStatus, reason string) *corev1.Pod {
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{
		Type: serving.Condition, Status: status, Reason: reason, LastTransitionTime: metav1.NewTime(drained),
	})
	return p
}

// outOfService is a gated pod a drain took out of service.
func outOfService(name string) *corev1.Pod {
	return withCondition(gated(name).Obj(), corev1.ConditionFalse, serving.ReasonDraining)
}

// evictingDrain is node n1's drain, admitted and running: it may evict.
func evictingDrain() *v1alpha1.NodeDrain {
	nd := testutil.NodeDrain("n1", "", "cli:test")
	nd.Finalizers = []string{v1alpha1.FinalizerRestore}
	nd.Status.Phase = v1alpha1.PhaseEvicting
	meta.SetStatusCondition(&nd.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionAdmitted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonAdmitted})
	return nd
}

// env is a fake API server; it records the status patches sent, and
// refuses them with patchErr when set, or the drain reads with drainErr.
type env struct {
	t        *testing.T
	c        client.Client
	patches  []map[string]any
	patchErr error
	drainErr error
}

func newEnv(t *testing.T, objs ...client.Object) *env {
	t.Helper()
	scheme := testutil.Scheme(t)
	e := &env{t: t}
	base := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&corev1.Pod{}, &v1alpha1.NodeDrain{}).
		WithIndex(&corev1.Pod{}, index.PodNodeName, index.NodeNameOf).Build()
	e.c = interceptor.NewClient(base, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*v1alpha1.NodeDrain); ok && e.drainErr != nil {
				return e.drainErr
			}
			return c.Get(ctx, key, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			data, err := patch.Data(obj)
			if err != nil {
				return err
			}
			var body map[string]any
			if err := json.Unmarshal(data, &body); err != nil {
				t.Fatal(err)
			}
			if sub != "status" || patch.Type() != types.StrategicMergePatchType {
				t.Errorf("patched %s with a %s patch, want the status with a strategic-merge patch", sub, patch.Type())
			}
			e.patches = append(e.patches, body)
			if e.patchErr != nil {
				return e.patchErr
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	return e
}

func (e *env) reconcile(name string) error {
	e.t.Helper()
	r := &Reconciler{Client: e.c, Clock: testingclock.NewFakePassiveClock(now)}
	res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: name}})
	if !res.IsZero() {
		e.t.Errorf("Reconcile asked for a requeue (%+v); it waits for events", res)
	}
	return err
}

func (e *env) pod(name string) *corev1.Pod {
	e.t.Helper()
	p := &corev1.Pod{}
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: "default", Name: name}, p); err != nil {
		e.t.Fatal(err)
	}
	return p
}

func servingSet(reason string) float64 {
	m := &dto.Metric{}
	if err := metrics.ServingSet.WithLabelValues(reason).Write(m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// TestReconcileDecidesWhetherAPodServes: the controller writes the
// condition True in exactly two cases, and otherwise sends nothing:
// a gated pod that has its IP and no condition yet (reason Serving), and a
// pod a drain took out of service (False, Draining) once its node's drain
// no longer evicts: cancelled, being deleted, ended, not admitted (held),
// or gone (reason Restored, the message saying why, as NodeDrain.Evicting
// words it). A pod without the gate, without its IP yet, terminating or
// finished, already serving, False for another reason, or out of service
// while its drain still evicts, is left alone. The condition's time is the
// controller's clock's, and the metric counts each write by reason.
func TestReconcileDecidesWhetherAPodServes(t *testing.T) {
	cancelled := evictingDrain()
	cancelled.Spec.Requesters = nil
	deleting := evictingDrain()
	deleting.DeletionTimestamp = &metav1.Time{Time: now}
	ended := evictingDrain()
	ended.Status.Phase = v1alpha1.PhaseFailed
	held := evictingDrain()
	held.Status.Conditions = nil
	restoring := evictingDrain()
	restoring.Status.Phase = v1alpha1.PhaseRestoring

	noIP := gated("web").Obj()
	noIP.Status.PodIP = ""
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		drain *v1alpha1.NodeDrain // of node n1, if any
		// reason of the condition written True, "" for no write.
		reason  string
		message string
	}{
		{name: "new gated pod with its IP", pod: gated("web").Obj(), drain: evictingDrain(),
			reason: serving.ReasonServing, message: "vacate lets the pod serve until a drain evicts it"},
		{name: "new gated pod, no drain", pod: gated("web").Obj(), reason: serving.ReasonServing,
			message: "vacate lets the pod serve until a drain evicts it"},
		{name: "new gated pod without its IP yet", pod: noIP},
		{name: "pod without the gate", pod: testutil.Pod("web").OnNode("n1").Obj()},
		{name: "terminating gated pod", pod: func() *corev1.Pod {
			p := gated("web").Terminating(now).Obj()
			p.Finalizers = []string{"test/keep"}
			return p
		}()},
		{name: "succeeded gated pod", pod: gated("web").Phase(corev1.PodSucceeded).Obj()},
		{name: "failed gated pod", pod: gated("web").Phase(corev1.PodFailed).Obj()},
		{name: "serving pod", pod: withCondition(gated("web").Obj(), corev1.ConditionTrue, serving.ReasonServing), drain: cancelled},
		{name: "False for another reason", pod: withCondition(gated("web").Obj(), corev1.ConditionFalse, "SomethingElse"), drain: cancelled},
		{name: "out of service, drain evicting", pod: outOfService("web"), drain: evictingDrain()},
		{name: "out of service, drain cancelled", pod: outOfService("web"), drain: cancelled,
			reason: serving.ReasonRestored, message: "the drain of node n1 is cancelled"},
		{name: "out of service, drain restoring", pod: outOfService("web"), drain: restoring,
			reason: serving.ReasonRestored, message: "the drain of node n1 is cancelled"},
		{name: "out of service, drain being deleted", pod: outOfService("web"), drain: deleting,
			reason: serving.ReasonRestored, message: "the drain of node n1 is being deleted"},
		{name: "out of service, drain ended", pod: outOfService("web"), drain: ended,
			reason: serving.ReasonRestored, message: "the drain of node n1 ended (Failed)"},
		{name: "out of service, drain held", pod: outOfService("web"), drain: held,
			reason: serving.ReasonRestored, message: "the drain of node n1 is not admitted (held or waiting)"},
		{name: "out of service, no drain", pod: outOfService("web"),
			reason: serving.ReasonRestored, message: "node n1 has no drain any more"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := []client.Object{tc.pod}
			if tc.drain != nil {
				objs = append(objs, tc.drain)
			}
			e := newEnv(t, objs...)
			before := e.pod("web")
			counted := servingSet(tc.reason)
			if err := e.reconcile("web"); err != nil {
				t.Fatal(err)
			}
			after := e.pod("web")
			if tc.reason == "" {
				if len(e.patches) != 0 {
					t.Errorf("sent %d status patches, want none: %v", len(e.patches), e.patches)
				}
				if !slices.EqualFunc(before.Status.Conditions, after.Status.Conditions, func(a, b corev1.PodCondition) bool {
					return a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason
				}) {
					t.Errorf("conditions changed: %v -> %v", before.Status.Conditions, after.Status.Conditions)
				}
				return
			}
			if len(e.patches) != 1 {
				t.Fatalf("sent %d status patches, want 1", len(e.patches))
			}
			if uid, _ := e.patches[0]["metadata"].(map[string]any)["uid"]; uid != string(tc.pod.UID) {
				t.Errorf("the patch names UID %v, want the pod's %s (a pod recreated under the name is not written)", uid, tc.pod.UID)
			}
			c := serving.Get(after)
			if c == nil {
				t.Fatal("the pod has no condition")
			}
			if c.Status != corev1.ConditionTrue || c.Reason != tc.reason || c.Message != tc.message || !c.LastTransitionTime.Time.Equal(now) {
				t.Errorf("condition %s %s %q at %v, want True %s %q at %v", c.Status, c.Reason, c.Message, c.LastTransitionTime.Time, tc.reason, tc.message, now)
			}
			if _, out := serving.OutOfService(after); out {
				t.Error("the pod is still out of service")
			}
			if got := servingSet(tc.reason) - counted; got != 1 {
				t.Errorf("vacate_serving_conditions_total{reason=%s} grew by %v, want 1", tc.reason, got)
			}
		})
	}
}

// TestReconcileToleratesAPodGoneOrReplaced: the status patch names the
// pod's UID, so a pod deleted or recreated under its name since the read
// makes it fail as NotFound or Conflict; Reconcile drops those (the new
// pod is reconciled on its own event) and counts nothing. Any other error
// is returned, so the pod is retried, and counts nothing either. A pod
// that does not exist any more is no error.
func TestReconcileToleratesAPodGoneOrReplaced(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		name    string
		err     error
		wantErr bool
	}{
		{"gone", apierrors.NewNotFound(pods, "web"), false},
		{"replaced", apierrors.NewConflict(pods, "web", errors.New("uid mismatch")), false},
		{"forbidden", apierrors.NewForbidden(pods, "web", errors.New("no RBAC")), true},
		{"server timeout", apierrors.NewServerTimeout(pods, "patch", 1), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, gated("web").Obj())
			e.patchErr = tc.err
			counted := servingSet(serving.ReasonServing)
			err := e.reconcile("web")
			if (err != nil) != tc.wantErr {
				t.Errorf("Reconcile error %v, want error %v", err, tc.wantErr)
			}
			if len(e.patches) != 1 {
				t.Errorf("sent %d status patches, want 1", len(e.patches))
			}
			if got := servingSet(serving.ReasonServing) - counted; got != 0 {
				t.Errorf("counted %v writes that failed", got)
			}
		})
	}
	t.Run("pod not found", func(t *testing.T) {
		e := newEnv(t)
		if err := e.reconcile("web"); err != nil {
			t.Errorf("Reconcile of a missing pod: %v", err)
		}
		if len(e.patches) != 0 {
			t.Errorf("sent %d status patches for a missing pod", len(e.patches))
		}
	})
}

// TestReconcileKeepsAPodOutOfServiceWhenItsDrainCannotBeRead: only a drain
// read that says NotFound counts as "no drain"; another error is returned
// and the pod stays out of service, so a failing read never puts a pod
// about to be evicted back into its Services.
func TestReconcileKeepsAPodOutOfServiceWhenItsDrainCannotBeRead(t *testing.T) {
	e := newEnv(t, outOfService("web"))
	e.drainErr = apierrors.NewServiceUnavailable("etcd is away")
	if err := e.reconcile("web"); !apierrors.IsServiceUnavailable(err) {
		t.Errorf("Reconcile error %v, want the read's", err)
	}
	if len(e.patches) != 0 {
		t.Errorf("sent %d status patches, want none", len(e.patches))
	}
	if _, out := serving.OutOfService(e.pod("web")); !out {
		t.Error("the pod is back in service")
	}
}

// TestDrainChangeWakesOnlyItsNodesPodsOutOfService: a NodeDrain event maps
// to the pods of its node that a drain took out of service (False,
// Draining), found through the node-name index: not those serving, those
// without the condition, those False for another reason, nor the pods out
// of service on another node.
func TestDrainChangeWakesOnlyItsNodesPodsOutOfService(t *testing.T) {
	elsewhere := outOfService("web-elsewhere")
	elsewhere.Spec.NodeName = "n2"
	e := newEnv(t,
		outOfService("web-1"), outOfService("web-2"),
		withCondition(gated("web-serving").Obj(), corev1.ConditionTrue, serving.ReasonServing),
		withCondition(gated("web-other").Obj(), corev1.ConditionFalse, "SomethingElse"),
		gated("web-new").Obj(), testutil.Pod("plain").OnNode("n1").Obj(), elsewhere,
	)
	r := &Reconciler{Client: e.c, Clock: testingclock.NewFakePassiveClock(now)}
	var got []string
	for _, req := range r.podsOutOfService(context.Background(), evictingDrain()) {
		got = append(got, req.String())
	}
	slices.Sort(got)
	if want := []string{"default/web-1", "default/web-2"}; !slices.Equal(got, want) {
		t.Errorf("a drain of n1 woke %v, want %v", got, want)
	}
}

// TestOnlyAChangeOfEvictingWakesPods: a drain's update lists its node's
// pods only when it changes whether the drain may evict (cancelled, ended,
// admission given up, being deleted); its progress, written with every
// eviction, does not.
func TestOnlyAChangeOfEvictingWakesPods(t *testing.T) {
	running := evictingDrain()
	progressed := running.DeepCopy()
	progressed.Status.Evicted, progressed.Status.Remaining, progressed.Status.Progress = 3, 1, "3/4"
	cancelled := running.DeepCopy()
	cancelled.Spec.Requesters = nil
	ended := running.DeepCopy()
	ended.Status.Phase = v1alpha1.PhaseFailed
	for _, tc := range []struct {
		name     string
		old, new *v1alpha1.NodeDrain
		want     bool
	}{
		{"progress", running, progressed, false},
		{"cancelled", running, cancelled, true},
		{"failed", progressed, ended, true},
		{"still failed", ended, ended.DeepCopy(), false},
		{"back to evicting", cancelled, running, true},
	} {
		if got := evictingChanged(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}); got != tc.want {
			t.Errorf("%s: wakes the node's pods %t, want %t", tc.name, got, tc.want)
		}
	}
}
