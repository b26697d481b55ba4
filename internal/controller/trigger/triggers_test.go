package trigger

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// This file tests the triggers: which requests a node's taints, cordon and
// deletion make, and which entries are withdrawn once they no longer hold.

// TestIsTriggerNamesOnlyTheTriggersRequesters: the trigger controller
// withdraws only entries that are its own (taint, cordon, delete and
// external:<key>), never a person's, the agent's or a look-alike.
func TestIsTriggerNamesOnlyTheTriggersRequesters(t *testing.T) {
	for name, want := range map[string]bool{
		v1alpha1.RequesterTaint: true, v1alpha1.RequesterCordon: true, v1alpha1.RequesterDelete: true, v1alpha1.RequesterMaintenance: true,
		"external:" + autoscalerTaint: true, "external:example.com/retire": true,
		"cli:alice": false, "agent": false, "agent:aws-spot": false, "taints": false, "cordoned": false,
		"external": false, "cli:taint": false, "maintenance-planned": false,
	} {
		if got := IsTrigger(name); got != want {
			t.Errorf("IsTrigger(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestNodeTriggersRequestTheirOwnEntries: each trigger that holds on the
// node is applied as its own requester, under its own field manager: the
// taint vacate.dev/drain (any effect, once however many effects) unless the
// policy turns it off; a cordon by anyone but vacate under
// onUnschedulable: Drain; the external taints (by default the cluster
// autoscaler's and Karpenter's, else only the policy's own list); the node
// condition MaintenancePlanned True under onMaintenancePlanned: Drain; a deleted
// node that vacate's finalizer holds under onNodeDelete: Drain. A trigger
// joining a drain restates its mode and policy; node deletion asks for
// Decommission and raises a Maintenance drain, even when its entry is there
// already. A trigger already on the drain is not applied again, and a drain
// being undone gets no request.
func TestNodeTriggersRequestTheirOwnEntries(t *testing.T) {
	for _, tc := range append(liveTriggerCases(), deletionTriggerCases()...) {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, interceptor.Funcs{}, objects(tc.node, tc.nd, tc.policies...)...)
			if _, err := w.reconcile(); err != nil {
				t.Fatal(err)
			}
			if !sameApplies(w.applies.got, tc.want) {
				t.Errorf("applied %v, want %v", w.applies.got, tc.want)
			}
		})
	}
}

// triggerCase is a node, its drain and the policies, and the applies one
// pass sends for them.
type triggerCase struct {
	name     string
	node     *corev1.Node
	nd       *v1alpha1.NodeDrain
	policies []*v1alpha1.DrainPolicy
	want     []applied
}

// liveTriggerCases are the triggers of a live node: the taint, a cordon,
// the external taints, several at once, a drain that has the trigger
// already or is being undone.
func liveTriggerCases() []triggerCase {
	cordonDrains := defaultPolicy(func(s *v1alpha1.DrainPolicySpec) { s.Triggers.OnUnschedulable = "Drain" })
	noTaint := defaultPolicy(func(s *v1alpha1.DrainPolicySpec) { f := false; s.Triggers.Taint = &f })
	ownExternal := defaultPolicy(func(s *v1alpha1.DrainPolicySpec) { s.Triggers.ExternalTaints = []string{"example.com/retire"} })
	maintenanceDrains := defaultPolicy(func(s *v1alpha1.DrainPolicySpec) { s.Triggers.OnMaintenancePlanned = "Drain" })
	return []triggerCase{
		{
			name:     "MaintenancePlanned True under onMaintenancePlanned: Drain",
			node:     newNode("node-a").Condition(corev1.NodeMaintenancePlanned, corev1.ConditionTrue).Obj(),
			policies: []*v1alpha1.DrainPolicy{maintenanceDrains},
			want:     []applied{request(v1alpha1.RequesterMaintenance, "", "")},
		},
		{
			name:     "MaintenancePlanned False under onMaintenancePlanned: Drain",
			node:     newNode("node-a").Condition(corev1.NodeMaintenancePlanned, corev1.ConditionFalse).Obj(),
			policies: []*v1alpha1.DrainPolicy{maintenanceDrains},
		},
		{
			name: "MaintenancePlanned True under the default Ignore",
			node: newNode("node-a").Condition(corev1.NodeMaintenancePlanned, corev1.ConditionTrue).Obj(),
		},
		{
			name: "the taint under the built-in defaults",
			node: newNode("node-a").Taint(v1alpha1.TaintDrain, corev1.TaintEffectNoSchedule).Obj(),
			want: []applied{request(v1alpha1.RequesterTaint, "", "")},
		},
		{
			name: "the taint with two effects: one request",
			node: newNode("node-a").Taint(v1alpha1.TaintDrain, corev1.TaintEffectNoSchedule).Taint(v1alpha1.TaintDrain, corev1.TaintEffectNoExecute).Obj(),
			want: []applied{request(v1alpha1.RequesterTaint, "", "")},
		},
		{
			name:     "the taint under a policy that turns it off",
			node:     newNode("node-a").Taint(v1alpha1.TaintDrain, corev1.TaintEffectNoSchedule).Obj(),
			policies: []*v1alpha1.DrainPolicy{noTaint},
		},
		{
			name:     "a cordon under onUnschedulable: Drain",
			node:     newNode("node-a").Cordoned().Obj(),
			policies: []*v1alpha1.DrainPolicy{cordonDrains},
			want:     []applied{request(v1alpha1.RequesterCordon, "", "")},
		},
		{
			name:     "vacate's own cordon under onUnschedulable: Drain",
			node:     newNode("node-a").CordonedByVacate().Obj(),
			policies: []*v1alpha1.DrainPolicy{cordonDrains},
		},
		{
			name: "a cordon under the default Ignore",
			node: newNode("node-a").Cordoned().Obj(),
		},
		{
			name: "the cluster autoscaler's taint",
			node: newNode("node-a").Taint(autoscalerTaint, corev1.TaintEffectNoSchedule).Obj(),
			want: []applied{request("external:"+autoscalerTaint, "", "")},
		},
		{
			name:     "a policy's own external taints replace the defaults",
			node:     newNode("node-a").Taint(karpenterTaint, corev1.TaintEffectNoSchedule).Taint("example.com/retire", corev1.TaintEffectNoSchedule).Obj(),
			policies: []*v1alpha1.DrainPolicy{ownExternal},
			want:     []applied{request("external:example.com/retire", "", "")},
		},
		{
			name:     "several triggers at once: one apply each, by name",
			node:     newNode("node-a").Taint(v1alpha1.TaintDrain, corev1.TaintEffectNoSchedule).Taint(karpenterTaint, corev1.TaintEffectNoSchedule).Cordoned().Obj(),
			policies: []*v1alpha1.DrainPolicy{cordonDrains},
			want: []applied{
				request(v1alpha1.RequesterCordon, "", ""), request("external:"+karpenterTaint, "", ""), request(v1alpha1.RequesterTaint, "", ""),
			},
		},
		{
			name: "joining a person's drain restates its mode and policy",
			node: newNode("node-a").Taint(v1alpha1.TaintDrain, corev1.TaintEffectNoSchedule).Obj(),
			nd:   naming("gpu", drain(v1alpha1.ModeDecommission, "cli:alice")),
			want: []applied{request(v1alpha1.RequesterTaint, v1alpha1.ModeDecommission, "gpu")},
		},
		{
			name: "a trigger already on the drain",
			node: newNode("node-a").Taint(v1alpha1.TaintDrain, corev1.TaintEffectNoSchedule).Obj(),
			nd:   drain(v1alpha1.ModeMaintenance, "cli:alice", v1alpha1.RequesterTaint),
		},
		{
			name: "a drain being undone",
			node: newNode("node-a").Taint(v1alpha1.TaintDrain, corev1.TaintEffectNoSchedule).Obj(),
			nd:   undoing(drain(v1alpha1.ModeMaintenance, "cli:alice")),
		},
	}
}

// deletionTriggerCases are a deleted node's: the delete trigger, which asks
// for Decommission, when vacate's finalizer holds the node.
func deletionTriggerCases() []triggerCase {
	deleted := newNode("node-a").Finalizers(v1alpha1.FinalizerDrain).Deleted(5 * time.Minute).Obj()
	return []triggerCase{
		{
			name:     "a deleted node held by the finalizer: a Decommission drain",
			node:     deleted,
			policies: []*v1alpha1.DrainPolicy{defaultPolicy(onDelete)},
			want:     []applied{request(v1alpha1.RequesterDelete, v1alpha1.ModeDecommission, "")},
		},
		{
			name:     "node deletion raises a person's Maintenance drain, keeping its policy",
			node:     deleted,
			nd:       naming("gpu", drain(v1alpha1.ModeMaintenance, "cli:alice")),
			policies: []*v1alpha1.DrainPolicy{defaultPolicy(onDelete)},
			want:     []applied{request(v1alpha1.RequesterDelete, v1alpha1.ModeDecommission, "gpu")},
		},
		{
			name:     "the delete entry on a drain still in Maintenance: raised again",
			node:     deleted,
			nd:       drain(v1alpha1.ModeMaintenance, "cli:alice", v1alpha1.RequesterDelete),
			policies: []*v1alpha1.DrainPolicy{defaultPolicy(onDelete)},
			want:     []applied{request(v1alpha1.RequesterDelete, v1alpha1.ModeDecommission, "")},
		},
		{
			name:     "the delete entry on a Decommission drain",
			node:     deleted,
			nd:       drain(v1alpha1.ModeDecommission, v1alpha1.RequesterDelete),
			policies: []*v1alpha1.DrainPolicy{defaultPolicy(onDelete)},
		},
		{
			name:     "a deleted node without vacate's finalizer",
			node:     newNode("node-a").Finalizers(otherFinalizer).Deleted(5 * time.Minute).Obj(),
			policies: []*v1alpha1.DrainPolicy{defaultPolicy(onDelete)},
		},
	}
}

// TestCordonUnderDrainPolicyRequestsADrain: the whole way for one trigger,
// on a node with no drain yet: a cordon by someone else under
// onUnschedulable: Drain creates the node's drain with the entry "cordon"
// (this apply creates the drain, which the fake client can do).
func TestCordonUnderDrainPolicyRequestsADrain(t *testing.T) {
	w := newWorld(t, interceptor.Funcs{Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
		return c.Apply(ctx, obj, opts...)
	}}, newNode("node-a").Cordoned().Obj(), defaultPolicy(func(s *v1alpha1.DrainPolicySpec) { s.Triggers.OnUnschedulable = "Drain" }))
	res, err := w.reconcile()
	if err != nil || res != (reconcile.Result{}) {
		t.Fatalf("Reconcile = %+v, %v; want no requeue and no error", res, err)
	}
	got, ok := w.requesters()
	if !ok || !slices.Equal(got, []string{v1alpha1.RequesterCordon}) {
		t.Errorf("drain there: %v, requesters %v; want a drain requested by %s", ok, got, v1alpha1.RequesterCordon)
	}
}

