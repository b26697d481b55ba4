package drainpolicy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/schedule"
)

func newScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := testutil.Scheme(t)
	return s
}

// drainPolicy is a DrainPolicy of generation 1 selecting nodes by the label
// pairs given (none: no nodeSelector, only for drains that name it).
func drainPolicy(name string, kv ...string) *v1alpha1.DrainPolicy {
	dp := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1}}
	if len(kv) > 0 {
		dp.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{}}
		for i := 0; i+1 < len(kv); i += 2 {
			dp.Spec.NodeSelector.MatchLabels[kv[i]] = kv[i+1]
		}
	}
	return dp
}

// broken has a nodeSelector that cannot be read.
func broken(name string) *v1alpha1.DrainPolicy {
	dp := drainPolicy(name)
	dp.Spec.NodeSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pool", Operator: "Sometimes"}}}
	return dp
}

func node(name string, kv ...string) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	for i := 0; i+1 < len(kv); i += 2 {
		n.Labels[kv[i]] = kv[i+1]
	}
	return n
}

func items(ps ...*v1alpha1.DrainPolicy) []v1alpha1.DrainPolicy {
	out := make([]v1alpha1.DrainPolicy, 0, len(ps))
	for _, p := range ps {
		out = append(out, *p.DeepCopy())
	}
	return out
}

// reported runs report on a copy of the policy named name among policies.
func reported(name string, policies []v1alpha1.DrainPolicy, nodes []corev1.Node) *v1alpha1.DrainPolicy {
	i := slices.IndexFunc(policies, func(p v1alpha1.DrainPolicy) bool { return p.Name == name })
	dp := policies[i].DeepCopy()
	(&Reconciler{}).report(dp, policies, nodes)
	return dp
}

// cluster: three GPU nodes (one also in zone a), a web node in zone a, and a
// node nobody selects but the default.
var cluster = []corev1.Node{
	node("gpu-1", "pool", "gpu"), node("gpu-2", "pool", "gpu"), node("gpu-a", "pool", "gpu", "zone", "a"),
	node("web-a", "pool", "web", "zone", "a"), node("spare"),
}

// TestStatusNodesCountsTheNodesEachPolicyGoverns: status.nodes is how many
// nodes a policy's nodeSelector matches; the default counts the nodes no
// other policy selects, and none while another policy's selector cannot be
// read (nothing is drained by selection then); a policy without nodeSelector
// governs no node (it only serves drains that name it). A node two policies
// select is counted by both (their selectors match it) and not by the
// default.
func TestStatusNodesCountsTheNodesEachPolicyGoverns(t *testing.T) {
	gpu, zoneA, web := drainPolicy("gpu", "pool", "gpu"), drainPolicy("zone-a", "zone", "a"), drainPolicy("web", "pool", "web")
	def, byName := drainPolicy(v1alpha1.DefaultPolicyName), drainPolicy("by-name-only")
	for _, tc := range []struct {
		name     string
		policies []v1alpha1.DrainPolicy
		want     map[string]int32
	}{
		{"selectors and the default share the nodes", items(gpu, web, def, byName), map[string]int32{"gpu": 3, "web": 1, "default": 1, "by-name-only": 0}},
		{"without a default the rest is nobody's", items(gpu, web), map[string]int32{"gpu": 3, "web": 1}},
		{"a node two policies select counts for both, not for the default", items(gpu, zoneA, def), map[string]int32{"gpu": 3, "zone-a": 2, "default": 1}},
		{"an unreadable selector leaves the default governing nothing", items(gpu, broken("broken"), def), map[string]int32{"gpu": 3, "broken": 0, "default": 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for name, want := range tc.want {
				if got := reported(name, tc.policies, cluster).Status.Nodes; got != want {
					t.Errorf("%s: status.nodes %d, want %d", name, got, want)
				}
			}
		})
	}
}

