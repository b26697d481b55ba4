package trigger

import (
	"context"
	"slices"
	"testing"
	"time"

	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/requeue"
	"github.com/vacate-dev/vacate/internal/metrics"
)

// This file tests the node's finalizer: it holds a deleted node until its
// drain is done or the bound passes, also when the node's policy is unclear.

// TestNodeFinalizerHoldsADeletedNodeUntilItsDrainIsDoneOrTheBoundPasses:
// under onNodeDelete: Drain a live node gets vacate.dev/drain; under Orphan
// it loses it, deleted or not. A deleted node is let go once its drain is
// Drained in Decommission for its current generation (Drained in
// Maintenance runs again: the node goes away), else when
// timeouts.nodeDeletion has passed since the deletion, whatever the drain's
// state (a Warning event says what it was, and the release is counted);
// before that the pass asks to be woken when the bound passes. A deleted
// node without the finalizer is not given one.
func TestNodeFinalizerHoldsADeletedNodeUntilItsDrainIsDoneOrTheBoundPasses(t *testing.T) {
	for _, tc := range append(liveNodeFinalizerCases(), deletedNodeFinalizerCases()...) {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, interceptor.Funcs{}, objects(tc.node, tc.nd, tc.policy)...)
			before := promtestutil.ToFloat64(metrics.NodeDeletionTimeouts)
			res, err := w.reconcile()
			if err != nil || res != tc.wantResult {
				t.Fatalf("Reconcile = %+v, %v; want %+v and no error", res, err, tc.wantResult)
			}
			tc.checkNode(t, w.node())
			w.checkEvent(tc.wantEvent)
			wantCount := 0.0
			if tc.wantEvent != "" {
				wantCount = 1
			}
			if got := promtestutil.ToFloat64(metrics.NodeDeletionTimeouts) - before; got != wantCount {
				t.Errorf("releases counted %v, want %v", got, wantCount)
			}
		})
	}
}

// finalizerCase is a node, its drain and its policy, and what one pass
// leaves: its result, the node let go or its finalizers, the Warning.
type finalizerCase struct {
	name       string
	node       *corev1.Node
	nd         *v1alpha1.NodeDrain
	policy     *v1alpha1.DrainPolicy
	wantResult reconcile.Result
	wantGone   bool
	wantFin    []string // the node's finalizers, when it stays
	wantEvent  string   // a Warning's text, "" for none
}

// checkNode checks that the node n read after the pass is let go when the
// case says so, else still there with the finalizers it wants.
func (tc finalizerCase) checkNode(t *testing.T, n *corev1.Node) {
	t.Helper()
	switch {
	case tc.wantGone && n != nil:
		t.Errorf("the node is still there with finalizers %v, want it let go", n.Finalizers)
	case !tc.wantGone && n == nil:
		t.Errorf("the node is gone, want it held with %v", tc.wantFin)
	case !tc.wantGone && !slices.Equal(n.Finalizers, tc.wantFin):
		t.Errorf("the node's finalizers %v, want %v", n.Finalizers, tc.wantFin)
	}
}

// liveNodeFinalizerCases: a live node gets the finalizer under
// onNodeDelete: Drain and loses it under Orphan.
func liveNodeFinalizerCases() []finalizerCase {
	return []finalizerCase{
		{
			name:    "a live node under onNodeDelete: Drain gets it",
			node:    newNode("node-a").Finalizers(otherFinalizer).Obj(),
			policy:  defaultPolicy(onDelete),
			wantFin: []string{otherFinalizer, v1alpha1.FinalizerDrain},
		},
		{
			name:    "a live node under Orphan loses it",
			node:    newNode("node-a").Finalizers(v1alpha1.FinalizerDrain, otherFinalizer).Obj(),
			policy:  defaultPolicy(nil),
			wantFin: []string{otherFinalizer},
		},
		{
			name:    "a live node whose drain is Drained in Decommission keeps it",
			node:    newNode("node-a").Finalizers(v1alpha1.FinalizerDrain).Obj(),
			nd:      drained(drain(v1alpha1.ModeDecommission, "cli:alice"), v1alpha1.ModeDecommission),
			policy:  defaultPolicy(onDelete),
			wantFin: []string{v1alpha1.FinalizerDrain},
		},
	}
}

