package admission

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
)

// The decisions of the pass of HeldKey, against a fake client: the
// scenarios on a real control plane are the NodeDrain controller's tests
// (TestNodeGoneGivesUpAdmission, TestPolicyChosenByNodeSelectorAndOverlapsHold,
// TestReplacedNodeStartsOver, TestNodeNotFoundWaitsThenProceeds).

func heldNode(name string, uid types.UID, labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid, Labels: labels}}
}

func selecting(name string, labels map[string]string) v1alpha1.DrainPolicy {
	return v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.DrainPolicySpec{NodeSelector: &metav1.LabelSelector{MatchLabels: labels}}}
}

func TestHeld(t *testing.T) {
	pool := map[string]string{"pool": "a"}
	drain := func(policyName, nodeUID string) *v1alpha1.NodeDrain {
		nd := testutil.NodeDrain("n1", policyName, "cli:test")
		nd.Status.NodeUID = nodeUID
		return nd
	}
	invalid := v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "broken"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pool", Operator: "Sometimes"}}}}}
	cases := []struct {
		name     string
		drain    *v1alpha1.NodeDrain
		node     *corev1.Node
		policies []v1alpha1.DrainPolicy
		reason   string
		message  string // a part of it
	}{
		{name: "node and policy clear", drain: drain("", "u1"), node: heldNode("n1", "u1", pool),
			policies: []v1alpha1.DrainPolicy{selecting("a", pool)}},
		{name: "built-in defaults", drain: drain("", ""), node: heldNode("n1", "u1", nil)},
		{name: "no UID recorded yet", drain: drain("", ""), node: heldNode("n1", "u2", nil)},
		{name: "the policy it names", drain: drain("strict", "u1"), node: heldNode("n1", "u1", pool),
			policies: []v1alpha1.DrainPolicy{selecting("a", pool), selecting("b", pool), {ObjectMeta: metav1.ObjectMeta{Name: "strict"}}}},
		{name: "node missing", drain: drain("", "u1"), reason: v1alpha1.ReasonNodeNotFound,
			message: "node n1 does not exist; the drain starts if it appears"},
		{name: "node missing, policy missing too", drain: drain("strict", ""), reason: v1alpha1.ReasonNodeNotFound,
			message: "node n1 does not exist; the drain starts if it appears"},
		{name: "node replaced", drain: drain("", "u1"), node: heldNode("n1", "u2", nil), reason: v1alpha1.ReasonNodeReplaced,
			message: "node n1 was deleted and created again (uid u2, was u1): it is another node; the drain starts over on it"},
		{name: "node replaced, policy ambiguous", drain: drain("", "u1"), node: heldNode("n1", "u2", pool),
			policies: []v1alpha1.DrainPolicy{selecting("a", pool), selecting("b", pool)}, reason: v1alpha1.ReasonNodeReplaced, message: "created again"},
		{name: "named policy missing", drain: drain("strict", "u1"), node: heldNode("n1", "u1", pool),
			policies: []v1alpha1.DrainPolicy{selecting("a", pool)}, reason: v1alpha1.ReasonPolicyNotFound,
			message: `DrainPolicy "strict" named by spec.policyName does not exist`},
		{name: "two policies select the node", drain: drain("", "u1"), node: heldNode("n1", "u1", pool),
			policies: []v1alpha1.DrainPolicy{selecting("b", pool), selecting("a", pool)}, reason: v1alpha1.ReasonAmbiguousPolicy,
			message: "DrainPolicies a, b all select the node"},
		{name: "a selector that cannot be read", drain: drain("", "u1"), node: heldNode("n1", "u1", pool),
			policies: []v1alpha1.DrainPolicy{invalid}, reason: v1alpha1.ReasonAmbiguousPolicy, message: "DrainPolicy broken has an invalid nodeSelector"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reason, msg := Held(tc.drain, tc.node, tc.policies)
			if reason != tc.reason || (tc.message == "") != (msg == "") || !strings.Contains(msg, tc.message) {
				t.Errorf("Held() = %q, %q; want %q with %q", reason, msg, tc.reason, tc.message)
			}
		})
	}
}

// heldScene is a fake cluster for the pass of HeldKey.
type heldScene struct {
	r       *Reconciler
	cl      client.Client
	patches int
	// conflict, when set, makes every status patch a conflict.
	conflict bool
}

