package cordon

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// The node and drain every test starts from: drain n1 (UID drain-uid) of
// node n1 (UID node-uid).
const (
	nodeName  = "n1"
	nodeUID   = "node-uid"
	drainUID  = "drain-uid"
	ownRecord = nodeName + "/" + drainUID
)

func drainOf(node string) *v1alpha1.NodeDrain {
	nd := testutil.NodeDrain(node, "", "cli:test")
	nd.UID = drainUID
	return nd
}

func node(mutate ...func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: nodeUID}}
	for _, m := range mutate {
		m(n)
	}
	return n
}

func unschedulable(n *corev1.Node) { n.Spec.Unschedulable = true }

func annotated(k, v string) func(*corev1.Node) {
	return func(n *corev1.Node) {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[k] = v
	}
}

func cordonedBy(v string) func(*corev1.Node) { return annotated(v1alpha1.AnnotationCordonedBy, v) }

func tainted(key, value string, effect corev1.TaintEffect) func(*corev1.Node) {
	return func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Value: value, Effect: effect})
	}
}

// sentPatch is a patch the code sent, as the server received it.
type sentPatch struct {
	typ  types.PatchType
	body map[string]any
}

// env is a fake API server holding one node; it records the patches sent
// and, when conflict is set, refuses them as a stale write would be.
type env struct {
	t        *testing.T
	c        client.Client
	patches  []sentPatch
	conflict bool
}

func newEnv(t *testing.T, n *corev1.Node) *env {
	t.Helper()
	scheme := testutil.Scheme(t)
	e := &env{t: t}
	base := fake.NewClientBuilder().WithScheme(scheme).WithObjects(n).Build()
	e.c = interceptor.NewClient(base, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			data, err := patch.Data(obj)
			if err != nil {
				return err
			}
			var body map[string]any
			if err := json.Unmarshal(data, &body); err != nil {
				t.Fatalf("patch body %s: %v", data, err)
			}
			e.patches = append(e.patches, sentPatch{typ: patch.Type(), body: body})
			if e.conflict {
				return apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, obj.GetName(), errors.New("the object has been modified"))
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	return e
}

// current reads the node as the server has it.
func (e *env) current() *corev1.Node {
	e.t.Helper()
	n := &corev1.Node{}
	if err := e.c.Get(context.Background(), client.ObjectKey{Name: nodeName}, n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// field walks a patch body.
func field(body map[string]any, path ...string) (any, bool) {
	var v any = body
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[p]; !ok {
			return nil, false
		}
	}
	return v, true
}

// lockedOn checks that the patch is a merge patch carrying the
// resourceVersion the caller read: the server refuses it if the node
// changed since (an optimistic lock).
func lockedOn(t *testing.T, p sentPatch, rv string) {
	t.Helper()
	if p.typ != types.MergePatchType {
		t.Errorf("patch type %s, want a merge patch", p.typ)
	}
	if got, _ := field(p.body, "metadata", "resourceVersion"); got != rv {
		t.Errorf("patch carries resourceVersion %v, want %q (the optimistic lock): %v", got, rv, p.body)
	}
}

// TestCordonMarksTheNodeUnschedulableAndRecordsTheDrain: Cordon sends one
// merge patch, locked on the resourceVersion it was given, that sets
// spec.unschedulable and vacate.dev/cordoned-by to "<drain>/<uid>", and
// keeps the node's other annotations. The node is updated in place and
// the drain now counts the cordon as its own (NodeDrain.Cordoned), which
// is what lets its undo give the node back.
func TestCordonMarksTheNodeUnschedulableAndRecordsTheDrain(t *testing.T) {
	e := newEnv(t, node(annotated("team", "infra")))
	n, nd := e.current(), drainOf(nodeName)
	rv := n.ResourceVersion

	changed, err := Cordon(context.Background(), e.c, n, nd)
	if err != nil || !changed {
		t.Fatalf("Cordon = %v, %v; want true, nil", changed, err)
	}
	if len(e.patches) != 1 {
		t.Fatalf("sent %d patches, want 1", len(e.patches))
	}
	p := e.patches[0]
	lockedOn(t, p, rv)
	if got, _ := field(p.body, "spec", "unschedulable"); got != true {
		t.Errorf("patch sets spec.unschedulable to %v, want true: %v", got, p.body)
	}
	if got, _ := field(p.body, "metadata", "annotations", v1alpha1.AnnotationCordonedBy); got != ownRecord {
		t.Errorf("patch records %v, want %q: %v", got, ownRecord, p.body)
	}
	stored := e.current()
	if !stored.Spec.Unschedulable || stored.Annotations[v1alpha1.AnnotationCordonedBy] != ownRecord || stored.Annotations["team"] != "infra" {
		t.Errorf("stored node: unschedulable %v, annotations %v; want unschedulable, cordoned-by %q, team kept", stored.Spec.Unschedulable, stored.Annotations, ownRecord)
	}
	if !n.Spec.Unschedulable || n.Annotations[v1alpha1.AnnotationCordonedBy] != ownRecord {
		t.Errorf("the caller's node was not updated in place: %+v %v", n.Spec, n.Annotations)
	}
	if !nd.Cordoned(stored) {
		t.Errorf("the drain does not count the cordon as its own: %s", nd.NotItsCordon(stored))
	}
}

// TestCordonLeavesANodeAlreadyUnschedulableAlone: a node someone else
// cordoned (by hand, or another drain) is neither patched nor given
// vacate's record, so vacate never takes credit for a cordon it did not
// make and never uncordons it later.
func TestCordonLeavesANodeAlreadyUnschedulableAlone(t *testing.T) {
	for name, n := range map[string]*corev1.Node{
		"cordoned by a person":        node(unschedulable),
		"cordoned by another drain":   node(unschedulable, cordonedBy("n1/other-uid")),
		"cordoned by an older vacate": node(unschedulable, cordonedBy("n1")),
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, n)
			before := e.current()
			got := before.DeepCopy()
			changed, err := Cordon(context.Background(), e.c, got, drainOf(nodeName))
			if err != nil || changed {
				t.Fatalf("Cordon = %v, %v; want false, nil", changed, err)
			}
			if len(e.patches) != 0 {
				t.Errorf("sent %d patches to a node already unschedulable, want none", len(e.patches))
			}
			if !maps.Equal(e.current().Annotations, before.Annotations) || !maps.Equal(got.Annotations, before.Annotations) {
				t.Errorf("annotations changed from %v to %v (caller's copy %v)", before.Annotations, e.current().Annotations, got.Annotations)
			}
		})
	}
}