// deletedNodeFinalizerCases: a deleted node is let go when its drain is
// done or the bound passes, and held until then.
func deletedNodeFinalizerCases() []finalizerCase {
	held := func(ago time.Duration) *corev1.Node {
		return newNode("node-a").Finalizers(v1alpha1.FinalizerDrain).Deleted(ago).Obj()
	}
	evicting := drain(v1alpha1.ModeDecommission, v1alpha1.RequesterDelete)
	evicting.Status.Phase, evicting.Status.Mode, evicting.Status.Remaining, evicting.Status.Blocked = v1alpha1.PhaseEvicting, v1alpha1.ModeDecommission, 3, 1
	staleDrained := drained(drain(v1alpha1.ModeDecommission, v1alpha1.RequesterDelete), v1alpha1.ModeDecommission)
	staleDrained.Generation = 2
	return []finalizerCase{
		{
			name:     "a deleted node under Orphan: let go at once",
			node:     held(time.Minute),
			nd:       drain(v1alpha1.ModeMaintenance, "cli:alice"),
			policy:   defaultPolicy(nil),
			wantGone: true,
		},
		{
			name:     "its drain Drained in Decommission: let go",
			node:     held(5 * time.Minute),
			nd:       drained(drain(v1alpha1.ModeDecommission, v1alpha1.RequesterDelete), v1alpha1.ModeDecommission),
			policy:   defaultPolicy(onDelete),
			wantGone: true,
		},
		{
			name:       "its drain Drained in Maintenance: held until the bound",
			node:       held(20 * time.Minute),
			nd:         drained(drain(v1alpha1.ModeDecommission, "cli:alice", v1alpha1.RequesterDelete), v1alpha1.ModeMaintenance),
			policy:     defaultPolicy(onDelete),
			wantResult: reconcile.Result{RequeueAfter: 40 * time.Minute},
			wantFin:    []string{v1alpha1.FinalizerDrain},
		},
		{
			name:       "its drain Drained for an older generation: held",
			node:       held(20 * time.Minute),
			nd:         staleDrained,
			policy:     defaultPolicy(onDelete),
			wantResult: reconcile.Result{RequeueAfter: 40 * time.Minute},
			wantFin:    []string{v1alpha1.FinalizerDrain},
		},
		{
			name:       "its drain evicting, the policy's own bound not passed: held",
			node:       held(7 * time.Minute),
			nd:         evicting,
			policy:     defaultPolicy(nodeDeletion(10 * time.Minute)),
			wantResult: reconcile.Result{RequeueAfter: 3 * time.Minute},
			wantFin:    []string{v1alpha1.FinalizerDrain},
		},
		{
			name:      "its drain evicting, the policy's own bound passed: released",
			node:      held(10 * time.Minute),
			nd:        evicting,
			policy:    defaultPolicy(nodeDeletion(10 * time.Minute)),
			wantGone:  true,
			wantEvent: "Warning NodeDeletionTimeout released the deleted node after 10m0s (timeouts.nodeDeletion of its DrainPolicy) although its NodeDrain is Evicting in mode Decommission with 3 pod(s) remaining, 1 blocked; its pods and data may not have moved",
		},
		{
			name:      "no drain, the default bound passed: released",
			node:      held(61 * time.Minute),
			policy:    defaultPolicy(onDelete),
			wantGone:  true,
			wantEvent: "Warning NodeDeletionTimeout released the deleted node after 1h0m0s (timeouts.nodeDeletion of its DrainPolicy) although it has no NodeDrain; its pods and data may not have moved",
		},
		{
			name:      "its drain being undone, the bound passed: released",
			node:      held(2 * time.Hour),
			nd:        undoing(drain(v1alpha1.ModeDecommission)),
			policy:    defaultPolicy(onDelete),
			wantGone:  true,
			wantEvent: "Warning NodeDeletionTimeout released the deleted node after 1h0m0s (timeouts.nodeDeletion of its DrainPolicy) although its NodeDrain is being undone (phase Pending); its pods and data may not have moved",
		},
		{
			name:    "a deleted node without it is not given one",
			node:    newNode("node-a").Finalizers(otherFinalizer).Deleted(time.Minute).Obj(),
			policy:  defaultPolicy(onDelete),
			wantFin: []string{otherFinalizer},
		},
	}
}