// TestOverlappingSelectorsAreReportedOnEveryPolicyInvolved: a node that two
// policies select sets Overlapping=True (SelectorsOverlap) on both, naming
// the other policy and the node; a policy that shares no node is
// NoOverlap. The default policy is never in an overlap (it governs what the
// others leave), nor is a policy without nodeSelector.
func TestOverlappingSelectorsAreReportedOnEveryPolicyInvolved(t *testing.T) {
	all := items(drainPolicy("gpu", "pool", "gpu"), drainPolicy("zone-a", "zone", "a"), drainPolicy("web", "pool", "web"),
		drainPolicy(v1alpha1.DefaultPolicyName), drainPolicy("by-name-only"), drainPolicy("empty-selector"))
	// An empty nodeSelector selects every node: it overlaps everything.
	all[5].Spec.NodeSelector = &metav1.LabelSelector{}
	for _, tc := range []struct {
		policy      string
		overlapping bool
		mentions    []string
	}{
		{"gpu", true, []string{"DrainPolicy empty-selector also selects 3 node(s): gpu-1, gpu-2, gpu-a", "DrainPolicy zone-a also selects 1 node(s): gpu-a"}},
		{"zone-a", true, []string{"DrainPolicy gpu also selects 1 node(s): gpu-a", "DrainPolicy web also selects 1 node(s): web-a"}},
		{"web", true, []string{"DrainPolicy zone-a also selects 1 node(s): web-a"}},
		{"empty-selector", true, []string{"DrainPolicy gpu also selects 3 node(s)", "DrainPolicy web also selects 1 node(s)", "DrainPolicy zone-a also selects 2 node(s)"}},
		{v1alpha1.DefaultPolicyName, false, nil},
		{"by-name-only", false, nil},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			c := meta.FindStatusCondition(reported(tc.policy, all, cluster).Status.Conditions, v1alpha1.ConditionOverlapping)
			if c == nil {
				t.Fatal("no Overlapping condition")
			}
			if got := c.Status == metav1.ConditionTrue; got != tc.overlapping {
				t.Fatalf("Overlapping %s (%s: %s), want overlapping %v", c.Status, c.Reason, c.Message, tc.overlapping)
			}
			wantReason := v1alpha1.ReasonNoOverlap
			if tc.overlapping {
				wantReason = v1alpha1.ReasonSelectorsOverlap
			}
			if c.Reason != wantReason {
				t.Errorf("reason %s, want %s", c.Reason, wantReason)
			}
			for _, m := range tc.mentions {
				if !strings.Contains(c.Message, m) {
					t.Errorf("message %q does not say %q", c.Message, m)
				}
			}
			if strings.Contains(c.Message, v1alpha1.DefaultPolicyName) || strings.Contains(c.Message, "by-name-only") {
				t.Errorf("message %q names a policy that cannot overlap", c.Message)
			}
		})
	}
	// A default that carries a nodeSelector (one written before the API
	// refused it) still governs only what the others leave: never an overlap.
	withSelector := items(drainPolicy(v1alpha1.DefaultPolicyName, "pool", "gpu"), drainPolicy("gpu", "pool", "gpu"))
	if c := meta.FindStatusCondition(reported(v1alpha1.DefaultPolicyName, withSelector, cluster).Status.Conditions, v1alpha1.ConditionOverlapping); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("a default with a nodeSelector: Overlapping %+v, want False", c)
	}
	// Without the empty selector, gpu and web share no node: no overlap.
	if c := meta.FindStatusCondition(reported("web", items(drainPolicy("gpu", "pool", "gpu"), drainPolicy("web", "pool", "web")), cluster).Status.Conditions, v1alpha1.ConditionOverlapping); c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonNoOverlap {
		t.Errorf("disjoint selectors: Overlapping %+v, want False NoOverlap", c)
	}
}