// TestTriggersThatNoLongerHoldAreWithdrawn: an entry of a trigger that no
// longer holds is withdrawn (its manager restates the drain's mode without
// the entry, then the entry is removed); entries that are not a trigger's
// (a person's, the agent's) are never touched; a drain left with no
// requester is deleted; a node that is gone withdraws every trigger's
// entry; a drain being undone is left alone.
func TestTriggersThatNoLongerHoldAreWithdrawn(t *testing.T) {
	for _, tc := range []withdrawCase{
		{
			name:     "the taint removed: its entry goes, a person's stays",
			node:     newNode("node-a").Obj(),
			nd:       drain(v1alpha1.ModeMaintenance, "cli:alice", v1alpha1.RequesterTaint),
			want:     []applied{restated(v1alpha1.RequesterTaint, v1alpha1.ModeMaintenance)},
			wantLeft: []string{"cli:alice"},
		},
		{
			name:     "a trigger that still holds stays",
			node:     newNode("node-a").Taint(v1alpha1.TaintDrain, corev1.TaintEffectNoSchedule).Obj(),
			nd:       drain(v1alpha1.ModeDecommission, v1alpha1.RequesterCordon, v1alpha1.RequesterTaint),
			want:     []applied{restated(v1alpha1.RequesterCordon, v1alpha1.ModeDecommission)},
			wantLeft: []string{v1alpha1.RequesterTaint},
		},
		{
			name:     "the last trigger gone: the drain is deleted",
			node:     newNode("node-a").Obj(),
			nd:       drain(v1alpha1.ModeMaintenance, v1alpha1.RequesterCordon),
			want:     []applied{restated(v1alpha1.RequesterCordon, v1alpha1.ModeMaintenance)},
			wantGone: true,
		},
		{
			name: "the node gone: every trigger leaves, the others stay",
			nd: drain(v1alpha1.ModeDecommission, "agent", "cli:alice", v1alpha1.RequesterCordon, v1alpha1.RequesterDelete,
				"external:"+karpenterTaint, v1alpha1.RequesterTaint),
			want: []applied{
				restated(v1alpha1.RequesterCordon, v1alpha1.ModeDecommission), restated(v1alpha1.RequesterDelete, v1alpha1.ModeDecommission),
				restated("external:"+karpenterTaint, v1alpha1.ModeDecommission), restated(v1alpha1.RequesterTaint, v1alpha1.ModeDecommission),
			},
			wantLeft: []string{"agent", "cli:alice"},
		},
		{
			name:     "the node gone, only triggers: the drain is deleted",
			nd:       drain(v1alpha1.ModeDecommission, v1alpha1.RequesterDelete, v1alpha1.RequesterTaint),
			want:     []applied{restated(v1alpha1.RequesterDelete, v1alpha1.ModeDecommission), restated(v1alpha1.RequesterTaint, v1alpha1.ModeDecommission)},
			wantGone: true,
		},
		{
			name:     "a drain being undone",
			node:     newNode("node-a").Obj(),
			nd:       undoing(drain(v1alpha1.ModeMaintenance, v1alpha1.RequesterTaint)),
			wantLeft: []string{v1alpha1.RequesterTaint},
		},
		{
			name:     "the node gone, its drain being undone",
			nd:       undoing(drain(v1alpha1.ModeMaintenance, v1alpha1.RequesterTaint)),
			wantLeft: []string{v1alpha1.RequesterTaint},
		},
	} {
		t.Run(tc.name, tc.run)
	}
}

