package coordinator_test

import (
	"context"
	"crypto/rand"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	rv "github.com/vacate-dev/vacate/examples/replicated-volume"
	"github.com/vacate-dev/vacate/internal/controller/coordinator"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	er "github.com/vacate-dev/vacate/internal/evictionrequest"
	"github.com/vacate-dev/vacate/internal/requests"
	"github.com/vacate-dev/vacate/pkg/evacuation"
)

// gated holds a provider's Evacuate until the test opens the gate, so the
// test sees the pod stay while the provider works; Cancel is the
// provider's own.
type gated struct {
	evacuation.Provider
	mu   sync.Mutex
	open bool
	// asked counts Evacuate calls per node, moved those let through the
	// gate, cancelled the Cancel calls.
	asked, moved, cancelled map[string]int
}

func (g *gated) Cancel(ctx context.Context, node string) (evacuation.Progress, error) {
	g.mu.Lock()
	g.cancelled[node]++
	g.mu.Unlock()
	return g.Provider.Cancel(ctx, node)
}

// calls reads the counts for node.
func (g *gated) calls(node string) (asked, moved, cancelled int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.asked[node], g.moved[node], g.cancelled[node]
}

func (g *gated) Evacuate(ctx context.Context, node string, mode v1alpha1.DrainMode) (evacuation.Progress, error) {
	g.mu.Lock()
	g.asked[node]++
	open := g.open
	g.mu.Unlock()
	if !open {
		return evacuation.Progress{Remaining: 1, Message: "copying the volumes of " + node + " (held by the test)"}, nil
	}
	g.mu.Lock()
	g.moved[node]++
	g.mu.Unlock()
	return g.Provider.Evacuate(ctx, node, mode)
}

func (g *gated) set(open bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = open
}

// providerWorld is a world whose pods use a volume of examples/
// replicated-volume's store and declare vacate's responder (no hook): the
// store's BeforeEviction provider, which knows nothing of EvictionRequests,
// protects them (its selectors pick only this test's pods).
type providerWorld struct {
	*world
	cl       client.Client
	provider string
	store    *rv.Store
	gate     *gated
	volume   string
	spare    string
}

func newProviderWorld(t *testing.T, maxUnavailable string, responders ...corev1.EvictionResponder) *providerWorld {
	t.Helper()
	const volume = "data-0"
	if len(responders) == 0 {
		responders = []corev1.EvictionResponder{{Name: coordinator.Responder, Priority: ptr.To[int32](5000)}}
	}
	w := newWorkload(t, 2, maxUnavailable, func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.EvictionResponders = responders
		d.Spec.Template.Annotations = map[string]string{rv.AnnotationVolumes: volume}
	})
	pw := &providerWorld{world: w, cl: testenv.Controller(t, w.c), provider: "volumes-" + w.ns, store: &rv.Store{Root: t.TempDir()}, volume: volume}
	pw.spare = testenv.Nodes(t, w.c, devcluster.NodeSet{Prefix: "spare-" + w.ns[strings.LastIndex(w.ns, "-")+1:], Count: 1})[0]
	b := make([]byte, 16<<10)
	_, _ = rand.Read(b)
	if err := pw.store.Create(volume, b, w.node); err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t)
	p := &v1alpha1.EvacuationProvider{ObjectMeta: metav1.ObjectMeta{Name: pw.provider},
		Spec: v1alpha1.EvacuationProviderSpec{
			PodSelector:       metav1.LabelSelector{MatchLabels: map[string]string{devcluster.AppLabel: "api"}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: w.ns}},
			Timeout:           &metav1.Duration{Duration: 10 * time.Second}}}
	if err := pw.cl.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pw.cl.Delete(context.Background(), p) })
	testenv.RunManager(t, w.c, func(mgr ctrl.Manager) error {
		mover := &rv.Mover{Store: pw.store, InUse: rv.PodsInUse(mgr.GetClient()), Budget: 200 * time.Millisecond,
			Nodes: func(context.Context) ([]string, error) { return []string{w.node, pw.spare}, nil }}
		pw.gate = &gated{Provider: mover, asked: map[string]int{}, moved: map[string]int{}, cancelled: map[string]int{}}
		r := &evacuation.Runner{Client: mgr.GetClient(), Name: pw.provider, Provider: pw.gate, Heartbeat: 200 * time.Millisecond}
		return r.SetupWithManager(mgr)
	})
	return pw
}