// TestOverlapMessageIsBoundedAndStable: the message names the other
// policies and their shared nodes sorted, whatever the order they came in
// (so it changes only when the overlap does), at most five nodes per
// policy ("and N more") and five policies ("and N more policies").
func TestOverlapMessageIsBoundedAndStable(t *testing.T) {
	const tail = "; drains of these nodes wait until exactly one policy selects them"
	for _, tc := range []struct {
		name   string
		shared map[string][]string
		want   string
	}{
		{
			name:   "sorted",
			shared: map[string][]string{"zeta": {"n2", "n1"}, "alpha": {"n9"}},
			want:   "DrainPolicy alpha also selects 1 node(s): n9; DrainPolicy zeta also selects 2 node(s): n1, n2" + tail,
		},
		{
			name:   "five nodes shown",
			shared: map[string][]string{"p": {"n5", "n4", "n3", "n2", "n1"}},
			want:   "DrainPolicy p also selects 5 node(s): n1, n2, n3, n4, n5" + tail,
		},
		{
			name:   "six nodes: five shown",
			shared: map[string][]string{"p": {"n6", "n5", "n4", "n3", "n2", "n1"}},
			want:   "DrainPolicy p also selects 6 node(s): n1, n2, n3, n4, n5 and 1 more" + tail,
		},
		{
			name:   "more than five nodes",
			shared: map[string][]string{"p": {"n7", "n6", "n5", "n4", "n3", "n2", "n1"}},
			want:   "DrainPolicy p also selects 7 node(s): n1, n2, n3, n4, n5 and 2 more" + tail,
		},
		{
			name:   "more than five policies",
			shared: map[string][]string{"p7": {"n"}, "p6": {"n"}, "p5": {"n"}, "p4": {"n"}, "p3": {"n"}, "p2": {"n"}, "p1": {"n"}},
			want: "DrainPolicy p1 also selects 1 node(s): n; DrainPolicy p2 also selects 1 node(s): n; DrainPolicy p3 also selects 1 node(s): n; " +
				"DrainPolicy p4 also selects 1 node(s): n; DrainPolicy p5 also selects 1 node(s): n; and 2 more policies" + tail,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := overlapMessage(tc.shared); got != tc.want {
				t.Errorf("overlapMessage =\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
	// The same overlap reached from nodes listed in another order reads the same.
	ps := items(drainPolicy("a", "pool", "gpu"), drainPolicy("b", "pool", "gpu"))
	reversed := slices.Clone(cluster)
	slices.Reverse(reversed)
	one := meta.FindStatusCondition(reported("a", ps, cluster).Status.Conditions, v1alpha1.ConditionOverlapping)
	other := meta.FindStatusCondition(reported("a", ps, reversed).Status.Conditions, v1alpha1.ConditionOverlapping)
	if one == nil || other == nil || one.Message != other.Message {
		t.Errorf("the message depends on the nodes' order: %+v vs %+v", one, other)
	}
}

// TestValidConditionSaysWhetherTheSelectorAndScheduleCanBeRead: a readable
// nodeSelector and schedule make Valid=True; an unreadable schedule makes it
// False (InvalidSchedule) and the rest is still reported; an unreadable
// nodeSelector makes it False (InvalidNodeSelector), drops a stale
// Overlapping condition and zeroes status.nodes, since nothing it says about
// nodes could be trusted. Everything is stamped with the generation read.
func TestValidConditionSaysWhetherTheSelectorAndScheduleCanBeRead(t *testing.T) {
	badZone := drainPolicy("gpu", "pool", "gpu")
	badZone.Spec.Schedule = &v1alpha1.Schedule{TimeZone: "Mars/Olympus_Mons", Windows: []v1alpha1.MaintenanceWindow{{Start: "01:00", End: "05:00"}}}
	goodSchedule := drainPolicy("gpu", "pool", "gpu")
	goodSchedule.Spec.Schedule = &v1alpha1.Schedule{TimeZone: "Europe/Berlin", Windows: []v1alpha1.MaintenanceWindow{{Days: []v1alpha1.Weekday{"Sat"}, Start: "22:00", End: "04:00"}}}
	for _, tc := range []struct {
		name            string
		dp              *v1alpha1.DrainPolicy
		wantStatus      metav1.ConditionStatus
		wantReason      string
		wantNodes       int32
		wantOverlapping bool // the condition is there
	}{
		{"selector and no schedule", drainPolicy("gpu", "pool", "gpu"), metav1.ConditionTrue, v1alpha1.ReasonValid, 3, true},
		{"selector and a schedule", goodSchedule, metav1.ConditionTrue, v1alpha1.ReasonValid, 3, true},
		{"an unknown time zone", badZone, metav1.ConditionFalse, schedule.InvalidSchedule, 3, true},
		{"an unreadable nodeSelector", broken("gpu"), metav1.ConditionFalse, v1alpha1.ReasonInvalidNodeSelector, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dp := tc.dp.DeepCopy()
			dp.Generation = 7
			// What an earlier pass wrote, when the policy was fine.
			dp.Status.Nodes = 3
			dp.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionOverlapping, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonNoOverlap, ObservedGeneration: 6}}
			(&Reconciler{}).report(dp, items(dp), cluster)
			valid := meta.FindStatusCondition(dp.Status.Conditions, v1alpha1.ConditionValid)
			if valid == nil || valid.Status != tc.wantStatus || valid.Reason != tc.wantReason {
				t.Fatalf("Valid %+v, want %s %s", valid, tc.wantStatus, tc.wantReason)
			}
			if tc.wantStatus == metav1.ConditionFalse && !strings.Contains(valid.Message, "until it is fixed") {
				t.Errorf("Valid message %q does not say drains wait until it is fixed", valid.Message)
			}
			if dp.Status.Nodes != tc.wantNodes {
				t.Errorf("status.nodes %d, want %d", dp.Status.Nodes, tc.wantNodes)
			}
			overlapping := meta.FindStatusCondition(dp.Status.Conditions, v1alpha1.ConditionOverlapping)
			if (overlapping != nil) != tc.wantOverlapping {
				t.Errorf("Overlapping %+v, want it present: %v", overlapping, tc.wantOverlapping)
			}
			if dp.Status.ObservedGeneration != 7 {
				t.Errorf("status.observedGeneration %d, want 7", dp.Status.ObservedGeneration)
			}
			for _, c := range dp.Status.Conditions {
				if c.ObservedGeneration != 7 {
					t.Errorf("condition %s stamped with generation %d, want 7", c.Type, c.ObservedGeneration)
				}
			}
		})
	}
}

// forceDeletePolicy selects the GPU nodes and deletes pods at a timeout.
func forceDeletePolicy() *v1alpha1.DrainPolicy {
	dp := drainPolicy("gpu", "pool", "gpu")
	dp.Spec.Timeouts.OnTimeout = "ForceDelete"
	return dp
}

// reviews answers the controller's SelfSubjectAccessReviews with allowed
// and records what they asked, or fails them with err.
type reviews struct {
	allowed bool
	err     error
	asked   []authorizationv1.ResourceAttributes
}

func (rv *reviews) create(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
	review, ok := obj.(*authorizationv1.SelfSubjectAccessReview)
	if !ok {
		return c.Create(ctx, obj, opts...)
	}
	if rv.err != nil {
		return rv.err
	}
	if review.Spec.ResourceAttributes != nil {
		rv.asked = append(rv.asked, *review.Spec.ResourceAttributes)
	}
	review.Status.Allowed = rv.allowed
	return nil
}

// statusWrites counts the status writes of DrainPolicies and lets them
// through, unless fail is set.
type statusWrites struct {
	n    int
	fail error
}

func (sw *statusWrites) patch(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
	sw.n++
	if sw.fail != nil {
		return sw.fail
	}
	return c.SubResource(sub).Patch(ctx, obj, p, opts...)
}

func newClient(t *testing.T, funcs interceptor.Funcs, objs ...client.Object) client.Client {
	t.Helper()
	return fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(objs...).
		WithStatusSubresource(&v1alpha1.DrainPolicy{}).WithInterceptorFuncs(funcs).Build()
}

func nodeObjs(nodes ...corev1.Node) []client.Object {
	out := make([]client.Object, 0, len(nodes))
	for i := range nodes {
		out = append(out, nodes[i].DeepCopy())
	}
	return out
}

func reconcilePolicy(t *testing.T, cl client.Client, name string) (reconcile.Result, error) {
	t.Helper()
	return (&Reconciler{Client: cl}).Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
}

func stored(t *testing.T, cl client.Client, name string) *v1alpha1.DrainPolicy {
	t.Helper()
	dp := &v1alpha1.DrainPolicy{}
	if err := cl.Get(context.Background(), types.NamespacedName{Name: name}, dp); err != nil {
		t.Fatal(err)
	}
	return dp
}

// TestReconcileWritesTheStatusFromAllPoliciesAndNodes: a pass reads every
// policy and node and writes the policy's status subresource (its spec is
// left alone); a second pass with nothing changed writes nothing.
func TestReconcileWritesTheStatusFromAllPoliciesAndNodes(t *testing.T) {
	writes := &statusWrites{}
	objs := append(nodeObjs(cluster...), drainPolicy("gpu", "pool", "gpu"), drainPolicy("zone-a", "zone", "a"))
	cl := newClient(t, interceptor.Funcs{SubResourcePatch: writes.patch}, objs...)

	res, err := reconcilePolicy(t, cl, "gpu")
	if err != nil || res != (reconcile.Result{}) {
		t.Fatalf("Reconcile = %+v, %v; want no requeue and no error", res, err)
	}
	dp := stored(t, cl, "gpu")
	if dp.Status.Nodes != 3 || dp.Status.ObservedGeneration != 1 {
		t.Errorf("status.nodes %d for generation %d, want 3 for generation 1", dp.Status.Nodes, dp.Status.ObservedGeneration)
	}
	if c := meta.FindStatusCondition(dp.Status.Conditions, v1alpha1.ConditionOverlapping); c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "zone-a") {
		t.Errorf("Overlapping %+v, want True naming zone-a", c)
	}
	if !meta.IsStatusConditionTrue(dp.Status.Conditions, v1alpha1.ConditionValid) {
		t.Errorf("Valid is not True: %+v", dp.Status.Conditions)
	}
	if dp.Spec.NodeSelector == nil || dp.Spec.NodeSelector.MatchLabels["pool"] != "gpu" {
		t.Errorf("the spec changed: %+v", dp.Spec)
	}
	if writes.n != 1 {
		t.Fatalf("%d status writes, want 1", writes.n)
	}
	if _, err := reconcilePolicy(t, cl, "gpu"); err != nil {
		t.Fatal(err)
	}
	if writes.n != 1 {
		t.Errorf("a pass with nothing changed wrote the status again (%d writes)", writes.n)
	}
}