// TestNodeWritesReturnAConflictOnAStaleNode: Cordon, Uncordon,
// KeepDaemonSetsOff and LetDaemonSetsBack write under an optimistic lock,
// so a write on a node that changed since the caller read it fails, and
// the error is a conflict (apierrors.IsConflict) through the wrapping,
// which is what the NodeDrain and admission controllers test to read again
// and retry. They report no change, and the stored node is left as it
// was. Both a real stale copy (the fake server checks the resourceVersion
// a merge patch carries) and a conflict injected by the interceptor are
// covered.
func TestNodeWritesReturnAConflictOnAStaleNode(t *testing.T) {
	type write func(context.Context, client.Client, *corev1.Node, *v1alpha1.NodeDrain) (bool, error)
	for _, tc := range []struct {
		name  string
		start *corev1.Node
		write write
		// stale reads the node, then changes it on the server, so the
		// caller's copy is old; else the interceptor refuses the patch.
		stale bool
	}{
		{"Cordon, stale copy", node(), Cordon, true},
		{"Cordon, injected conflict", node(), Cordon, false},
		{"Uncordon, stale copy", node(unschedulable, cordonedBy(ownRecord)), Uncordon, true},
		{"Uncordon, injected conflict", node(unschedulable, cordonedBy(ownRecord)), Uncordon, false},
		{"KeepDaemonSetsOff, stale copy", node(), KeepDaemonSetsOff, true},
		{"LetDaemonSetsBack, injected conflict", node(tainted(v1alpha1.TaintDaemonSetsOff, drainUID, corev1.TaintEffectNoSchedule)), LetDaemonSetsBack, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.start)
			n := e.current()
			if tc.stale {
				other := e.current()
				other.Labels = map[string]string{"kubelet": "heartbeat"}
				if err := e.c.Update(context.Background(), other); err != nil {
					t.Fatal(err)
				}
			} else {
				e.conflict = true
			}
			before, given := e.current(), n.DeepCopy()
			changed, err := tc.write(context.Background(), e.c, n, drainOf(nodeName))
			if !apierrors.IsConflict(err) {
				t.Fatalf("error %v, want a conflict", err)
			}
			if changed {
				t.Error("reported the node changed though the write failed")
			}
			after := e.current()
			if after.Spec.Unschedulable != before.Spec.Unschedulable || !maps.Equal(after.Annotations, before.Annotations) || !slices.Equal(after.Spec.Taints, before.Spec.Taints) {
				t.Errorf("the stored node changed though the write failed: %+v %v -> %+v %v", before.Spec, before.Annotations, after.Spec, after.Annotations)
			}
			// The caller's copy too: a node changed in memory by a write
			// that failed would read as cordoned (or not) when it is not.
			if !equality.Semantic.DeepEqual(n, given) {
				t.Errorf("the caller's node changed though the write failed: %+v %v -> %+v %v", given.Spec, given.Annotations, n.Spec, n.Annotations)
			}
		})
	}
}

