package trigger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/requeue"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/metrics"
)

// now is the fake clock's time in every test here.
var now = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

// otherFinalizer is someone else's finalizer: vacate never touches it.
const otherFinalizer = "example.com/keep"

const (
	autoscalerTaint = "ToBeDeletedByClusterAutoscaler"
	karpenterTaint  = "karpenter.sh/disrupted"
)

// nodeBuilder builds a node; testutil has no node builder.
type nodeBuilder struct{ n *corev1.Node }

func newNode(name string) *nodeBuilder {
	return &nodeBuilder{n: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}}}
}

func (b *nodeBuilder) Taint(key string, effect corev1.TaintEffect) *nodeBuilder {
	b.n.Spec.Taints = append(b.n.Spec.Taints, corev1.Taint{Key: key, Effect: effect})
	return b
}

// Cordoned marks the node unschedulable, by someone other than vacate.
func (b *nodeBuilder) Cordoned() *nodeBuilder { b.n.Spec.Unschedulable = true; return b }

// CordonedByVacate marks the node unschedulable with vacate's record of
// its own cordon.
func (b *nodeBuilder) CordonedByVacate() *nodeBuilder {
	b.n.Spec.Unschedulable = true
	b.n.Annotations = map[string]string{v1alpha1.AnnotationCordonedBy: b.n.Name + "/uid-drain"}
	return b
}

func (b *nodeBuilder) Labels(kv ...string) *nodeBuilder {
	if b.n.Labels == nil {
		b.n.Labels = map[string]string{}
	}
	for i := 0; i+1 < len(kv); i += 2 {
		b.n.Labels[kv[i]] = kv[i+1]
	}
	return b
}

func (b *nodeBuilder) Finalizers(f ...string) *nodeBuilder { b.n.Finalizers = f; return b }

// Deleted marks the node deleted ago before now.
func (b *nodeBuilder) Deleted(ago time.Duration) *nodeBuilder {
	b.n.DeletionTimestamp = &metav1.Time{Time: now.Add(-ago)}
	return b
}

func (b *nodeBuilder) Obj() *corev1.Node { return b.n }

// defaultPolicy is the DrainPolicy named default, spec as change leaves it.
func defaultPolicy(change func(*v1alpha1.DrainPolicySpec)) *v1alpha1.DrainPolicy {
	return selecting(v1alpha1.DefaultPolicyName, nil, change)
}

// selecting is a DrainPolicy with the nodeSelector given.
func selecting(name string, sel map[string]string, change func(*v1alpha1.DrainPolicySpec)) *v1alpha1.DrainPolicy {
	dp := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if sel != nil {
		dp.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: sel}
	}
	if change != nil {
		change(&dp.Spec)
	}
	return dp
}

func onDelete(s *v1alpha1.DrainPolicySpec) { s.Triggers.OnNodeDelete = "Drain" }

func nodeDeletion(d time.Duration) func(*v1alpha1.DrainPolicySpec) {
	return func(s *v1alpha1.DrainPolicySpec) {
		s.Triggers.OnNodeDelete, s.Timeouts.NodeDeletion = "Drain", &metav1.Duration{Duration: d}
	}
}

// drain is the NodeDrain of node-a with the requesters given, in mode.
func drain(mode v1alpha1.DrainMode, requesters ...string) *v1alpha1.NodeDrain {
	nd := testutil.NodeDrain("node-a", "", requesters...)
	nd.Spec.Mode = mode
	nd.Generation = 1
	return nd
}

// drained marks nd Drained for its generation, its stages run in mode.
func drained(nd *v1alpha1.NodeDrain, mode v1alpha1.DrainMode) *v1alpha1.NodeDrain {
	nd.Status.Phase, nd.Status.Mode, nd.Status.ObservedGeneration = v1alpha1.PhaseDrained, mode, nd.Generation
	return nd
}

// naming sets nd's spec.policyName.
func naming(policyName string, nd *v1alpha1.NodeDrain) *v1alpha1.NodeDrain {
	nd.Spec.PolicyName = policyName
	return nd
}