// TestForceDeletePermittedFollowsTheControllersRightToDeletePods: a policy
// with onTimeout: ForceDelete asks the API server (a SelfSubjectAccessReview
// for deleting pods in every namespace) and reports the answer:
// ForceDeletePermitted True (Permitted) or False (MissingForceDeleteRole,
// saying which ClusterRole to bind); it asks again a minute later, so a
// binding made or removed later shows. A policy that stops using
// ForceDelete loses the condition and asks nothing.
func TestForceDeletePermittedFollowsTheControllersRightToDeletePods(t *testing.T) {
	for _, tc := range []struct {
		name    string
		allowed bool
		status  metav1.ConditionStatus
		reason  string
	}{
		{"bound", true, metav1.ConditionTrue, v1alpha1.ReasonForceDeletePermitted},
		{"not bound", false, metav1.ConditionFalse, v1alpha1.ReasonMissingForceDeleteRole},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rv := &reviews{allowed: tc.allowed}
			cl := newClient(t, interceptor.Funcs{Create: rv.create}, forceDeletePolicy())
			res, err := reconcilePolicy(t, cl, "gpu")
			if err != nil {
				t.Fatal(err)
			}
			if res.RequeueAfter != forceDeleteRecheck {
				t.Errorf("requeue after %s, want %s to ask again", res.RequeueAfter, forceDeleteRecheck)
			}
			want := authorizationv1.ResourceAttributes{Verb: "delete", Resource: "pods"}
			if len(rv.asked) != 1 || rv.asked[0] != want {
				t.Errorf("asked %+v, want one review of %+v (every namespace)", rv.asked, want)
			}
			c := meta.FindStatusCondition(stored(t, cl, "gpu").Status.Conditions, v1alpha1.ConditionForceDeletePermitted)
			if c == nil || c.Status != tc.status || c.Reason != tc.reason {
				t.Fatalf("ForceDeletePermitted %+v, want %s %s", c, tc.status, tc.reason)
			}
			if !tc.allowed && !strings.Contains(c.Message, "vacate-controller-force-delete") {
				t.Errorf("message %q does not name the ClusterRole to bind", c.Message)
			}

			// The policy goes back to Fail: the condition goes, nothing is asked.
			dp := stored(t, cl, "gpu")
			dp.Spec.Timeouts.OnTimeout = "Fail"
			dp.Generation++
			if err := cl.Update(context.Background(), dp); err != nil {
				t.Fatal(err)
			}
			res, err = reconcilePolicy(t, cl, "gpu")
			if err != nil || res.RequeueAfter != 0 {
				t.Fatalf("Reconcile under Fail = %+v, %v; want no requeue and no error", res, err)
			}
			if len(rv.asked) != 1 {
				t.Errorf("a policy without ForceDelete asked again (%d reviews)", len(rv.asked))
			}
			if c := meta.FindStatusCondition(stored(t, cl, "gpu").Status.Conditions, v1alpha1.ConditionForceDeletePermitted); c != nil {
				t.Errorf("ForceDeletePermitted %+v left on a policy under Fail", c)
			}
		})
	}
}