// TestUncordonGivesBackOnlyThisDrainsOwnCordon: Uncordon patches the node
// only when vacate.dev/cordoned-by is exactly this drain's "<name>/<uid>",
// on the drain's node, and the drain recorded no other node UID; it then
// clears spec.unschedulable and the record (null in the merge patch),
// keeps other annotations, and locks on the resourceVersion. A cordon by
// someone else, by another drain, by an earlier drain of the same name, by
// a vacate that wrote no UID, or on a node recreated under the same name,
// is left as it is and no patch is sent.
func TestUncordonGivesBackOnlyThisDrainsOwnCordon(t *testing.T) {
	for _, tc := range []struct {
		name   string
		node   *corev1.Node
		drain  func(*v1alpha1.NodeDrain)
		giveUp bool // the node is given back
	}{
		{name: "this drain's record", node: node(unschedulable, cordonedBy(ownRecord), annotated("team", "infra")), giveUp: true},
		{name: "this drain's record, node UID recorded and matching", node: node(unschedulable, cordonedBy(ownRecord)),
			drain: func(nd *v1alpha1.NodeDrain) { nd.Status.NodeUID = nodeUID }, giveUp: true},
		{name: "cordoned by a person", node: node(unschedulable)},
		{name: "another drain's record", node: node(unschedulable, cordonedBy("n2/"+drainUID))},
		{name: "an earlier drain of the same name", node: node(unschedulable, cordonedBy("n1/earlier-uid"))},
		{name: "a record without UID", node: node(unschedulable, cordonedBy("n1"))},
		{name: "the drain worked on an earlier node of this name", node: node(unschedulable, cordonedBy(ownRecord)),
			drain: func(nd *v1alpha1.NodeDrain) { nd.Status.NodeUID = "earlier-node-uid" }},
		{name: "the drain is of another node", node: node(unschedulable, cordonedBy(ownRecord)),
			drain: func(nd *v1alpha1.NodeDrain) { nd.Spec.NodeName = "n2" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.node)
			nd := drainOf(nodeName)
			if tc.drain != nil {
				tc.drain(nd)
			}
			n := e.current()
			rv := n.ResourceVersion
			changed, err := Uncordon(context.Background(), e.c, n, nd)
			if err != nil {
				t.Fatal(err)
			}
			if changed != tc.giveUp {
				t.Fatalf("Uncordon reported changed=%v, want %v", changed, tc.giveUp)
			}
			after := e.current()
			if !tc.giveUp {
				if len(e.patches) != 0 || !after.Spec.Unschedulable || after.Annotations[v1alpha1.AnnotationCordonedBy] != tc.node.Annotations[v1alpha1.AnnotationCordonedBy] {
					t.Errorf("a cordon that is not this drain's was touched: %d patches, node %+v %v", len(e.patches), after.Spec, after.Annotations)
				}
				return
			}
			if len(e.patches) != 1 {
				t.Fatalf("sent %d patches, want 1", len(e.patches))
			}
			p := e.patches[0]
			lockedOn(t, p, rv)
			// The record is removed by a null, for it or for all the
			// annotations when it was the only one.
			annotations, ok := field(p.body, "metadata", "annotations")
			if record, has := field(p.body, "metadata", "annotations", v1alpha1.AnnotationCordonedBy); !ok || (annotations != nil && (!has || record != nil)) {
				t.Errorf("patch does not remove the record (want null): %v", p.body)
			}
			if after.Spec.Unschedulable {
				t.Error("the node is still unschedulable")
			}
			if _, ok := after.Annotations[v1alpha1.AnnotationCordonedBy]; ok {
				t.Errorf("the record is still on the node: %v", after.Annotations)
			}
			for k, v := range tc.node.Annotations {
				if k != v1alpha1.AnnotationCordonedBy && after.Annotations[k] != v {
					t.Errorf("annotation %s=%s was lost: %v", k, v, after.Annotations)
				}
			}
		})
	}
}