// undoing marks nd deleted, held by the NodeDrain controller's finalizer.
func undoing(nd *v1alpha1.NodeDrain) *v1alpha1.NodeDrain {
	nd.DeletionTimestamp = &metav1.Time{Time: now.Add(-time.Minute)}
	nd.Finalizers = []string{v1alpha1.FinalizerRestore}
	return nd
}

// applied is one server-side apply of a NodeDrain: under which manager,
// with which entries (none: a requester restating mode and policy while it
// withdraws), mode and policy, and whether it forced ownership.
type applied struct {
	Manager    string
	Requesters []string
	Mode       v1alpha1.DrainMode
	Policy     string
	Force      bool
}

func (a applied) String() string {
	return fmt.Sprintf("{%s %v mode=%q policy=%q force=%v}", a.Manager, a.Requesters, a.Mode, a.Policy, a.Force)
}

// applies records the server-side applies of NodeDrains and answers them
// with err, writing nothing. The fake client's apply has no schema for
// NodeDrain: it treats spec.requesters as atomic, so a requester joining a
// drain conflicts where the API server merges the entries by name. The
// tests here check what each apply asks; the merge is the API server's (the
// e2e tests cover it).
type applies struct {
	got []applied
	err error
}

func (a *applies) apply(_ context.Context, _ client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	raw, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	nd := &v1alpha1.NodeDrain{}
	if err := json.Unmarshal(raw, nd); err != nil {
		return err
	}
	o := (&client.ApplyOptions{}).ApplyOptions(opts)
	rec := applied{Manager: o.FieldManager, Mode: nd.Spec.Mode, Policy: nd.Spec.PolicyName, Force: o.Force != nil && *o.Force}
	for _, r := range nd.Spec.Requesters {
		rec.Requesters = append(rec.Requesters, r.Name)
	}
	a.got = append(a.got, rec)
	return a.err
}

// request is what a trigger's apply joining or creating a drain looks like.
func request(requester string, mode v1alpha1.DrainMode, policyName string) applied {
	return applied{Manager: "vacate-" + requester, Requesters: []string{requester}, Mode: mode, Policy: policyName}
}

// restated is what a trigger's apply looks like when it withdraws.
func restated(requester string, mode v1alpha1.DrainMode) applied {
	return applied{Manager: "vacate-" + requester, Mode: mode}
}

// world is a trigger Reconciler over a fake client, a fake clock at now
// and a fake event recorder.
type world struct {
	t       *testing.T
	r       *Reconciler
	cl      client.Client
	applies *applies
	events  *events.FakeRecorder
}

func newWorld(t *testing.T, funcs interceptor.Funcs, objs ...client.Object) *world {
	t.Helper()
	s := testutil.Scheme(t)
	a := &applies{}
	if funcs.Apply == nil {
		funcs.Apply = a.apply
	}
	cl := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).
		WithStatusSubresource(&v1alpha1.NodeDrain{}).WithInterceptorFuncs(funcs).Build()
	rec := events.NewFakeRecorder(10)
	return &world{t: t, cl: cl, applies: a, events: rec,
		r: &Reconciler{Client: cl, Clock: clocktesting.NewFakeClock(now), Events: rec}}
}

func (w *world) reconcile() (reconcile.Result, error) {
	return w.r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "node-a"}})
}

// node reads node-a back; nil when it is gone.
func (w *world) node() *corev1.Node {
	w.t.Helper()
	n := &corev1.Node{}
	err := w.cl.Get(context.Background(), types.NamespacedName{Name: "node-a"}, n)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		w.t.Fatal(err)
	}
	return n
}

// requesters reads node-a's drain back: its requesters' names, and whether
// it is there at all.
func (w *world) requesters() ([]string, bool) {
	w.t.Helper()
	nd := &v1alpha1.NodeDrain{}
	err := w.cl.Get(context.Background(), types.NamespacedName{Name: "node-a"}, nd)
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		w.t.Fatal(err)
	}
	var out []string
	for _, r := range nd.Spec.Requesters {
		out = append(out, r.Name)
	}
	return out, true
}