// TestForceDeleteRightFlipsTheConditionWhenTheBindingChanges: the answer
// is read on every pass: a binding removed since turns True into False.
func TestForceDeleteRightFlipsTheConditionWhenTheBindingChanges(t *testing.T) {
	rv := &reviews{allowed: true}
	cl := newClient(t, interceptor.Funcs{Create: rv.create}, forceDeletePolicy())
	if _, err := reconcilePolicy(t, cl, "gpu"); err != nil {
		t.Fatal(err)
	}
	rv.allowed = false
	if _, err := reconcilePolicy(t, cl, "gpu"); err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(stored(t, cl, "gpu").Status.Conditions, v1alpha1.ConditionForceDeletePermitted)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonMissingForceDeleteRole {
		t.Errorf("after the binding went: ForceDeletePermitted %+v, want False %s", c, v1alpha1.ReasonMissingForceDeleteRole)
	}
}

// TestReconcileHandlesAPIErrorsAsItsCommentsPromise: a policy that is gone
// needs nothing; a status write that lost the optimistic lock is retried a
// second later without an error (a newer copy is on its way); any other
// failure (reading the policy, listing policies or nodes, asking for the
// right to delete pods, a refused status write) is returned, and a pass
// whose review failed writes no status.
func TestReconcileHandlesAPIErrorsAsItsCommentsPromise(t *testing.T) {
	gr := schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "drainpolicies"}
	forbidden := apierrors.NewForbidden(gr, "gpu", errors.New("no"))
	failList := func(of client.ObjectList) interceptor.Funcs {
		return interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if fmt.Sprintf("%T", list) == fmt.Sprintf("%T", of) {
				return apierrors.NewServiceUnavailable("etcd is away")
			}
			return c.List(ctx, list, opts...)
		}}
	}
	for _, tc := range []struct {
		name       string
		objs       []client.Object
		funcs      interceptor.Funcs
		writes     *statusWrites
		wantResult reconcile.Result
		wantErr    func(error) bool // nil: no error
		wantWrites int
	}{
		{name: "policy gone: nothing to do", objs: nodeObjs(cluster...)},
		{
			name: "reading the policy refused: returned",
			objs: []client.Object{drainPolicy("gpu", "pool", "gpu")},
			funcs: interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
				return forbidden
			}},
			wantErr: apierrors.IsForbidden,
		},
		{name: "listing policies fails: returned", objs: []client.Object{drainPolicy("gpu", "pool", "gpu")}, funcs: failList(&v1alpha1.DrainPolicyList{}), wantErr: apierrors.IsServiceUnavailable},
		{name: "listing nodes fails: returned", objs: []client.Object{drainPolicy("gpu", "pool", "gpu")}, funcs: failList(&corev1.NodeList{}), wantErr: apierrors.IsServiceUnavailable},
		{
			name:    "the access review is refused: returned, no status written",
			objs:    []client.Object{forceDeletePolicy()},
			funcs:   interceptor.Funcs{Create: (&reviews{err: forbidden}).create},
			writes:  &statusWrites{},
			wantErr: apierrors.IsForbidden,
		},
		{
			name:       "status write conflicts: retried in a second",
			objs:       []client.Object{drainPolicy("gpu", "pool", "gpu")},
			writes:     &statusWrites{fail: apierrors.NewConflict(gr, "gpu", errors.New("stale"))},
			wantResult: reconcile.Result{RequeueAfter: time.Second},
			wantWrites: 1,
		},
		{
			name:       "status write conflicts under ForceDelete: retried in a second too",
			objs:       []client.Object{forceDeletePolicy()},
			funcs:      interceptor.Funcs{Create: (&reviews{allowed: true}).create},
			writes:     &statusWrites{fail: apierrors.NewConflict(gr, "gpu", errors.New("stale"))},
			wantResult: reconcile.Result{RequeueAfter: time.Second},
			wantWrites: 1,
		},
		{
			name:       "status write refused: returned",
			objs:       []client.Object{drainPolicy("gpu", "pool", "gpu")},
			writes:     &statusWrites{fail: forbidden},
			wantErr:    apierrors.IsForbidden,
			wantWrites: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			funcs := tc.funcs
			if tc.writes != nil {
				funcs.SubResourcePatch = tc.writes.patch
			}
			cl := newClient(t, funcs, tc.objs...)
			res, err := reconcilePolicy(t, cl, "gpu")
			switch {
			case tc.wantErr == nil && err != nil:
				t.Errorf("Reconcile = %v, want no error", err)
			case tc.wantErr != nil && !tc.wantErr(err):
				t.Errorf("Reconcile = %v, want the API's error returned", err)
			}
			if tc.wantErr == nil && res != tc.wantResult {
				t.Errorf("Reconcile asked for %+v, want %+v", res, tc.wantResult)
			}
			if tc.writes != nil && tc.writes.n != tc.wantWrites {
				t.Errorf("%d status writes, want %d", tc.writes.n, tc.wantWrites)
			}
		})
	}
}

// TestAnyPolicyOrNodeChangeWakesEveryPolicy: the map function behind the
// policy and node watches asks for a pass of every policy (an overlap or a
// count can change anywhere), and for none when the policies cannot be
// listed.
func TestAnyPolicyOrNodeChangeWakesEveryPolicy(t *testing.T) {
	objs := []client.Object{drainPolicy("gpu", "pool", "gpu"), drainPolicy("web", "pool", "web"), drainPolicy(v1alpha1.DefaultPolicyName)}
	r := &Reconciler{Client: newClient(t, interceptor.Funcs{}, objs...)}
	var got []string
	for _, req := range r.allPolicies(context.Background(), &corev1.Node{}) {
		got = append(got, req.Name)
	}
	slices.Sort(got)
	if want := []string{"default", "gpu", "web"}; !slices.Equal(got, want) {
		t.Errorf("woke %v, want %v", got, want)
	}

	failing := &Reconciler{Client: newClient(t, interceptor.Funcs{List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
		return apierrors.NewServiceUnavailable("etcd is away")
	}}, objs...)}
	if reqs := failing.allPolicies(context.Background(), &corev1.Node{}); len(reqs) != 0 {
		t.Errorf("woke %v while the policies could not be listed, want none", reqs)
	}
}