// TestADrainATriggerLeftIdleIsDeleted: a drain with no requester left,
// whose managed fields show a trigger applied to it, is one whose
// withdrawal was cut short before the deletion: the trigger controller
// deletes it, the node there or gone. One left idle by a person stays
// theirs, and one a wanted trigger joins again is not deleted.
func TestADrainATriggerLeftIdleIsDeleted(t *testing.T) {
	for _, tc := range []withdrawCase{
		{
			name:     "a trigger's withdrawal cut short before the deletion: the idle drain is deleted",
			node:     newNode("node-a").Obj(),
			nd:       drain(v1alpha1.ModeMaintenance),
			managers: []string{"vacate-controller", "vacate-external:" + karpenterTaint},
			wantGone: true,
		},
		{
			name:     "the node gone, its idle drain a trigger applied to: deleted",
			nd:       drain(v1alpha1.ModeDecommission),
			managers: []string{"vacate-" + v1alpha1.RequesterDelete},
			wantGone: true,
		},
		{
			name:     "a drain left idle by a person: left to them",
			node:     newNode("node-a").Obj(),
			nd:       drain(v1alpha1.ModeMaintenance),
			managers: []string{"vacate-cli:alice", "kubectl-edit", "vacate-controller"},
		},
		{
			name:     "an idle drain a trigger joins again: kept",
			node:     newNode("node-a").Taint(v1alpha1.TaintDrain, corev1.TaintEffectNoSchedule).Obj(),
			nd:       drain(v1alpha1.ModeMaintenance),
			managers: []string{"vacate-" + v1alpha1.RequesterTaint},
			want:     []applied{request(v1alpha1.RequesterTaint, v1alpha1.ModeMaintenance, "")},
			wantLeft: nil, // the fake stores no apply: what counts is the join asked and no deletion
		},
	} {
		t.Run(tc.name, tc.run)
	}
}