// TestKeepsDaemonSetsOffRecognisesOnlyThisDrainsTaint: the node keeps
// DaemonSet pods off for this drain only while it carries
// vacate.dev/draining with this drain's UID as value and effect
// NoSchedule, on the node the drain recorded (when it recorded one).
func TestKeepsDaemonSetsOffRecognisesOnlyThisDrainsTaint(t *testing.T) {
	for _, tc := range []struct {
		name     string
		node     *corev1.Node
		nodeUID  string // the drain's status.nodeUID
		keepsOff bool
	}{
		{"this drain's taint", node(tainted(v1alpha1.TaintDaemonSetsOff, drainUID, corev1.TaintEffectNoSchedule)), "", true},
		{"this drain's taint, on the node it recorded", node(tainted(v1alpha1.TaintDaemonSetsOff, drainUID, corev1.TaintEffectNoSchedule)), nodeUID, true},
		{"this drain's taint among others", node(tainted("vacate.dev/notice", "aws-spot", corev1.TaintEffectNoSchedule), tainted(v1alpha1.TaintDaemonSetsOff, drainUID, corev1.TaintEffectNoSchedule)), "", true},
		{"no taint", node(), "", false},
		{"another drain's taint", node(tainted(v1alpha1.TaintDaemonSetsOff, "other-uid", corev1.TaintEffectNoSchedule)), "", false},
		{"this drain's UID with another effect", node(tainted(v1alpha1.TaintDaemonSetsOff, drainUID, corev1.TaintEffectNoExecute)), "", false},
		{"another key with this drain's UID", node(tainted(v1alpha1.TaintDrain, drainUID, corev1.TaintEffectNoSchedule)), "", false},
		{"an earlier node of this name", node(tainted(v1alpha1.TaintDaemonSetsOff, drainUID, corev1.TaintEffectNoSchedule)), "earlier-node-uid", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nd := drainOf(nodeName)
			nd.Status.NodeUID = tc.nodeUID
			if got := KeepsDaemonSetsOff(tc.node, nd); got != tc.keepsOff {
				t.Errorf("KeepsDaemonSetsOff = %v, want %v", got, tc.keepsOff)
			}
		})
	}
}