// recorded drains the events recorded so far.
func (w *world) recorded() []string {
	var out []string
	for {
		select {
		case e := <-w.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func objects(node *corev1.Node, nd *v1alpha1.NodeDrain, policies ...*v1alpha1.DrainPolicy) []client.Object {
	var objs []client.Object
	if node != nil {
		objs = append(objs, node.DeepCopy())
	}
	if nd != nil {
		objs = append(objs, nd.DeepCopy())
	}
	for _, p := range policies {
		if p != nil {
			objs = append(objs, p.DeepCopy())
		}
	}
	return objs
}

func sameApplies(got, want []applied) bool {
	return slices.EqualFunc(got, want, func(a, b applied) bool {
		return a.Manager == b.Manager && slices.Equal(a.Requesters, b.Requesters) && a.Mode == b.Mode && a.Policy == b.Policy && a.Force == b.Force
	})
}

// TestIsTriggerNamesOnlyTheTriggersRequesters: the trigger controller
// withdraws only entries that are its own (taint, cordon, delete and
// external:<key>), never a person's, the agent's or a look-alike.
func TestIsTriggerNamesOnlyTheTriggersRequesters(t *testing.T) {
	for name, want := range map[string]bool{
		v1alpha1.RequesterTaint: true, v1alpha1.RequesterCordon: true, v1alpha1.RequesterDelete: true,
		"external:" + autoscalerTaint: true, "external:example.com/retire": true,
		"cli:alice": false, "agent": false, "agent:aws-spot": false, "taints": false, "cordoned": false,
		"external": false, "cli:taint": false,
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
// autoscaler's and Karpenter's, else only the policy's own list); a deleted
// node that vacate's finalizer holds under onNodeDelete: Drain. A trigger
// joining a drain restates its mode and policy; node deletion asks for
// Decommission and raises a Maintenance drain, even when its entry is there
// already. A trigger already on the drain is not applied again, and a drain
// being undone gets no request.
func TestNodeTriggersRequestTheirOwnEntries(t *testing.T) {
	cordonDrains := defaultPolicy(func(s *v1alpha1.DrainPolicySpec) { s.Triggers.OnUnschedulable = "Drain" })
	noTaint := defaultPolicy(func(s *v1alpha1.DrainPolicySpec) { f := false; s.Triggers.Taint = &f })
	ownExternal := defaultPolicy(func(s *v1alpha1.DrainPolicySpec) { s.Triggers.ExternalTaints = []string{"example.com/retire"} })
	deleted := newNode("node-a").Finalizers(v1alpha1.FinalizerDrain).Deleted(5 * time.Minute).Obj()
	for _, tc := range []struct {
		name     string
		node     *corev1.Node
		nd       *v1alpha1.NodeDrain
		policies []*v1alpha1.DrainPolicy
		want     []applied
	}{
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
		{
			name: "a drain being undone",
			node: newNode("node-a").Taint(v1alpha1.TaintDrain, corev1.TaintEffectNoSchedule).Obj(),
			nd:   undoing(drain(v1alpha1.ModeMaintenance, "cli:alice")),
		},
	} {
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
	for _, tc := range []struct {
		name     string
		node     *corev1.Node
		nd       *v1alpha1.NodeDrain
		want     []applied
		wantLeft []string // nil with wantGone
		wantGone bool
	}{
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
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, interceptor.Funcs{}, objects(tc.node, tc.nd)...)
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
		})
	}
}

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
	held := func(ago time.Duration) *corev1.Node {
		return newNode("node-a").Finalizers(v1alpha1.FinalizerDrain).Deleted(ago).Obj()
	}
	evicting := drain(v1alpha1.ModeDecommission, v1alpha1.RequesterDelete)
	evicting.Status.Phase, evicting.Status.Mode, evicting.Status.Remaining, evicting.Status.Blocked = v1alpha1.PhaseEvicting, v1alpha1.ModeDecommission, 3, 1
	staleDrained := drained(drain(v1alpha1.ModeDecommission, v1alpha1.RequesterDelete), v1alpha1.ModeDecommission)
	staleDrained.Generation = 2
	for _, tc := range []struct {
		name       string
		node       *corev1.Node
		nd         *v1alpha1.NodeDrain
		policy     *v1alpha1.DrainPolicy
		wantResult reconcile.Result
		wantGone   bool
		wantFin    []string // the node's finalizers, when it stays
		wantEvent  string   // a Warning's text, "" for none
	}{
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
			name:     "a deleted node under Orphan: let go at once",
			node:     held(time.Minute),
			nd:       drain(v1alpha1.ModeMaintenance, "cli:alice"),
			policy:   defaultPolicy(nil),
			wantGone: true,
		},
		{
			name:    "a live node whose drain is Drained in Decommission keeps it",
			node:    newNode("node-a").Finalizers(v1alpha1.FinalizerDrain).Obj(),
			nd:      drained(drain(v1alpha1.ModeDecommission, "cli:alice"), v1alpha1.ModeDecommission),
			policy:  defaultPolicy(onDelete),
			wantFin: []string{v1alpha1.FinalizerDrain},
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, interceptor.Funcs{}, objects(tc.node, tc.nd, tc.policy)...)
			before := promtestutil.ToFloat64(metrics.NodeDeletionTimeouts)
			res, err := w.reconcile()
			if err != nil || res != tc.wantResult {
				t.Fatalf("Reconcile = %+v, %v; want %+v and no error", res, err, tc.wantResult)
			}
			n := w.node()
			switch {
			case tc.wantGone && n != nil:
				t.Errorf("the node is still there with finalizers %v, want it let go", n.Finalizers)
			case !tc.wantGone && n == nil:
				t.Errorf("the node is gone, want it held with %v", tc.wantFin)
			case !tc.wantGone && !slices.Equal(n.Finalizers, tc.wantFin):
				t.Errorf("the node's finalizers %v, want %v", n.Finalizers, tc.wantFin)
			}
			var want []string
			if tc.wantEvent != "" {
				want = []string{tc.wantEvent}
			}
			if got := w.recorded(); !slices.Equal(got, want) {
				t.Errorf("events %q, want %q", got, want)
			}
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

// TestAnUnclearPolicyChangesNoEntryButStillBoundsADeletedNode: when two
// policies select the node, or a selector cannot be read, the pass
// requests, withdraws, adds and removes nothing and returns no error (a
// person must fix the selectors); a deleted node held by the finalizer is
// still released, at the longest timeouts.nodeDeletion of the policies that
// may govern it. A failure to list the policies is returned.
func TestAnUnclearPolicyChangesNoEntryButStillBoundsADeletedNode(t *testing.T) {
	gpu := selecting("gpu", map[string]string{"pool": "gpu"}, nodeDeletion(10*time.Minute))
	zoneA := selecting("zone-a", map[string]string{"zone": "a"}, nodeDeletion(30*time.Minute))
	def := defaultPolicy(nodeDeletion(5 * time.Minute))
	unreadable := selecting("broken", nil, nodeDeletion(15*time.Minute))
	unreadable.Spec.NodeSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pool", Operator: "Sometimes"}}}
	twoSelect := []*v1alpha1.DrainPolicy{gpu, zoneA, def}
	for _, tc := range []struct {
		name       string
		node       *corev1.Node
		nd         *v1alpha1.NodeDrain
		policies   []*v1alpha1.DrainPolicy
		wantResult reconcile.Result
		wantGone   bool
		wantFin    []string
		wantEvent  string
	}{
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, interceptor.Funcs{}, objects(tc.node, tc.nd, tc.policies...)...)
			res, err := w.reconcile()
			if err != nil || res != tc.wantResult {
				t.Fatalf("Reconcile = %+v, %v; want %+v and no error", res, err, tc.wantResult)
			}
			if len(w.applies.got) != 0 {
				t.Errorf("applied %v under an unclear policy, want nothing", w.applies.got)
			}
			if tc.nd != nil {
				left, there := w.requesters()
				var want []string
				for _, r := range tc.nd.Spec.Requesters {
					want = append(want, r.Name)
				}
				if !there || !slices.Equal(left, want) {
					t.Errorf("drain there: %v with %v, want it unchanged with %v", there, left, want)
				}
			}
			n := w.node()
			switch {
			case tc.wantGone && n != nil:
				t.Errorf("the node is still there with finalizers %v, want it released", n.Finalizers)
			case !tc.wantGone && (n == nil || !slices.Equal(n.Finalizers, tc.wantFin)):
				t.Errorf("the node is %+v, want it there with finalizers %v", n, tc.wantFin)
			}
			var want []string
			if tc.wantEvent != "" {
				want = []string{tc.wantEvent}
			}
			if got := w.recorded(); !slices.Equal(got, want) {
				t.Errorf("events %q, want %q", got, want)
			}
		})
	}
}