func newHeldScene(t *testing.T, objs ...client.Object) *heldScene {
	t.Helper()
	sc := &heldScene{}
	sc.cl = fake.NewClientBuilder().WithScheme(testutil.Scheme(t)).WithObjects(objs...).
		WithStatusSubresource(&v1alpha1.NodeDrain{}).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
				sc.patches++
				if sc.conflict {
					return apierrors.NewConflict(schema.GroupResource{Group: "vacate.dev", Resource: "nodedrains"}, o.GetName(), nil)
				}
				return c.SubResource(sub).Patch(ctx, o, p, opts...)
			},
		}).Build()
	sc.r = &Reconciler{Client: sc.cl, Clock: clocktesting.NewFakePassiveClock(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)),
		Events: events.NewFakeRecorder(10)}
	return sc
}

func (sc *heldScene) pass(t *testing.T) reconcile.Result {
	t.Helper()
	res, err := sc.r.Reconcile(context.Background(), keyRequest(HeldKey))
	if err != nil {
		t.Fatalf("the pass of %s: %v", HeldKey, err)
	}
	return res
}

func (sc *heldScene) drain(t *testing.T, name string) *v1alpha1.NodeDrain {
	t.Helper()
	nd := &v1alpha1.NodeDrain{}
	if err := sc.cl.Get(context.Background(), client.ObjectKey{Name: name}, nd); err != nil {
		t.Fatal(err)
	}
	return nd
}

// runningDrain is a drain the NodeDrain controller took (finalizer), in
// phase, admitted or not; nodeUID is what it recorded of its node.
func runningDrain(node, policyName, nodeUID string, phase v1alpha1.DrainPhase, admitted bool) *v1alpha1.NodeDrain {
	nd := testutil.NodeDrain(node, policyName, "cli:test")
	nd.Finalizers = []string{v1alpha1.FinalizerRestore}
	nd.Status.Phase, nd.Status.NodeUID = phase, nodeUID
	requested := metav1.NewTime(time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC))
	nd.Status.RequestTime = &requested
	if admitted {
		nd.Status.StartTime = &requested
		nd.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionAdmitted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonAdmitted,
			Message: "admitted by built-in defaults", LastTransitionTime: requested}}
	} else {
		nd.Status.QueuePosition = 2
		nd.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionAdmitted, Status: metav1.ConditionFalse, Reason: "WaitingForSlot",
			Message: "queued at position 2", LastTransitionTime: requested}}
	}
	return nd
}

