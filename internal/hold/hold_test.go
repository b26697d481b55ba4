package hold

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/hook"
	"github.com/vacate-dev/vacate/internal/providers"
)

// TestHoldsOf: the model the pass and the guard both hold pods with, one
// rule per case, from plain data (no cluster): which pod is held, and the
// reason and holder of its blocker.
func TestHoldsOf(t *testing.T) {
	w := newHoldWorld()
	cases := append(evacuationHoldCases(w), providerHoldCases(w)...)
	cases = append(cases, hookHoldCases(w)...)
	for _, tc := range append(cases, undoingHoldCases(w)...) {
		t.Run(tc.name, func(t *testing.T) { w.check(t, tc) })
	}
}

// heldBy is how a pod is held: its blocker's reason (none: not held), its
// holder, and words of its detail.
type heldBy struct {
	reason, holder, detail string // "" reason: not held
}

// holdCase is what the drain's holders are (its Evacuations, the
// providers, the pods' hooks; the drain as edited) and how db-0 and web-0
// are held.
type holdCase struct {
	name      string
	drain     func(*v1alpha1.NodeDrain)
	evs       []*v1alpha1.Evacuation
	providers []*v1alpha1.EvacuationProvider
	hooks     map[types.UID]HookState
	db, web   heldBy
	// dbAlso are db-0's holders after its blocker's.
	dbAlso []string
}

// evName is the name of the drain's Evacuation of provider vol.
var evName = v1alpha1.EvacuationName("n1", "vol")

// holdWorld is the plain data TestHoldsOf holds pods in: node n1 with db-0
// (which provider vol selects) and web-0, drained for cli:alice.
type holdWorld struct {
	now     time.Time
	deleted metav1.Time
	db, web *corev1.Pod
	node    *corev1.Node
}

func newHoldWorld() *holdWorld {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	return &holdWorld{now: now, deleted: metav1.NewTime(now.Add(-time.Minute)),
		db:   testutil.Pod("db-0").OnNode("n1").Labels("app", "db").Obj(),
		web:  testutil.Pod("web-0").OnNode("n1").Labels("app", "web").Obj(),
		node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-1"}}}
}

// drain is n1's NodeDrain, requested by cli:alice.
func (w *holdWorld) drain() *v1alpha1.NodeDrain {
	nd := testutil.NodeDrain("n1", "", "cli:alice")
	nd.UID = "drain-1"
	return nd
}

// provider is an EvacuationProvider selecting app=db, as edit leaves it.
func (w *holdWorld) provider(name string, edit ...func(*v1alpha1.EvacuationProvider)) *v1alpha1.EvacuationProvider {
	p := &v1alpha1.EvacuationProvider{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.EvacuationProviderSpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}}
	for _, e := range edit {
		e(p)
	}
	return p
}

// evacuation is the drain's Evacuation of provider "vol", recording db-0,
// asked a minute ago and InProgress for its current generation, as edit
// leaves it.
func (w *holdWorld) evacuation(edit ...func(*v1alpha1.Evacuation)) *v1alpha1.Evacuation {
	db := w.db
	ev := &v1alpha1.Evacuation{
		ObjectMeta: metav1.ObjectMeta{Name: evName, Generation: 1, CreationTimestamp: metav1.NewTime(w.now.Add(-time.Minute))},
		Spec: v1alpha1.EvacuationSpec{NodeName: "n1", NodeUID: "node-1", DrainUID: "drain-1", Provider: "vol", Mode: v1alpha1.ModeMaintenance,
			Desired: v1alpha1.DesiredEvacuate, Stage: v1alpha1.StageBeforeEviction,
			ProtectedPods: []v1alpha1.ProtectedPod{{Namespace: db.Namespace, Name: db.Name, UID: string(db.UID)}}},
		Status: v1alpha1.EvacuationStatus{Phase: v1alpha1.EvacuationInProgress, ObservedGeneration: 1, HeartbeatTime: &metav1.Time{Time: w.now}},
	}
	for _, e := range edit {
		e(ev)
	}
	return ev
}