// evacuation reads the Evacuation of the pods' node for the provider; nil
// when there is none.
func (pw *providerWorld) evacuation() *v1alpha1.Evacuation {
	pw.t.Helper()
	ev := &v1alpha1.Evacuation{}
	err := pw.cl.Get(context.Background(), types.NamespacedName{Name: v1alpha1.EvacuationName(pw.node, pw.provider)}, ev)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		pw.t.Fatal(err)
	}
	return ev
}

// waitEvacuation waits until the Evacuation satisfies cond (nil: gone).
func (pw *providerWorld) waitEvacuation(what string, cond func(*v1alpha1.Evacuation) bool) *v1alpha1.Evacuation {
	pw.t.Helper()
	var last *v1alpha1.Evacuation
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		last = pw.evacuation()
		return cond(last), nil
	})
	if err != nil {
		pw.t.Fatalf("the Evacuation of %s for %s: %s: %v; last seen: %+v", pw.node, pw.provider, what, err, last)
	}
	return last
}

// layout reads the store's layout.
func (pw *providerWorld) layout() *rv.Layout {
	pw.t.Helper()
	l, err := pw.store.Load()
	if err != nil {
		pw.t.Fatal(err)
	}
	return l
}

// withdraw sets the request's intent to Withdrawn.
func (w *world) withdraw(req *lifecyclev1alpha1.EvictionRequest) {
	w.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		got, err := w.cs.LifecycleV1alpha1().EvictionRequests(w.ns).Get(context.Background(), req.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		got.Spec.Intent = lifecyclev1alpha1.EvictionRequestIntentWithdrawn
		_, err = w.cs.LifecycleV1alpha1().EvictionRequests(w.ns).Update(context.Background(), got, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		w.t.Fatal(err)
	}
}

// TestAnEvacuationProviderAnswersInVacatesTurn: pods that an
// EvacuationProvider protects (examples/replicated-volume's mover, which
// knows only node Evacuations) declare vacate's responder; a descheduler
// (the test) asks for the eviction of both at once. In vacate's turn for
// one of them, vacate asks the provider for an Evacuation of the pods'
// node, labelled with that pod's Eviction; the other pod joins it. The pods
// stay while the provider works, and vacate's messages carry the
// provider's. Once the provider has Completed, the evictor evicts them one
// at a time (the PDB); the Evacuation passes to the Eviction still going
// when the first ends, and the last undoes it (the provider's Cancel: the
// node eligible again) before its Eviction goes. A third request,
// withdrawn while the provider works, cancels: the pod stays and the
// provider's work is undone.
func TestAnEvacuationProviderAnswersInVacatesTurn(t *testing.T) {
	pw := newProviderWorld(t, "1")
	reqs := map[string]*lifecyclev1alpha1.EvictionRequest{}
	for i, p := range pw.pods {
		reqs[p.Name] = pw.request(p, "rebalance-p"+string(rune('a'+i)))
	}

	evac := pw.waitEvacuation("asked for the pods' Evictions, the second joined", func(ev *v1alpha1.Evacuation) bool {
		return ev != nil && ev.ForEviction() && len(ev.Spec.ProtectedPods) == 2
	})
	if evac.Spec.Mode != v1alpha1.ModeMaintenance || evac.Spec.Desired != v1alpha1.DesiredEvacuate ||
		!slices.Contains(evac.Finalizers, v1alpha1.FinalizerCancel) || len(evac.OwnerReferences) != 0 {
		t.Fatalf("the Evacuation asked for the pods' evictions: %+v %+v; want Maintenance, Evacuate, vacate.dev/cancel, no owner", evac.ObjectMeta, evac.Spec)
	}
	owner := pw.pods[slices.IndexFunc(pw.pods, func(p corev1.Pod) bool { return string(p.UID) == evac.Spec.ProtectedPods[0].UID })]
	for _, p := range pw.pods {
		ev := pw.waitEviction(p, "vacate's turn reports the provider's work", func(ev *lifecyclev1alpha1.Eviction) bool {
			return state(ev, coordinator.Responder) == lifecyclev1alpha1.ResponderStateActive && strings.Contains(message(ev, coordinator.Responder), "held by the test")
		})
		if p.UID == owner.UID && (evac.Labels[v1alpha1.LabelEviction] != string(ev.UID) || evac.Spec.DrainUID != string(ev.UID)) {
			t.Errorf("the Evacuation's label %q and drainUID %q, want the first Eviction's UID %s", evac.Labels[v1alpha1.LabelEviction], evac.Spec.DrainUID, ev.UID)
		}
		if p.UID == owner.UID && !slices.Contains(ev.Finalizers, coordinator.FinalizerHook) {
			t.Errorf("the Eviction's finalizers %v: want %s while its Evacuation is not undone", ev.Finalizers, coordinator.FinalizerHook)
		}
	}
	time.Sleep(2 * time.Second) // passes come and go: both pods stay while the provider works
	for _, p := range pw.pods {
		if got := pw.pod(p); got == nil || got.DeletionTimestamp != nil {
			t.Fatalf("pod %s went while the provider had not completed", p.Name)
		}
	}

	pw.gate.set(true)
	for _, p := range pw.pods {
		ev := pw.waitEviction(p, "TargetEvicted", func(ev *lifecyclev1alpha1.Eviction) bool {
			return meta.IsStatusConditionTrue(ev.Status.Conditions, string(lifecyclev1alpha1.EvictionConditionTargetEvicted))
		})
		if !strings.Contains(message(ev, coordinator.Responder), "Completed") || state(ev, coordinator.Responder) != lifecyclev1alpha1.ResponderStateCompleted {
			t.Errorf("vacate's turn for %s ended %s %q; want Completed with the provider's word", p.Name, state(ev, coordinator.Responder), message(ev, coordinator.Responder))
		}
		pw.waitRequestEvicted(reqs[p.Name])
	}
	pw.waitEvacuation("undone and gone after both evictions", func(ev *v1alpha1.Evacuation) bool { return ev == nil })
	if l := pw.layout(); slices.Contains(l.Ineligible, pw.node) || len(l.Added[pw.node]) != 0 {
		t.Errorf("after the evictions the provider's work for %s is not undone: %+v", pw.node, l)
	}
	if asked, moved, cancelled := pw.gate.calls(pw.node); asked == 0 || moved == 0 || cancelled == 0 {
		t.Errorf("the provider was asked %d times for %s, copied %d times, cancelled %d times: want each at least once", asked, pw.node, moved, cancelled)
	}
	for _, p := range pw.pods {
		got, err := pw.cs.LifecycleV1alpha1().Evictions(pw.ns).Get(context.Background(), p.Name, metav1.GetOptions{})
		if err == nil && slices.Contains(got.Finalizers, coordinator.FinalizerHook) {
			t.Errorf("the ended Eviction of %s still has %s after its Evacuation went", p.Name, coordinator.FinalizerHook)
		}
	}

	// A withdrawal while the provider works: the pod stays, the work is
	// undone.
	pw.gate.set(false)
	pods, err := devcluster.WaitForPodsReady(testenv.Context(t), pw.cs, pw.ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: "api"}), 2, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	third := pods[0]
	req := pw.request(third, "rebalance-pc")
	pw.waitEvacuation("asked for the third pod", func(ev *v1alpha1.Evacuation) bool {
		return ev != nil && ev.ForEviction() && len(ev.Spec.ProtectedPods) == 1 && ev.Spec.ProtectedPods[0].UID == string(third.UID) &&
			ev.Status.Phase == v1alpha1.EvacuationInProgress
	})
	_, _, cancelledBefore := pw.gate.calls(pw.node)
	pw.withdraw(req)
	ev := pw.waitEviction(third, "cancelled", func(ev *lifecyclev1alpha1.Eviction) bool {
		return meta.IsStatusConditionTrue(ev.Status.Conditions, string(lifecyclev1alpha1.EvictionConditionFailed))
	})
	if state(ev, coordinator.Responder) != lifecyclev1alpha1.ResponderStateCanceled {
		t.Errorf("vacate's turn ended %s after the withdrawal, want Canceled:\n%s", state(ev, coordinator.Responder), describe(ev))
	}
	pw.waitEvacuation("undone and gone after the withdrawal", func(ev *v1alpha1.Evacuation) bool { return ev == nil })
	if l := pw.layout(); slices.Contains(l.Ineligible, pw.node) || len(l.Added[pw.node]) != 0 {
		t.Errorf("after the withdrawal the provider's work for %s is not undone: %+v", pw.node, l)
	}
	if _, _, cancelled := pw.gate.calls(pw.node); cancelled == cancelledBefore {
		t.Error("the withdrawn Evacuation went without its provider's Cancel")
	}
	if got := pw.pod(third); got == nil || got.DeletionTimestamp != nil {
		t.Error("the pod was evicted after its only requester withdrew")
	}
	if n := pw.acceptedEvictions(third); n != 0 {
		t.Errorf("%d evictions of the withdrawn pod were accepted", n)
	}
}