// TestHoldPass: the pass of HeldKey holds every running drain that belongs
// to no queue (an admitted one gives its admission up: no start time, no
// slot), leaves the others alone, writes nothing twice, and retries a
// drain that changed under it.
func TestHoldPass(t *testing.T) {
	pool := map[string]string{"pool": "a"}
	a, b := selecting("a", pool), selecting("b", pool)
	ended := runningDrain("ended", "", "u-ended", v1alpha1.PhaseDrained, true) // its node is gone too
	untaken := runningDrain("untaken", "", "", "", false)                      // no finalizer yet, no node
	untaken.Finalizers = nil
	objs := []client.Object{
		heldNode("fine", "u-fine", nil), heldNode("replaced", "u-new", nil), heldNode("pooled", "u-pooled", pool), heldNode("named", "u-named", nil),
		&a, &b,
		runningDrain("fine", "", "u-fine", v1alpha1.PhaseEvicting, true),
		runningDrain("gone", "", "u-gone", v1alpha1.PhaseEvicting, true),
		runningDrain("replaced", "", "u-old", v1alpha1.PhasePending, true),
		runningDrain("pooled", "", "u-pooled", "", false),
		runningDrain("named", "strict", "u-named", v1alpha1.PhasePending, false),
		ended, untaken,
	}
	sc := newHeldScene(t, objs...)
	before := map[string]*v1alpha1.NodeDrain{}
	for _, o := range objs {
		if nd, ok := o.(*v1alpha1.NodeDrain); ok {
			before[nd.Name] = sc.drain(t, nd.Name)
		}
	}

	if res := sc.pass(t); res.RequeueAfter != requeue.Resync {
		t.Errorf("with drains held the pass comes back after %s, want %s", res.RequeueAfter, requeue.Resync)
	}
	held := map[string]struct {
		reason string
		phase  v1alpha1.DrainPhase
	}{
		// The phase is the NodeDrain controller's alone: admission leaves it
		// as it was, none included.
		"gone":     {v1alpha1.ReasonNodeNotFound, v1alpha1.PhaseEvicting},
		"replaced": {v1alpha1.ReasonNodeReplaced, v1alpha1.PhasePending},
		"pooled":   {v1alpha1.ReasonAmbiguousPolicy, ""},
		"named":    {v1alpha1.ReasonPolicyNotFound, v1alpha1.PhasePending},
	}
	for name, was := range before {
		nd := sc.drain(t, name)
		want, isHeld := held[name]
		if !isHeld {
			if nd.ResourceVersion != was.ResourceVersion {
				t.Errorf("%s: the pass changed a drain it does not hold: %+v", name, nd.Status)
			}
			continue
		}
		c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionAdmitted)
		_, wantMsg := Held(was, nodeOrNil(t, sc, name), []v1alpha1.DrainPolicy{a, b})
		switch {
		case c == nil || c.Status != metav1.ConditionFalse || c.Reason != want.reason:
			t.Errorf("%s: Admitted %+v, want False with %s", name, c, want.reason)
		case c.Message != wantMsg || c.ObservedGeneration != nd.Generation:
			t.Errorf("%s: Admitted %+v, want the message %q", name, c, wantMsg)
		case nd.Admitted() || nd.Status.StartTime != nil || nd.Status.QueuePosition != 0:
			t.Errorf("%s: held with admitted %t, startTime %v, queuePosition %d", name, nd.Admitted(), nd.Status.StartTime, nd.Status.QueuePosition)
		case nd.Status.Phase != want.phase:
			t.Errorf("%s: phase %q, want %q", name, nd.Status.Phase, want.phase)
		case !nd.Status.RequestTime.Equal(was.Status.RequestTime) || nd.Status.NodeUID != was.Status.NodeUID:
			t.Errorf("%s: the pass changed requestTime or nodeUID: %+v", name, nd.Status)
		}
	}
	if c := meta.FindStatusCondition(sc.drain(t, "named").Status.Conditions, v1alpha1.ConditionAdmitted); c == nil ||
		c.Message != `DrainPolicy "strict" named by spec.policyName does not exist` {
		t.Errorf("named: Admitted %+v, want the message policy.Resolve gives", c)
	}
	if c := meta.FindStatusCondition(sc.drain(t, "replaced").Status.Conditions, v1alpha1.ConditionAdmitted); c == nil ||
		c.Message != "node replaced was deleted and created again (uid u-new, was u-old): it is another node; the drain starts over on it" {
		t.Errorf("replaced: Admitted %+v", c)
	}

	t.Log("a second pass finds nothing to write")
	n := sc.patches
	sc.pass(t)
	if sc.patches != n {
		t.Errorf("a second pass wrote %d status patch(es)", sc.patches-n)
	}

	t.Log("a drain that changed under the pass is decided again")
	sc2 := newHeldScene(t, runningDrain("gone", "", "u-gone", v1alpha1.PhaseEvicting, true))
	sc2.conflict = true
	if res := sc2.pass(t); res.RequeueAfter != requeue.ConflictRetry {
		t.Errorf("after a conflict the pass comes back after %s, want %s", res.RequeueAfter, requeue.ConflictRetry)
	}
	if !sc2.drain(t, "gone").Admitted() {
		t.Error("the conflicting write landed")
	}
}

func nodeOrNil(t *testing.T, sc *heldScene, name string) *corev1.Node {
	t.Helper()
	node, err := sc.r.nodeOf(context.Background(), &v1alpha1.NodeDrain{Spec: v1alpha1.NodeDrainSpec{NodeName: name}})
	if err != nil {
		t.Fatal(err)
	}
	return node
}