func completed(ev *v1alpha1.Evacuation) { ev.Status.Phase = v1alpha1.EvacuationCompleted }

// check computes the holds of the case and checks how db-0 and web-0 are
// held: their holders, and their blockers' reason, holder and detail; and
// that Held and Any agree with them.
func (w *holdWorld) check(t *testing.T, tc holdCase) {
	t.Helper()
	db, web := w.db, w.web
	nd := w.drain()
	if tc.drain != nil {
		tc.drain(nd)
	}
	evs := map[string]*v1alpha1.Evacuation{}
	for _, ev := range tc.evs {
		evs[ev.Spec.Provider] = ev
	}
	h, err := Compute(Input{Drain: nd, Node: w.node, OnNode: map[types.UID]*corev1.Pod{db.UID: db, web.UID: web},
		Leaving: []*corev1.Pod{db, web}, Evacuations: evs, Providers: tc.providers, Selects: selectsNoNamespace, Hooks: tc.hooks, Now: w.now})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		pod  *corev1.Pod
		want heldBy
		also []string
	}{{db, tc.db, tc.dbAlso}, {web, tc.web, nil}} {
		b, held := h.Of(c.pod)
		if want := append([]string{c.want.holder}, c.also...); held && !slices.Equal(h.Holders(c.pod.UID), want) || !held && h.Holders(c.pod.UID) != nil {
			t.Errorf("%s: holders %q, want %q", c.pod.Name, h.Holders(c.pod.UID), want)
		}
		switch {
		case held != (c.want.reason != ""):
			t.Errorf("%s: held = %t (%+v), want %t", c.pod.Name, held, b, !held)
		case held && (b.Reason != c.want.reason || b.Holder != c.want.holder || !strings.Contains(b.Detail, c.want.detail) ||
			b.Pod != c.pod.Namespace+"/"+c.pod.Name):
			t.Errorf("%s: blocker %+v, want reason %s, holder %q, detail with %q", c.pod.Name, b, c.want.reason, c.want.holder, c.want.detail)
		}
	}
	if got := len(h.Held()); got != btoi(tc.db.reason != "")+btoi(tc.web.reason != "") || h.Any() != (got > 0) {
		t.Errorf("Held() = %d pod(s), Any() = %t; want them to agree with Of", got, h.Any())
	}
}

