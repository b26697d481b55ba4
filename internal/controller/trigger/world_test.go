package trigger

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

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
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// This file is the tests' world: a Reconciler over a fake client and a fake
// clock, builders for the nodes, policies and drains it reads, and a record of
// the applies it sends.

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

// Condition sets a node condition, as the admin's tooling or the kubelet
// would.
func (b *nodeBuilder) Condition(t corev1.NodeConditionType, s corev1.ConditionStatus) *nodeBuilder {
	b.n.Status.Conditions = append(b.n.Status.Conditions, corev1.NodeCondition{Type: t, Status: s, Reason: "KernelUpgrade", Message: "6.12 rollout"})
	return b
}

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
// with err, writing nothing; without err, the answer is the drain as stored
// (as the API server answers an apply that changes nothing). The fake
// client's apply has no schema for NodeDrain: it treats spec.requesters as
// atomic, so a requester joining a drain conflicts where the API server
// merges the entries by name. The tests here check what each apply asks;
// the merge is the API server's (the e2e tests cover it).
type applies struct {
	got []applied
	err error
}

func (a *applies) apply(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
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
	if a.err != nil {
		return a.err
	}
	answer, ok := obj.(interface{ SetUnstructuredContent(map[string]any) })
	stored := &v1alpha1.NodeDrain{}
	if !ok || c.Get(ctx, client.ObjectKeyFromObject(nd), stored) != nil {
		return nil
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(stored)
	if err != nil {
		return err
	}
	answer.SetUnstructuredContent(content)
	return nil
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

// checkEvent checks that the pass recorded the Warning want, or no event
// when want is "".
func (w *world) checkEvent(want string) {
	w.t.Helper()
	var wantEvents []string
	if want != "" {
		wantEvents = []string{want}
	}
	if got := w.recorded(); !slices.Equal(got, wantEvents) {
		w.t.Errorf("events %q, want %q", got, wantEvents)
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