// TestAnUnclearPolicyChangesNoEntryButStillBoundsADeletedNode: when two
// policies select the node, or a selector cannot be read, the pass
// requests, withdraws, adds and removes nothing and returns no error (a
// person must fix the selectors); a deleted node held by the finalizer is
// still released, at the longest timeouts.nodeDeletion of the policies that
// may govern it. A failure to list the policies is returned.
func TestAnUnclearPolicyChangesNoEntryButStillBoundsADeletedNode(t *testing.T) {
	for _, tc := range unclearPolicyCases() {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, interceptor.Funcs{}, objects(tc.node, tc.nd, tc.policies...)...)
			res, err := w.reconcile()
			if err != nil || res != tc.wantResult {
				t.Fatalf("Reconcile = %+v, %v; want %+v and no error", res, err, tc.wantResult)
			}
			if len(w.applies.got) != 0 {
				t.Errorf("applied %v under an unclear policy, want nothing", w.applies.got)
			}
			tc.checkDrainUnchanged(t, w)
			tc.checkNode(t, w.node())
			w.checkEvent(tc.wantEvent)
		})
	}
}

// unclearPolicyCase is a node that two policies select, or an unreadable
// selector may, and what one pass leaves.
type unclearPolicyCase struct {
	name       string
	node       *corev1.Node
	nd         *v1alpha1.NodeDrain
	policies   []*v1alpha1.DrainPolicy
	wantResult reconcile.Result
	wantGone   bool
	wantFin    []string
	wantEvent  string
}

// checkDrainUnchanged checks that the case's drain, when it has one, is
// still there with the requesters it had.
func (tc unclearPolicyCase) checkDrainUnchanged(t *testing.T, w *world) {
	t.Helper()
	if tc.nd == nil {
		return
	}
	left, there := w.requesters()
	var want []string
	for _, r := range tc.nd.Spec.Requesters {
		want = append(want, r.Name)
	}
	if !there || !slices.Equal(left, want) {
		t.Errorf("drain there: %v with %v, want it unchanged with %v", there, left, want)
	}
}

// checkNode checks that the node n read after the pass is released when
// the case says so, else still there with the finalizers it wants.
func (tc unclearPolicyCase) checkNode(t *testing.T, n *corev1.Node) {
	t.Helper()
	switch {
	case tc.wantGone && n != nil:
		t.Errorf("the node is still there with finalizers %v, want it released", n.Finalizers)
	case !tc.wantGone && (n == nil || !slices.Equal(n.Finalizers, tc.wantFin)):
		t.Errorf("the node is %+v, want it there with finalizers %v", n, tc.wantFin)
	}
}