var (
	nodesGR  = schema.GroupResource{Resource: "nodes"}
	drainsGR = schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "nodedrains"}
)

// failOn fails the client's calls of kind verb ("get", "list", "patch") on
// objects of obj's type with err, and lets the others through.
func failOn(verb string, obj runtime.Object, err error) interceptor.Funcs {
	same := func(o runtime.Object) bool { return fmt.Sprintf("%T", o) == fmt.Sprintf("%T", obj) }
	switch verb {
	case "get":
		return interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
			if same(o) {
				return err
			}
			return c.Get(ctx, key, o, opts...)
		}}
	case "list":
		return interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if same(list) {
				return err
			}
			return c.List(ctx, list, opts...)
		}}
	case "patch":
		return interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			if same(o) {
				return err
			}
			return c.Patch(ctx, o, p, opts...)
		}}
	}
	panic("failOn: " + verb)
}

// TestReconcileHandlesAPIErrorsAsItsCommentsPromise: a lost optimistic lock
// (the finalizer's patch, a trigger's apply) is a requeue after
// requeue.ConflictRetry, not an error; a node gone before its finalizer's
// patch needs nothing, and a release whose node is gone is neither counted
// nor announced; every other failure is returned. A failed request does not
// stop the finalizer (its bound applies even then), but nothing is
// withdrawn in that pass.
func TestReconcileHandlesAPIErrorsAsItsCommentsPromise(t *testing.T) {
	forbidden := func(gr schema.GroupResource) error { return apierrors.NewForbidden(gr, "node-a", errors.New("no")) }
	conflict := apierrors.NewConflict(nodesGR, "node-a", errors.New("stale"))
	tainted := func() *corev1.Node {
		return newNode("node-a").Taint(v1alpha1.TaintDrain, corev1.TaintEffectNoSchedule).Obj()
	}
	expired := func() *corev1.Node {
		return newNode("node-a").Finalizers(v1alpha1.FinalizerDrain).Deleted(2 * time.Hour).Obj()
	}
	for _, tc := range []struct {
		name       string
		node       *corev1.Node
		nd         *v1alpha1.NodeDrain
		policy     *v1alpha1.DrainPolicy
		funcs      interceptor.Funcs
		applyErr   error
		wantResult reconcile.Result
		wantErr    func(error) bool // nil: no error
		wantApply  int              // applies attempted
		wantFin    []string         // the node's finalizers after; nil: not checked, empty: none
	}{
		{
			name:    "reading the node refused: returned, nothing asked",
			node:    tainted(),
			funcs:   failOn("get", &corev1.Node{}, forbidden(nodesGR)),
			wantErr: apierrors.IsForbidden,
		},
		{
			name:    "reading the drain refused: returned, nothing asked",
			node:    tainted(),
			funcs:   failOn("get", &v1alpha1.NodeDrain{}, forbidden(drainsGR)),
			wantErr: apierrors.IsForbidden,
		},
		{
			name:    "listing the policies fails for a deleted node: returned, nothing asked",
			node:    expired(),
			funcs:   failOn("list", &v1alpha1.DrainPolicyList{}, apierrors.NewServiceUnavailable("etcd is away")),
			wantErr: apierrors.IsServiceUnavailable,
			wantFin: []string{v1alpha1.FinalizerDrain},
		},
		{
			name:    "listing the policies fails for a live node: returned",
			node:    tainted(),
			funcs:   failOn("list", &v1alpha1.DrainPolicyList{}, apierrors.NewServiceUnavailable("etcd is away")),
			wantErr: apierrors.IsServiceUnavailable,
		},
		{
			name:       "the finalizer's patch conflicts: requeued",
			node:       tainted(),
			policy:     defaultPolicy(onDelete),
			funcs:      failOn("patch", &corev1.Node{}, conflict),
			wantResult: reconcile.Result{RequeueAfter: requeue.ConflictRetry},
			wantApply:  1,
			wantFin:    []string{},
		},
		{
			name:      "the node gone before the finalizer's patch: nothing to do",
			node:      tainted(),
			policy:    defaultPolicy(onDelete),
			funcs:     failOn("patch", &corev1.Node{}, apierrors.NewNotFound(nodesGR, "node-a")),
			wantApply: 1,
		},
		{
			name:      "the finalizer's patch refused: returned",
			node:      tainted(),
			policy:    defaultPolicy(onDelete),
			funcs:     failOn("patch", &corev1.Node{}, forbidden(nodesGR)),
			wantErr:   apierrors.IsForbidden,
			wantApply: 1,
		},
		{
			name:      "the request refused: returned, the finalizer still added, nothing withdrawn",
			node:      tainted(),
			nd:        drain(v1alpha1.ModeMaintenance, "cli:alice", v1alpha1.RequesterCordon),
			policy:    defaultPolicy(onDelete),
			applyErr:  forbidden(drainsGR),
			wantErr:   apierrors.IsForbidden,
			wantApply: 1,
			wantFin:   []string{v1alpha1.FinalizerDrain},
		},
		{
			name:       "the request conflicts: requeued",
			node:       tainted(),
			applyErr:   apierrors.NewConflict(drainsGR, "node-a", errors.New("changed")),
			wantResult: reconcile.Result{RequeueAfter: requeue.ConflictRetry},
			wantApply:  1,
		},
		{
			name:      "withdrawing refused: returned",
			node:      newNode("node-a").Obj(),
			nd:        drain(v1alpha1.ModeMaintenance, "cli:alice", v1alpha1.RequesterTaint),
			funcs:     failOn("patch", &v1alpha1.NodeDrain{}, forbidden(drainsGR)),
			wantErr:   apierrors.IsForbidden,
			wantApply: 1,
		},
		{
			name:      "the release finds the node gone: nothing to do",
			node:      expired(),
			policy:    defaultPolicy(onDelete),
			funcs:     failOn("patch", &corev1.Node{}, apierrors.NewNotFound(nodesGR, "node-a")),
			wantApply: 1,                                 // the delete trigger's
			wantFin:   []string{v1alpha1.FinalizerDrain}, // the fake's copy: the patch never reached it
		},
		{
			name:      "the release refused: returned",
			node:      expired(),
			policy:    defaultPolicy(onDelete),
			funcs:     failOn("patch", &corev1.Node{}, forbidden(nodesGR)),
			wantErr:   apierrors.IsForbidden,
			wantApply: 1, // the delete trigger's
			wantFin:   []string{v1alpha1.FinalizerDrain},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, tc.funcs, objects(tc.node, tc.nd, tc.policy)...)
			w.applies.err = tc.applyErr
			before := promtestutil.ToFloat64(metrics.NodeDeletionTimeouts)
			res, err := w.reconcile()
			switch {
			case tc.wantErr == nil && err != nil:
				t.Errorf("Reconcile = %v, want no error", err)
			case tc.wantErr != nil && !tc.wantErr(err):
				t.Errorf("Reconcile = %v, want the API's error returned", err)
			}
			if res != tc.wantResult {
				t.Errorf("Reconcile asked for %+v, want %+v", res, tc.wantResult)
			}
			if len(w.applies.got) != tc.wantApply {
				t.Errorf("applied %v, want %d apply(s)", w.applies.got, tc.wantApply)
			}
			if tc.wantFin != nil {
				n := w.node()
				if n == nil {
					t.Fatalf("the node is gone, want it with finalizers %v", tc.wantFin)
				}
				if !slices.Equal(n.Finalizers, tc.wantFin) {
					t.Errorf("the node's finalizers %v, want %v", n.Finalizers, tc.wantFin)
				}
			}
			if got := w.recorded(); len(got) != 0 {
				t.Errorf("events %q, want none", got)
			}
			if got := promtestutil.ToFloat64(metrics.NodeDeletionTimeouts) - before; got != 0 {
				t.Errorf("%v releases counted, want none", got)
			}
		})
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