// evacuationHoldCases: an Evacuation holds the pods it records before
// eviction until Completed for its generation or released.
func evacuationHoldCases(w *holdWorld) []holdCase {
	provider, evacuation, deleted, now := w.provider, w.evacuation, w.deleted, w.now
	return []holdCase{
		{name: "nothing asks: nothing holds"},
		{name: "BeforeEviction not Completed holds its pods", evs: []*v1alpha1.Evacuation{evacuation()}, providers: []*v1alpha1.EvacuationProvider{provider("vol")},
			db: heldBy{v1alpha1.BlockerEvacuation, "Evacuation " + evName, "InProgress"}},
		{name: "Completed for the current generation frees them", evs: []*v1alpha1.Evacuation{evacuation(completed)}, providers: []*v1alpha1.EvacuationProvider{provider("vol")}},
		{name: "Completed for an older generation holds", evs: []*v1alpha1.Evacuation{evacuation(completed, func(ev *v1alpha1.Evacuation) { ev.Generation = 2 })},
			providers: []*v1alpha1.EvacuationProvider{provider("vol")},
			db:        heldBy{v1alpha1.BlockerEvacuation, "Evacuation " + evName, "waiting for provider vol to take up the request"}},
		{name: "released frees them", evs: []*v1alpha1.Evacuation{evacuation(func(ev *v1alpha1.Evacuation) {
			ev.Spec.Release = &v1alpha1.EvacuationRelease{By: "alice", Time: metav1.NewTime(now)}
		})}, providers: []*v1alpha1.EvacuationProvider{provider("vol")}},
		{name: "released and being deleted frees them", evs: []*v1alpha1.Evacuation{evacuation(func(ev *v1alpha1.Evacuation) {
			ev.Spec.Release, ev.DeletionTimestamp = &v1alpha1.EvacuationRelease{By: "alice", Time: metav1.NewTime(now)}, &deleted
		})}},
		{name: "being deleted holds, even Completed", evs: []*v1alpha1.Evacuation{evacuation(completed, func(ev *v1alpha1.Evacuation) { ev.DeletionTimestamp = &deleted })},
			db: heldBy{v1alpha1.BlockerEvacuation, "Evacuation " + evName, "is being deleted: vacate asks provider vol to cancel it"}},
		{name: "its provider deleted: holds, with the way out", evs: []*v1alpha1.Evacuation{evacuation()},
			db: heldBy{v1alpha1.BlockerEvacuation, "Evacuation " + evName, "provider vol deleted while evacuating 1 pod(s) on node n1"}},
		{name: "AfterEviction does not hold", evs: []*v1alpha1.Evacuation{evacuation(func(ev *v1alpha1.Evacuation) { ev.Spec.Stage = v1alpha1.StageAfterEviction })},
			providers: []*v1alpha1.EvacuationProvider{provider("vol", func(p *v1alpha1.EvacuationProvider) { p.Spec.Stage = v1alpha1.StageAfterEviction })}},
		{name: "another drain's Evacuation is ignored", evs: []*v1alpha1.Evacuation{evacuation(func(ev *v1alpha1.Evacuation) { ev.Spec.DrainUID = "drain-0" })}},
		{name: "another node's Evacuation is ignored", evs: []*v1alpha1.Evacuation{evacuation(func(ev *v1alpha1.Evacuation) { ev.Spec.NodeUID = "node-0" })}},
		{name: "another drain's Evacuation: its provider not asked yet holds", evs: []*v1alpha1.Evacuation{evacuation(completed, func(ev *v1alpha1.Evacuation) { ev.Spec.DrainUID = "drain-0" })},
			providers: []*v1alpha1.EvacuationProvider{provider("vol")},
			db:        heldBy{v1alpha1.BlockerEvacuation, "EvacuationProvider vol", "has not been asked for it yet"}},
	}
}

// providerHoldCases: a provider that selects a pod and takes part in the
// drain holds it until asked.
func providerHoldCases(w *holdWorld) []holdCase {
	provider, evacuation, deleted := w.provider, w.evacuation, w.deleted
	return []holdCase{
		{name: "a provider selects the pod, no Evacuation yet: not asked yet", providers: []*v1alpha1.EvacuationProvider{provider("vol")},
			db: heldBy{v1alpha1.BlockerEvacuation, "EvacuationProvider vol", "has not been asked for it yet"}},
		{name: "an Evacuation that does not record the pod: not asked yet",
			evs:       []*v1alpha1.Evacuation{evacuation(completed, func(ev *v1alpha1.Evacuation) { ev.Spec.ProtectedPods = nil })},
			providers: []*v1alpha1.EvacuationProvider{provider("vol")},
			db:        heldBy{v1alpha1.BlockerEvacuation, "EvacuationProvider vol", "has not been asked for it yet"}},
		{name: "a provider being deleted is asked nothing, holds nothing new",
			providers: []*v1alpha1.EvacuationProvider{provider("vol", func(p *v1alpha1.EvacuationProvider) { p.DeletionTimestamp = &deleted })}},
		{name: "a provider taking no part in the mode holds nothing",
			providers: []*v1alpha1.EvacuationProvider{provider("vol", func(p *v1alpha1.EvacuationProvider) { p.Spec.Modes = []v1alpha1.DrainMode{v1alpha1.ModeDecommission} })}},
		{name: "a provider taking part in the mode holds",
			drain:     func(nd *v1alpha1.NodeDrain) { nd.Spec.Mode = v1alpha1.ModeDecommission },
			providers: []*v1alpha1.EvacuationProvider{provider("vol", func(p *v1alpha1.EvacuationProvider) { p.Spec.Modes = []v1alpha1.DrainMode{v1alpha1.ModeDecommission} })},
			db:        heldBy{v1alpha1.BlockerEvacuation, "EvacuationProvider vol", "has not been asked for it yet"}},
		{name: "an AfterEviction provider holds nothing",
			providers: []*v1alpha1.EvacuationProvider{provider("vol", func(p *v1alpha1.EvacuationProvider) { p.Spec.Stage = v1alpha1.StageAfterEviction })}},
	}
}