// unclearPolicyCases: two policies select the node (gpu and zone-a, with
// the default beside them), or one's selector cannot be read.
func unclearPolicyCases() []unclearPolicyCase {
	gpu := selecting("gpu", map[string]string{"pool": "gpu"}, nodeDeletion(10*time.Minute))
	zoneA := selecting("zone-a", map[string]string{"zone": "a"}, nodeDeletion(30*time.Minute))
	def := defaultPolicy(nodeDeletion(5 * time.Minute))
	unreadable := selecting("broken", nil, nodeDeletion(15*time.Minute))
	unreadable.Spec.NodeSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pool", Operator: "Sometimes"}}}
	twoSelect := []*v1alpha1.DrainPolicy{gpu, zoneA, def}
	return []unclearPolicyCase{
		{
			name:     "two select a live node: nothing changes",
			node:     newNode("node-a").Labels("pool", "gpu", "zone", "a").Taint(v1alpha1.TaintDrain, corev1.TaintEffectNoSchedule).Finalizers(otherFinalizer).Obj(),
			nd:       drain(v1alpha1.ModeMaintenance, v1alpha1.RequesterCordon),
			policies: twoSelect,
			wantFin:  []string{otherFinalizer},
		},
		{
			name:     "two select a live node holding the finalizer: kept",
			node:     newNode("node-a").Labels("pool", "gpu", "zone", "a").Finalizers(v1alpha1.FinalizerDrain).Obj(),
			nd:       drain(v1alpha1.ModeMaintenance, v1alpha1.RequesterTaint),
			policies: []*v1alpha1.DrainPolicy{selecting("gpu", map[string]string{"pool": "gpu"}, nil), selecting("zone-a", map[string]string{"zone": "a"}, nil)},
			wantFin:  []string{v1alpha1.FinalizerDrain},
		},
		{
			name:       "two select a deleted node: held until the longer bound",
			node:       newNode("node-a").Labels("pool", "gpu", "zone", "a").Finalizers(v1alpha1.FinalizerDrain).Deleted(20 * time.Minute).Obj(),
			nd:         drain(v1alpha1.ModeMaintenance, "cli:alice"),
			policies:   twoSelect,
			wantResult: reconcile.Result{RequeueAfter: 10 * time.Minute},
			wantFin:    []string{v1alpha1.FinalizerDrain},
		},
		{
			name:      "two select a deleted node: released at the longer bound",
			node:      newNode("node-a").Labels("pool", "gpu", "zone", "a").Finalizers(v1alpha1.FinalizerDrain).Deleted(30 * time.Minute).Obj(),
			nd:        drain(v1alpha1.ModeMaintenance, "cli:alice"),
			policies:  twoSelect,
			wantGone:  true,
			wantEvent: "Warning NodeDeletionTimeout released the deleted node after 30m0s (the longest timeouts.nodeDeletion of the DrainPolicies that may govern it: its policy is unclear) although its NodeDrain is Pending in mode Maintenance; its pods and data may not have moved",
		},
		{
			name:       "an unreadable selector: the default may govern too, its bound counts",
			node:       newNode("node-a").Labels("pool", "web").Finalizers(v1alpha1.FinalizerDrain).Deleted(10 * time.Minute).Obj(),
			policies:   []*v1alpha1.DrainPolicy{unreadable, defaultPolicy(nodeDeletion(time.Hour))},
			wantResult: reconcile.Result{RequeueAfter: 50 * time.Minute},
			wantFin:    []string{v1alpha1.FinalizerDrain},
		},
		{
			name:     "two select a deleted node vacate does not hold: nothing to wait for",
			node:     newNode("node-a").Labels("pool", "gpu", "zone", "a").Finalizers(otherFinalizer).Deleted(20 * time.Minute).Obj(),
			policies: twoSelect,
			wantFin:  []string{otherFinalizer},
		},
		{
			name:     "an unreadable selector on a live node: nothing changes",
			node:     newNode("node-a").Labels("pool", "web").Obj(),
			nd:       drain(v1alpha1.ModeMaintenance, v1alpha1.RequesterTaint),
			policies: []*v1alpha1.DrainPolicy{unreadable, defaultPolicy(onDelete)},
		},
	}
}

// TestFinalizerPatchRacingAnotherWriterConflicts: the node's finalizer is
// written under an optimistic lock, so a pass that read the node before
// someone else changed its finalizers loses (a requeue after
// requeue.ConflictRetry) instead of writing back the list it read, which
// would drop the other writer's finalizer.
func TestFinalizerPatchRacingAnotherWriterConflicts(t *testing.T) {
	raced := false
	w := newWorld(t, interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
		if _, ok := o.(*corev1.Node); ok && !raced {
			raced = true
			other := &corev1.Node{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(o), other); err != nil {
				return err
			}
			other.Finalizers = append(other.Finalizers, otherFinalizer)
			if err := c.Update(ctx, other); err != nil {
				return err
			}
		}
		return c.Patch(ctx, o, p, opts...)
	}}, objects(newNode("node-a").Obj(), nil, defaultPolicy(onDelete))...)
	res, err := w.reconcile()
	if err != nil || res != (reconcile.Result{RequeueAfter: requeue.ConflictRetry}) {
		t.Fatalf("Reconcile = %+v, %v; want a requeue after %s", res, err, requeue.ConflictRetry)
	}
	if n := w.node(); n == nil || !slices.Equal(n.Finalizers, []string{otherFinalizer}) {
		t.Fatalf("the node after the race: %+v, want only the other writer's finalizer", n)
	}
	// The next pass reads the node again and adds vacate's beside it.
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if n := w.node(); n == nil || !slices.Equal(n.Finalizers, []string{otherFinalizer, v1alpha1.FinalizerDrain}) {
		t.Errorf("the node after the next pass: %+v, want both finalizers", n)
	}
}