// TestADrainTakesAnEvictionsEvacuationOver: while vacate's turn for one
// pod has the provider at work on an Evacuation of the pod's node, that
// node is drained. The drain asks the same provider for the node, so it
// takes the Evacuation over (its UID, its owner; the Eviction's label
// goes) and records every leaving pod; vacate's turn then waits on the
// drain's Evacuation and ends when it is Completed. When the pod's
// Eviction ends, the coordinator leaves the drain's Evacuation alone (the
// provider's work stays while the node drains); undoing the drain undoes
// it.
func TestADrainTakesAnEvictionsEvacuationOver(t *testing.T) {
	pw := newProviderWorld(t, "2") // the drain asks for both pods at once: its budget never holds the target back
	target := pw.pods[0]
	pw.request(target, "rebalance-d")
	pw.waitEvacuation("asked for the pod's Eviction", func(ev *v1alpha1.Evacuation) bool {
		return ev != nil && ev.ForEviction() && ev.Status.Phase == v1alpha1.EvacuationInProgress
	})
	if err := requests.Apply(testenv.Context(t), pw.cl, pw.node, v1alpha1.Requester{Name: "cli:test", Reason: "kernel upgrade"}, "", ""); err != nil {
		t.Fatal(err)
	}
	nd := &v1alpha1.NodeDrain{}
	if err := pw.cl.Get(testenv.Context(t), types.NamespacedName{Name: pw.node}, nd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pw.cl.Delete(context.Background(), nd) })
	evac := pw.waitEvacuation("taken over by the drain", func(ev *v1alpha1.Evacuation) bool {
		return ev != nil && ev.Spec.DrainUID == string(nd.UID) && len(ev.Spec.ProtectedPods) == 2
	})
	if _, ok := evac.Labels[v1alpha1.LabelEviction]; ok || len(evac.OwnerReferences) != 1 || evac.OwnerReferences[0].UID != nd.UID {
		t.Errorf("the drain's Evacuation: labels %v, owners %v; want no vacate.dev/eviction and the drain as owner", evac.Labels, evac.OwnerReferences)
	}
	pw.waitEviction(target, "vacate's turn waits on the drain's Evacuation", func(ev *lifecyclev1alpha1.Eviction) bool {
		return strings.Contains(message(ev, coordinator.Responder), "asked by a drain of node "+pw.node)
	})
	pw.gate.set(true)
	ev := pw.waitEvictionFor(target, "TargetEvicted", 2*time.Minute, func(ev *lifecyclev1alpha1.Eviction) bool {
		return meta.IsStatusConditionTrue(ev.Status.Conditions, string(lifecyclev1alpha1.EvictionConditionTargetEvicted)) &&
			!slices.Contains(ev.Finalizers, coordinator.FinalizerHook)
	})
	if state(ev, coordinator.Responder) != lifecyclev1alpha1.ResponderStateCompleted {
		t.Errorf("vacate's turn ended %s %q, want Completed", state(ev, coordinator.Responder), message(ev, coordinator.Responder))
	}
	// The Eviction's finalizer is gone: its end was handled. (The drain
	// itself waits on the PDB: the replacement cannot run on the cordoned
	// node it is pinned to.)
	if got := pw.evacuation(); got == nil || got.Spec.Desired != v1alpha1.DesiredEvacuate || got.Spec.DrainUID != string(nd.UID) {
		t.Fatalf("the draining node's Evacuation: %+v; want the drain's, still Evacuate (its work stays while the node drains)", got)
	}
	if l := pw.layout(); !slices.Contains(l.Ineligible, pw.node) {
		t.Errorf("the provider's work for the draining node was undone: %+v", l)
	}

	if err := pw.cl.Delete(testenv.Context(t), nd); err != nil {
		t.Fatal(err)
	}
	pw.waitEvacuation("undone with the drain", func(ev *v1alpha1.Evacuation) bool { return ev == nil })
	if l := pw.layout(); slices.Contains(l.Ineligible, pw.node) {
		t.Errorf("after the drain's undo the provider's work for %s stays: %+v", pw.node, l)
	}
}