// TestKeepDaemonSetsOffTaintsWithTheDrainsUID: KeepDaemonSetsOff adds
// vacate.dev/draining=<drain UID>:NoSchedule next to the node's other
// taints, under the optimistic lock, after which KeepsDaemonSetsOff holds.
// A node that carries the key already, whatever its value (another drain's),
// is not patched: the taint keeps DaemonSet pods off all the same.
func TestKeepDaemonSetsOffTaintsWithTheDrainsUID(t *testing.T) {
	other := corev1.Taint{Key: "vacate.dev/notice", Value: "aws-spot", Effect: corev1.TaintEffectNoSchedule}
	for _, tc := range []struct {
		name    string
		node    *corev1.Node
		changed bool
		want    []corev1.Taint
	}{
		{"untainted node", node(tainted(other.Key, other.Value, other.Effect)), true,
			[]corev1.Taint{other, {Key: v1alpha1.TaintDaemonSetsOff, Value: drainUID, Effect: corev1.TaintEffectNoSchedule}}},
		{"already this drain's taint", node(tainted(v1alpha1.TaintDaemonSetsOff, drainUID, corev1.TaintEffectNoSchedule)), false,
			[]corev1.Taint{{Key: v1alpha1.TaintDaemonSetsOff, Value: drainUID, Effect: corev1.TaintEffectNoSchedule}}},
		{"another drain's taint", node(tainted(v1alpha1.TaintDaemonSetsOff, "other-uid", corev1.TaintEffectNoSchedule)), false,
			[]corev1.Taint{{Key: v1alpha1.TaintDaemonSetsOff, Value: "other-uid", Effect: corev1.TaintEffectNoSchedule}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.node)
			n, nd := e.current(), drainOf(nodeName)
			rv := n.ResourceVersion
			changed, err := KeepDaemonSetsOff(context.Background(), e.c, n, nd)
			if err != nil || changed != tc.changed {
				t.Fatalf("KeepDaemonSetsOff = %v, %v; want %v, nil", changed, err, tc.changed)
			}
			if got := e.current().Spec.Taints; !slices.Equal(got, tc.want) {
				t.Errorf("taints %v, want %v", got, tc.want)
			}
			if !tc.changed {
				if len(e.patches) != 0 {
					t.Errorf("sent %d patches, want none", len(e.patches))
				}
				return
			}
			if len(e.patches) != 1 {
				t.Fatalf("sent %d patches, want 1", len(e.patches))
			}
			lockedOn(t, e.patches[0], rv)
			if !KeepsDaemonSetsOff(e.current(), nd) {
				t.Error("KeepsDaemonSetsOff is false after the taint was added")
			}
		})
	}
}

// TestLetDaemonSetsBackRemovesOnlyThisDrainsTaint: the taint comes off
// only when it is this drain's (KeepsDaemonSetsOff), and only it: the
// node's other taints stay, and the patch is locked. Another drain's taint
// (other UID) or a taint on a node the drain did not record stays, with no
// patch sent.
func TestLetDaemonSetsBackRemovesOnlyThisDrainsTaint(t *testing.T) {
	notice := corev1.Taint{Key: "vacate.dev/notice", Value: "aws-spot", Effect: corev1.TaintEffectNoSchedule}
	own := corev1.Taint{Key: v1alpha1.TaintDaemonSetsOff, Value: drainUID, Effect: corev1.TaintEffectNoSchedule}
	others := corev1.Taint{Key: v1alpha1.TaintDaemonSetsOff, Value: "other-uid", Effect: corev1.TaintEffectNoSchedule}
	with := func(ts ...corev1.Taint) *corev1.Node {
		return node(func(n *corev1.Node) { n.Spec.Taints = slices.Clone(ts) })
	}
	for _, tc := range []struct {
		name    string
		node    *corev1.Node
		nodeUID string
		changed bool
		want    []corev1.Taint
	}{
		{"this drain's taint", with(notice, own), "", true, []corev1.Taint{notice}},
		{"this drain's taint, alone", with(own), nodeUID, true, nil},
		{"this drain's taint next to another drain's", with(others, own, notice), "", true, []corev1.Taint{others, notice}},
		{"another drain's taint", with(notice, others), "", false, []corev1.Taint{notice, others}},
		{"this drain's UID on an earlier node of this name", with(own), "earlier-node-uid", false, []corev1.Taint{own}},
		{"no taint", with(notice), "", false, []corev1.Taint{notice}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.node)
			n, nd := e.current(), drainOf(nodeName)
			nd.Status.NodeUID = tc.nodeUID
			rv := n.ResourceVersion
			changed, err := LetDaemonSetsBack(context.Background(), e.c, n, nd)
			if err != nil || changed != tc.changed {
				t.Fatalf("LetDaemonSetsBack = %v, %v; want %v, nil", changed, err, tc.changed)
			}
			if got := e.current().Spec.Taints; !slices.Equal(got, tc.want) {
				t.Errorf("taints %v, want %v", got, tc.want)
			}
			switch {
			case tc.changed && len(e.patches) == 1:
				lockedOn(t, e.patches[0], rv)
			case tc.changed:
				t.Errorf("sent %d patches, want 1", len(e.patches))
			case len(e.patches) != 0:
				t.Errorf("sent %d patches, want none", len(e.patches))
			}
		})
	}
}