// hookHoldCases: a pod's HTTP hook holds it until Completed.
func hookHoldCases(w *holdWorld) []holdCase {
	provider, evacuation, db, web := w.provider, w.evacuation, w.db, w.web
	refused := &hook.RefusedError{Pod: "default/db-0", IP: "169.254.169.254", Why: "link-local"}
	return []holdCase{
		{name: "a hook not Completed holds", hooks: map[types.UID]HookState{web.UID: {Detail: "HTTP hook http://10.0.0.2:8080: InProgress"}},
			web: heldBy{v1alpha1.BlockerHTTPHook, "HTTP hook of pod default/web-0", "InProgress"}},
		{name: "a hook Completed frees", hooks: map[types.UID]HookState{web.UID: {Done: true, Detail: "HTTP hook http://10.0.0.2:8080: Completed"}}},
		{name: "a hook whose annotations are unusable holds", hooks: map[types.UID]HookState{web.UID: {Err: errors.New("bad port"), Detail: "bad port; the pod stays until it is fixed"}},
			web: heldBy{v1alpha1.BlockerHTTPHook, "HTTP hook of pod default/web-0", "bad port"}},
		{name: "a hook at a refused address holds", hooks: map[types.UID]HookState{db.UID: {Err: refused, Detail: HookErrorDetail(refused)}},
			db: heldBy{v1alpha1.BlockerHTTPHookRefused, "HTTP hook of pod default/db-0", "link-local"}},
		{name: "an Evacuation and a hook: the Evacuation is shown first", evs: []*v1alpha1.Evacuation{evacuation()}, providers: []*v1alpha1.EvacuationProvider{provider("vol")},
			hooks: map[types.UID]HookState{db.UID: {Detail: "HTTP hook http://10.0.0.1:8080: InProgress"}},
			db:    heldBy{v1alpha1.BlockerEvacuation, "Evacuation " + evName, "InProgress"}, dbAlso: []string{"HTTP hook of pod default/db-0"}},
	}
}

// undoingHoldCases: a drain being undone holds every pod.
func undoingHoldCases(w *holdWorld) []holdCase {
	evacuation, deleted := w.evacuation, w.deleted
	return []holdCase{
		{name: "a drain being undone holds every pod", drain: func(nd *v1alpha1.NodeDrain) { nd.Spec.Requesters = nil },
			evs: []*v1alpha1.Evacuation{evacuation(completed)},
			db:  heldBy{BlockerUndoing, "NodeDrain n1", "being undone"}, web: heldBy{BlockerUndoing, "NodeDrain n1", "being undone"}},
		{name: "a drain being deleted holds every pod", drain: func(nd *v1alpha1.NodeDrain) { nd.DeletionTimestamp = &deleted },
			db: heldBy{BlockerUndoing, "NodeDrain n1", "being undone"}, web: heldBy{BlockerUndoing, "NodeDrain n1", "being undone"}},
	}
}