// TestQueueOfHeldDrain: an event of a drain that is held, or may be, brings
// the pass of HeldKey; with its node missing, every queue it may count in
// too (an admitted drain of a missing node holds a slot there); a drain of
// no doubt brings its own queue only.
func TestQueueOfHeldDrain(t *testing.T) {
	pool := map[string]string{"pool": "a"}
	a, b, other := selecting("a", pool), selecting("b", pool), selecting("c", map[string]string{"pool": "c"})
	sc := newHeldScene(t, &a, &other,
		heldNode("fine", "u1", map[string]string{"pool": "c"}), heldNode("replaced", "u-new", nil), heldNode("named", "u1", nil))
	all := []string{BuiltinKey, HeldKey, "a", "c"}
	cases := []struct {
		name  string
		drain *v1alpha1.NodeDrain
		want  []string
	}{
		{name: "its queue", drain: runningDrain("fine", "", "u1", v1alpha1.PhaseEvicting, true), want: []string{"c"}},
		{name: "node missing", drain: runningDrain("gone", "", "u1", v1alpha1.PhaseEvicting, true), want: all},
		{name: "node missing, policy named", drain: runningDrain("gone", "c", "u1", v1alpha1.PhaseEvicting, true), want: []string{"c", HeldKey}},
		{name: "node replaced", drain: runningDrain("replaced", "", "u-old", v1alpha1.PhaseEvicting, true), want: []string{BuiltinKey, HeldKey}},
		{name: "named policy missing", drain: runningDrain("named", "strict", "u1", v1alpha1.PhasePending, false), want: []string{"strict", HeldKey}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := names(sc.r.queueOfDrain(context.Background(), tc.drain)); !slices.Equal(got, sorted(tc.want)) {
				t.Errorf("queueOfDrain() = %v, want %v", got, sorted(tc.want))
			}
		})
	}

	t.Run("ambiguous", func(t *testing.T) {
		sc := newHeldScene(t, &a, &b, heldNode("pooled", "u1", pool))
		got := names(sc.r.queueOfDrain(context.Background(), runningDrain("pooled", "", "u1", v1alpha1.PhaseEvicting, true)))
		if want := sorted([]string{BuiltinKey, HeldKey, "a", "b"}); !slices.Equal(got, want) {
			t.Errorf("admitted: queueOfDrain() = %v, want %v", got, want)
		}
		// Not admitted, it holds no slot: a PDB event of its pods brings no
		// queue's pass (the event of its admission given up maps the old
		// copy too, which was admitted).
		got = names(sc.r.queueOfDrain(context.Background(), runningDrain("pooled", "", "u1", v1alpha1.PhasePending, false)))
		if want := []string{HeldKey}; !slices.Equal(got, want) {
			t.Errorf("waiting: queueOfDrain() = %v, want %v", got, want)
		}
	})
}

func names(reqs []reconcile.Request) []string {
	out := make([]string, 0, len(reqs))
	for _, r := range reqs {
		out = append(out, r.Name)
	}
	return sorted(out)
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// TestReplacedDrainQueuesAgain: a drain admitted for a node since replaced
// keeps its slot in its queue until the pass of HeldKey gives it up; then
// it is in no queue until the NodeDrain controller records the new node's
// UID, a change that brings its queue's pass, which takes it as a waiting
// drain like a new one.
func TestReplacedDrainQueuesAgain(t *testing.T) {
	sc := newHeldScene(t, heldNode("n1", "u-new", nil))
	ctx := context.Background()
	admitted := runningDrain("n1", "", "u-old", v1alpha1.PhasePending, true)
	if m, err := sc.r.member(ctx, admitted, BuiltinKey, nil); err != nil || m == nil || !m.admitted {
		t.Errorf("admitted, node replaced: member %+v (%v), want it counted admitted", m, err)
	}
	held := runningDrain("n1", "", "u-old", v1alpha1.PhasePending, false)
	if m, err := sc.r.member(ctx, held, BuiltinKey, nil); err != nil || m != nil {
		t.Errorf("held, node replaced: member %+v (%v), want none", m, err)
	}
	recorded := held.DeepCopy()
	recorded.Status.NodeUID = "u-new"
	if !queueMayChange(event.UpdateEvent{ObjectOld: held, ObjectNew: recorded}) {
		t.Error("recording the new node's UID brings no pass")
	}
	if got := names(sc.r.queueOfDrain(ctx, recorded)); !slices.Equal(got, []string{BuiltinKey}) {
		t.Errorf("queueOfDrain() = %v once the new UID is recorded, want its queue", got)
	}
	if m, err := sc.r.member(ctx, recorded, BuiltinKey, nil); err != nil || m == nil || m.admitted {
		t.Errorf("new UID recorded: member %+v (%v), want it waiting in its queue", m, err)
	}
}