// TestTriggerFieldsChangedPassesOnlyChangesATriggerReads: a node update
// wakes the trigger controller when it changes what a trigger or the
// finalizer reads: the cordon, the deletion, vacate's finalizer, the
// taints' keys and effects (in any order), the labels (which choose the
// policy) and vacate's cordon record. Status, heartbeats, other
// annotations, other finalizers, taint values and reordered taints do
// not. Creates and deletes always pass.
func TestTriggerFieldsChangedPassesOnlyChangesATriggerReads(t *testing.T) {
	base := func() *corev1.Node {
		n := newNode("node-a").Labels("pool", "gpu").Taint("a", corev1.TaintEffectNoSchedule).Taint("b", corev1.TaintEffectPreferNoSchedule).Obj()
		n.Annotations = map[string]string{"example.com/note": "x"}
		n.ResourceVersion = "1"
		return n
	}
	for _, tc := range []struct {
		name   string
		change func(n *corev1.Node)
		want   bool
	}{
		{"nothing but the resourceVersion", func(n *corev1.Node) { n.ResourceVersion = "2" }, false},
		{"status conditions", func(n *corev1.Node) {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
		}, false},
		{"cordoned", func(n *corev1.Node) { n.Spec.Unschedulable = true }, true},
		{"deleted", func(n *corev1.Node) { n.DeletionTimestamp = &metav1.Time{Time: now} }, true},
		{"vacate's finalizer added", func(n *corev1.Node) { n.Finalizers = []string{v1alpha1.FinalizerDrain} }, true},
		{"another finalizer added", func(n *corev1.Node) { n.Finalizers = []string{otherFinalizer} }, false},
		{"a taint added", func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: v1alpha1.TaintDrain, Effect: corev1.TaintEffectNoSchedule})
		}, true},
		{"a taint removed", func(n *corev1.Node) { n.Spec.Taints = n.Spec.Taints[:1] }, true},
		{"a taint's effect changed", func(n *corev1.Node) { n.Spec.Taints[0].Effect = corev1.TaintEffectNoExecute }, true},
		{"the taints reordered", func(n *corev1.Node) { slices.Reverse(n.Spec.Taints) }, false},
		{"a taint's value changed", func(n *corev1.Node) { n.Spec.Taints[0].Value = "soon" }, false},
		{"a label changed", func(n *corev1.Node) { n.Labels["pool"] = "web" }, true},
		{"a label added", func(n *corev1.Node) { n.Labels["zone"] = "a" }, true},
		{"vacate's cordon record written", func(n *corev1.Node) { n.Annotations[v1alpha1.AnnotationCordonedBy] = "node-a/uid" }, true},
		{"another annotation changed", func(n *corev1.Node) { n.Annotations["example.com/note"] = "y" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, updated := base(), base()
			tc.change(updated)
			if got := triggerFieldsChanged().Update(event.UpdateEvent{ObjectOld: old, ObjectNew: updated}); got != tc.want {
				t.Errorf("update passes: %v, want %v", got, tc.want)
			}
		})
	}
	p := triggerFieldsChanged()
	if !p.Create(event.CreateEvent{Object: base()}) || !p.Delete(event.DeleteEvent{Object: base()}) {
		t.Error("a node's create or delete does not pass")
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

// TestRequeueOnConflictTurnsOnlyALostLockIntoARetry: a conflict, wrapped or
// not, becomes a requeue after requeue.ConflictRetry with no error; any
// other error, and success, pass through with their result.
func TestRequeueOnConflictTurnsOnlyALostLockIntoARetry(t *testing.T) {
	conflict := apierrors.NewConflict(nodesGR, "node-a", errors.New("stale"))
	other := apierrors.NewForbidden(nodesGR, "node-a", errors.New("no"))
	wake := reconcile.Result{RequeueAfter: time.Hour}
	for _, tc := range []struct {
		name    string
		err     error
		want    reconcile.Result
		wantErr error
	}{
		{"a conflict", conflict, reconcile.Result{RequeueAfter: requeue.ConflictRetry}, nil},
		{"a wrapped conflict", fmt.Errorf("updating finalizer: %w", conflict), reconcile.Result{RequeueAfter: requeue.ConflictRetry}, nil},
		{"another error", other, wake, other},
		{"no error", nil, wake, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := requeueOnConflict(wake, tc.err)
			if res != tc.want || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Errorf("requeueOnConflict = %+v, %v; want %+v, %v", res, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestAPolicyChangeWakesEveryNode: a DrainPolicy change can change any
// node's triggers, so its map function asks for a pass of every node, and
// for none when the nodes cannot be listed.
func TestAPolicyChangeWakesEveryNode(t *testing.T) {
	nodes := []client.Object{newNode("node-a").Obj(), newNode("node-b").Obj(), newNode("node-c").Obj()}
	w := newWorld(t, interceptor.Funcs{}, nodes...)
	var got []string
	for _, req := range w.r.allNodes(context.Background(), defaultPolicy(nil)) {
		got = append(got, req.Name)
	}
	slices.Sort(got)
	if want := []string{"node-a", "node-b", "node-c"}; !slices.Equal(got, want) {
		t.Errorf("woke %v, want %v", got, want)
	}
	failing := newWorld(t, failOn("list", &corev1.NodeList{}, apierrors.NewServiceUnavailable("etcd is away")), nodes...)
	if reqs := failing.r.allNodes(context.Background(), defaultPolicy(nil)); len(reqs) != 0 {
		t.Errorf("woke %v while the nodes could not be listed, want none", reqs)
	}
}

// TestRequeueOnConflictOnlyWhenEveryErrorIsOne: a conflict (wrapped or
// joined with others) is a quiet requeue; a conflict joined with another
// error returns the error, whichever comes first.
func TestRequeueOnConflictOnlyWhenEveryErrorIsOne(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Group: "vacate.dev", Resource: "nodedrains"}, "n1", errors.New("the object has been modified"))
	other := errors.New("reading node n1: connection refused")
	for _, tc := range []struct {
		name    string
		err     error
		requeue bool
	}{
		{"no error", nil, false},
		{"a conflict", conflict, true},
		{"a wrapped conflict", fmt.Errorf("patching: %w", conflict), true},
		{"two conflicts", errors.Join(conflict, fmt.Errorf("again: %w", conflict)), true},
		{"a conflict, then another error", errors.Join(conflict, other), false},
		{"another error, then a conflict", errors.Join(other, conflict), false},
		{"another error", other, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := requeueOnConflict(reconcile.Result{}, tc.err)
			if tc.requeue {
				if err != nil || res.RequeueAfter != requeue.ConflictRetry {
					t.Errorf("got %+v, %v; want a requeue after %s and no error", res, err, requeue.ConflictRetry)
				}
				return
			}
			if err != tc.err || res.RequeueAfter != 0 {
				t.Errorf("got %+v, %v; want the error as it was, %v", res, err, tc.err)
			}
		})
	}
}