// TestHoldsCountsAndSince: the evacuations before eviction and how many are
// done, an Evacuation's blocker dated from its creation, a recorded pod no
// longer on the node held by nothing, and a failed read of a namespace an
// error, not a pod let go.
func TestHoldsCountsAndSince(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	asked := metav1.NewTime(now.Add(-time.Hour))
	db := testutil.Pod("db-0").OnNode("n1").Labels("app", "db").Obj()
	gone := testutil.Pod("db-1").OnNode("n1").Labels("app", "db").Obj()
	nd := testutil.NodeDrain("n1", "", "cli:alice")
	nd.UID = "drain-1"
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-1"}}
	ev := func(provider string, stage v1alpha1.EvacuationStage, phase v1alpha1.EvacuationPhase) *v1alpha1.Evacuation {
		return &v1alpha1.Evacuation{ObjectMeta: metav1.ObjectMeta{Name: "n1." + provider, Generation: 1, CreationTimestamp: asked},
			Spec: v1alpha1.EvacuationSpec{NodeName: "n1", NodeUID: "node-1", DrainUID: "drain-1", Provider: provider, Stage: stage,
				ProtectedPods: []v1alpha1.ProtectedPod{{Namespace: "default", Name: "db-0", UID: string(db.UID)}, {Namespace: "default", Name: "db-1", UID: string(gone.UID)}}},
			Status: v1alpha1.EvacuationStatus{Phase: phase, ObservedGeneration: 1, HeartbeatTime: &metav1.Time{Time: now}}}
	}
	evs := map[string]*v1alpha1.Evacuation{
		"a": ev("a", v1alpha1.StageBeforeEviction, v1alpha1.EvacuationInProgress),
		"b": ev("b", v1alpha1.StageBeforeEviction, v1alpha1.EvacuationCompleted),
		"c": ev("c", v1alpha1.StageAfterEviction, v1alpha1.EvacuationPending),
	}
	hooks := map[types.UID]HookState{db.UID: {Done: true}}
	h, err := Compute(Input{Drain: nd, Node: node, OnNode: map[types.UID]*corev1.Pod{db.UID: db}, Leaving: []*corev1.Pod{db},
		Evacuations: evs, Hooks: hooks, Selects: selectsNoNamespace, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if done, total := h.BeforeEviction(); done != 2 || total != 3 {
		t.Errorf("BeforeEviction() = %d of %d, want 2 of 3 (b and the hook of 3: a, b, the hook)", done, total)
	}
	if len(h.Evacuations()) != 3 || h.Evacuations()[0].Evacuation.Name != "n1.a" || len(h.Evacuations()[0].Protects) != 1 {
		t.Errorf("evacuations = %+v, want a, b, c in order, a protecting db-0 alone", h.Evacuations())
	}
	if b, held := h.Of(db); !held || b.Holder != "Evacuation n1.a" || !b.Since.Equal(&asked) {
		t.Errorf("db-0: %+v, %t; want held by Evacuation n1.a since its creation", b, held)
	}
	if b, held := h.Of(gone); held {
		t.Errorf("db-1, no longer on the node: held by %+v", b)
	}

	p := &v1alpha1.EvacuationProvider{ObjectMeta: metav1.ObjectMeta{Name: "vol"},
		Spec: v1alpha1.EvacuationProviderSpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"storage": "yes"}}}}
	broken := func(p *v1alpha1.EvacuationProvider, pod *corev1.Pod) (bool, error) {
		return providers.Selects(p, pod, func(string) (labels.Set, error) { return nil, errors.New("cache down") })
	}
	if _, err := Compute(Input{Drain: nd, Node: node, OnNode: map[types.UID]*corev1.Pod{db.UID: db}, Leaving: []*corev1.Pod{db},
		Providers: []*v1alpha1.EvacuationProvider{p}, Selects: broken, Now: now}); err == nil {
		t.Error("a namespace that cannot be read: no error")
	}
}

// selectsNoNamespace is providers.Selects with namespaces that have no labels.
func selectsNoNamespace(p *v1alpha1.EvacuationProvider, pod *corev1.Pod) (bool, error) {
	return providers.Selects(p, pod, func(string) (labels.Set, error) { return nil, nil })
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