// withdrawCase is a node, its drain and what a pass must do with them.
type withdrawCase struct {
	name     string
	node     *corev1.Node
	nd       *v1alpha1.NodeDrain
	want     []applied
	wantLeft []string // nil with wantGone
	wantGone bool
	managers []string // in the drain's managed fields, as the API server reads it
}

func (tc withdrawCase) run(t *testing.T) {
	w := newWorld(t, interceptor.Funcs{}, objects(tc.node, tc.nd)...)
	w.r.APIReader = managedReader{w.cl, tc.managers}
	res, err := w.reconcile()
	if err != nil || res != (reconcile.Result{}) {
		t.Fatalf("Reconcile = %+v, %v; want no requeue and no error", res, err)
	}
	if !sameApplies(w.applies.got, tc.want) {
		t.Errorf("applied %v, want %v", w.applies.got, tc.want)
	}
	left, there := w.requesters()
	if there == tc.wantGone || !slices.Equal(left, tc.wantLeft) {
		t.Errorf("drain there: %v with requesters %v; want there: %v with %v", there, left, !tc.wantGone, tc.wantLeft)
	}
}

// managedReader reads as the API server does, with the drain's managed
// fields (the fake client returns none): one entry per manager.
type managedReader struct {
	client.Reader
	managers []string
}

func (m managedReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := m.Reader.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	if nd, ok := obj.(*v1alpha1.NodeDrain); ok {
		for _, name := range m.managers {
			nd.ManagedFields = append(nd.ManagedFields, metav1.ManagedFieldsEntry{Manager: name, Operation: metav1.ManagedFieldsOperationApply})
		}
	}
	return nil
}