// TestDrainedForDeletionOnlyWhenEverythingMoved: a deleted node's drain is
// done only when Drained for its current generation with its stages run in
// Decommission; not when Drained in Maintenance (node deletion runs it
// again), Drained for an older spec, still running, being undone, or
// missing.
func TestDrainedForDeletionOnlyWhenEverythingMoved(t *testing.T) {
	stale := drained(drain(v1alpha1.ModeDecommission), v1alpha1.ModeDecommission)
	stale.Generation = 2
	specOnly := drained(drain(v1alpha1.ModeDecommission), v1alpha1.ModeMaintenance)
	running := drain(v1alpha1.ModeDecommission)
	running.Status.Phase, running.Status.Mode = v1alpha1.PhaseEvicting, v1alpha1.ModeDecommission
	for _, tc := range []struct {
		name string
		nd   *v1alpha1.NodeDrain
		want bool
	}{
		{"Drained in Decommission", drained(drain(v1alpha1.ModeDecommission), v1alpha1.ModeDecommission), true},
		{"Drained in Maintenance", drained(drain(v1alpha1.ModeMaintenance), v1alpha1.ModeMaintenance), false},
		{"raised to Decommission, stages ran in Maintenance", specOnly, false},
		{"Drained for an older generation", stale, false},
		{"evicting in Decommission", running, false},
		{"Drained in Decommission but being undone", undoing(drained(drain(v1alpha1.ModeDecommission), v1alpha1.ModeDecommission)), false},
		{"no drain", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := drainedForDeletion(tc.nd); got != tc.want {
				t.Errorf("drainedForDeletion = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestDrainStateSaysWhereTheDrainStands: the release event's words for the
// drain: missing, being undone (an empty phase reads Pending), or its phase
// in the mode its stages ran in (the spec's before any ran), with the pods
// still there and blocked when there are any, and why it is not admitted
// when it is not.
func TestDrainStateSaysWhereTheDrainStands(t *testing.T) {
	withStatus := func(change func(*v1alpha1.NodeDrainStatus)) *v1alpha1.NodeDrain {
		nd := drain(v1alpha1.ModeDecommission, v1alpha1.RequesterDelete)
		change(&nd.Status)
		return nd
	}
	for _, tc := range []struct {
		name string
		nd   *v1alpha1.NodeDrain
		want string
	}{
		{"none", nil, "it has no NodeDrain"},
		{"undone before any phase", undoing(drain(v1alpha1.ModeMaintenance)), "its NodeDrain is being undone (phase Pending)"},
		{"undone while restoring", func() *v1alpha1.NodeDrain {
			nd := undoing(drain(v1alpha1.ModeMaintenance))
			nd.Status.Phase = v1alpha1.PhaseRestoring
			return nd
		}(), "its NodeDrain is being undone (phase Restoring)"},
		{"not started: the spec's mode", withStatus(func(*v1alpha1.NodeDrainStatus) {}), "its NodeDrain is Pending in mode Decommission"},
		{"the mode its stages ran in", withStatus(func(s *v1alpha1.NodeDrainStatus) {
			s.Phase, s.Mode = v1alpha1.PhaseDrained, v1alpha1.ModeMaintenance
		}), "its NodeDrain is Drained in mode Maintenance"},
		{"pods remaining", withStatus(func(s *v1alpha1.NodeDrainStatus) {
			s.Phase, s.Mode, s.Remaining = v1alpha1.PhaseEvicting, v1alpha1.ModeDecommission, 4
		}), "its NodeDrain is Evicting in mode Decommission with 4 pod(s) remaining, 0 blocked"},
		{"not admitted", withStatus(func(s *v1alpha1.NodeDrainStatus) {
			s.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionAdmitted, Status: metav1.ConditionFalse, Reason: "OutsideMaintenanceWindow"}}
		}), "its NodeDrain is Pending in mode Decommission, not admitted (OutsideMaintenanceWindow)"},
		{"admitted says nothing more", withStatus(func(s *v1alpha1.NodeDrainStatus) {
			s.Phase = v1alpha1.PhaseCordoned
			s.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionAdmitted, Status: metav1.ConditionTrue, Reason: "Admitted"}}
		}), "its NodeDrain is Cordoned in mode Decommission"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := drainState(tc.nd); got != tc.want {
				t.Errorf("drainState =\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}