// TestTheEvictorWaitsForTheProviders: a pod that an EvacuationProvider
// protects but that declares only another responder (no turn of vacate's)
// is asked for by a descheduler. Once that responder completes, the
// evictor does not evict it as it would a plain pod: it asks the provider
// for the pod's node itself, says so, and evicts only once the provider
// has Completed; the Evacuation is undone after.
func TestTheEvictorWaitsForTheProviders(t *testing.T) {
	pw := newProviderWorld(t, "1", corev1.EvictionResponder{Name: backup, Priority: ptr.To[int32](5000)})
	target := pw.pods[0]
	req := pw.request(target, "rebalance-e")
	pw.waitEviction(target, "its responder has the turn", func(ev *lifecyclev1alpha1.Eviction) bool {
		return state(ev, backup) == lifecyclev1alpha1.ResponderStateActive
	})
	pw.respond(target, backup, func(s *lifecyclev1alpha1.ResponderStatus) { s.CompletionTime, s.Message = now(), ptr.To("moved") })
	ev := pw.waitEviction(target, "the evictor waits for the provider", func(ev *lifecyclev1alpha1.Eviction) bool {
		return state(ev, er.Evictor) == lifecyclev1alpha1.ResponderStateActive && strings.Contains(message(ev, er.Evictor), "waiting for the EvacuationProviders")
	})
	evac := pw.waitEvacuation("asked by the evictor", func(e *v1alpha1.Evacuation) bool { return e != nil && e.ForEviction() })
	if evac.Spec.DrainUID != string(ev.UID) || !records(evac, target) {
		t.Errorf("the evictor's Evacuation: drainUID %s, pods %v; want the Eviction's UID and the pod", evac.Spec.DrainUID, evac.Spec.ProtectedPods)
	}
	time.Sleep(2 * time.Second) // passes come and go
	if p := pw.pod(target); p == nil || p.DeletionTimestamp != nil {
		t.Fatalf("the pod was evicted before its provider completed:\n%s", describe(ev))
	}
	pw.gate.set(true)
	pw.waitEviction(target, "TargetEvicted", func(ev *lifecyclev1alpha1.Eviction) bool {
		return meta.IsStatusConditionTrue(ev.Status.Conditions, string(lifecyclev1alpha1.EvictionConditionTargetEvicted))
	})
	pw.waitRequestEvicted(req)
	pw.waitEvacuation("undone and gone", func(e *v1alpha1.Evacuation) bool { return e == nil })
	if _, moved, cancelled := pw.gate.calls(pw.node); moved == 0 || cancelled == 0 {
		t.Errorf("the provider copied %d times and cancelled %d times for %s: want both", moved, cancelled, pw.node)
	}
}

// records reports whether the Evacuation records the pod.
func records(evac *v1alpha1.Evacuation, pod corev1.Pod) bool {
	return slices.ContainsFunc(evac.Spec.ProtectedPods, func(pp v1alpha1.ProtectedPod) bool { return pp.UID == string(pod.UID) })
}
