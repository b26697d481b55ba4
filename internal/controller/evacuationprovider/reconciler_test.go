package evacuationprovider

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// otherFinalizer is someone else's finalizer: vacate never touches it.
const otherFinalizer = "example.com/keep"

var deletedAt = metav1.NewTime(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))

func newScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := testutil.Scheme(t)
	return s
}

// provider is an EvacuationProvider named name with the finalizers given;
// deleting marks it deleted (the fake client, like the API server, keeps a
// deleted object only while a finalizer holds it).
func provider(name string, deleting bool, finalizers ...string) *v1alpha1.EvacuationProvider {
	p := &v1alpha1.EvacuationProvider{ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: finalizers}}
	if deleting {
		p.DeletionTimestamp = &deletedAt
	}
	return p
}

// evacuation is an Evacuation of generation 1 asking provider to Evacuate,
// not answered yet; change adjusts it.
func evacuation(name, providerName string, change ...func(*v1alpha1.Evacuation)) *v1alpha1.Evacuation {
	ev := &v1alpha1.Evacuation{
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1},
		Spec:       v1alpha1.EvacuationSpec{NodeName: "node-a", Provider: providerName, Mode: v1alpha1.ModeMaintenance, Desired: v1alpha1.DesiredEvacuate},
	}
	for _, c := range change {
		c(ev)
	}
	return ev
}

func answered(phase v1alpha1.EvacuationPhase) func(*v1alpha1.Evacuation) {
	return func(ev *v1alpha1.Evacuation) { ev.Status.Phase, ev.Status.ObservedGeneration = phase, ev.Generation }
}

func cancelAsked(ev *v1alpha1.Evacuation) { ev.Spec.Desired = v1alpha1.DesiredCancel; ev.Generation++ }

func released(ev *v1alpha1.Evacuation) {
	ev.Spec.Release = &v1alpha1.EvacuationRelease{By: "alice", Time: deletedAt}
}

func beingDeleted(finalizers ...string) func(*v1alpha1.Evacuation) {
	return func(ev *v1alpha1.Evacuation) { ev.DeletionTimestamp, ev.Finalizers = &deletedAt, finalizers }
}

// TestUnfinishedEvacuationsNeedTheirProvider: an Evacuation needs its
// provider until the provider answered the current request for the
// current generation (Completed for Evacuate, Cancelled for Cancel), it is
// released, or it goes away for good (deleted without vacate.dev/cancel). A
// Failed evacuation, an answer for an older generation, or an answer to the
// other request does not let the provider go.
func TestUnfinishedEvacuationsNeedTheirProvider(t *testing.T) {
	for _, tc := range []struct {
		name string
		ev   *v1alpha1.Evacuation
		want bool
	}{
		{"not answered yet", evacuation("e", "p"), true},
		{"in progress", evacuation("e", "p", answered(v1alpha1.EvacuationInProgress)), true},
		{"Completed for the current generation", evacuation("e", "p", answered(v1alpha1.EvacuationCompleted)), false},
		{"Completed for an older generation", evacuation("e", "p", answered(v1alpha1.EvacuationCompleted), func(ev *v1alpha1.Evacuation) { ev.Generation = 2 }), true},
		{"Completed with no generation known", evacuation("e", "p", answered(v1alpha1.EvacuationCompleted), func(ev *v1alpha1.Evacuation) { ev.Generation, ev.Status.ObservedGeneration = 0, 0 }), true},
		{"Failed: the provider still owes an answer", evacuation("e", "p", answered(v1alpha1.EvacuationFailed)), true},
		{"Cancel asked, the Completed of the Evacuate does not answer it", evacuation("e", "p", cancelAsked, answered(v1alpha1.EvacuationCompleted)), true},
		{"Cancel asked and Cancelled for the current generation", evacuation("e", "p", cancelAsked, answered(v1alpha1.EvacuationCancelled)), false},
		{"Cancel asked, Cancelled only for the Evacuate's generation", evacuation("e", "p", answered(v1alpha1.EvacuationCancelled), cancelAsked), true},
		{"Evacuate asked, a Cancelled does not answer it", evacuation("e", "p", answered(v1alpha1.EvacuationCancelled)), true},
		{"released while in progress", evacuation("e", "p", answered(v1alpha1.EvacuationInProgress), released), false},
		{"released while a Cancel is unanswered", evacuation("e", "p", cancelAsked, released), false},
		{"deleted without vacate.dev/cancel: gone for good", evacuation("e", "p", beingDeleted(otherFinalizer)), false},
		{"deleted, held by vacate.dev/cancel until its cancel", evacuation("e", "p", cancelAsked, beingDeleted(v1alpha1.FinalizerCancel)), true},
		{"deleted, held by vacate.dev/cancel, cancel answered", evacuation("e", "p", cancelAsked, answered(v1alpha1.EvacuationCancelled), beingDeleted(v1alpha1.FinalizerCancel)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Unfinished(tc.ev); got != tc.want {
				t.Errorf("Unfinished = %v, want %v (desired %s, generation %d, status %s for generation %d)", got, tc.want,
					tc.ev.Spec.Desired, tc.ev.Generation, tc.ev.Status.Phase, tc.ev.Status.ObservedGeneration)
			}
		})
	}
}

// countPatches counts the client's writes of EvacuationProviders and lets
// them through.
func countPatches(n *int) interceptor.Funcs {
	return interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
		if _, ok := obj.(*v1alpha1.EvacuationProvider); ok {
			*n++
		}
		return c.Patch(ctx, obj, patch, opts...)
	}}
}

// TestAddFinalizerHoldsOnlyAProviderNotOnItsWayOut: AddFinalizer writes the
// finalizer on a live provider (keeping its other finalizers), writes
// nothing when the provider holds it already, and writes nothing and says
// false for a provider being deleted without it: the API refuses new
// finalizers there, and the caller must ask nothing of that provider.
func TestAddFinalizerHoldsOnlyAProviderNotOnItsWayOut(t *testing.T) {
	for _, tc := range []struct {
		name      string
		p         *v1alpha1.EvacuationProvider
		wantHeld  bool
		wantWrite bool
	}{
		{"a live provider gets it", provider("p", false, otherFinalizer), true, true},
		{"a provider holding it already: no write", provider("p", false, v1alpha1.FinalizerEvacuations), true, false},
		{"a provider being deleted that holds it: no write", provider("p", true, v1alpha1.FinalizerEvacuations), true, false},
		{"a provider being deleted without it: not held, no write", provider("p", true, otherFinalizer), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writes := 0
			cl := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(tc.p).WithInterceptorFuncs(countPatches(&writes)).Build()
			ctx := context.Background()
			p := &v1alpha1.EvacuationProvider{}
			if err := cl.Get(ctx, client.ObjectKeyFromObject(tc.p), p); err != nil {
				t.Fatal(err)
			}
			held, err := AddFinalizer(ctx, cl, p)
			if err != nil {
				t.Fatal(err)
			}
			if held != tc.wantHeld || (writes > 0) != tc.wantWrite {
				t.Errorf("AddFinalizer = %v with %d write(s), want %v and a write: %v", held, writes, tc.wantHeld, tc.wantWrite)
			}
			stored := &v1alpha1.EvacuationProvider{}
			if err := cl.Get(ctx, client.ObjectKeyFromObject(tc.p), stored); err != nil {
				t.Fatal(err)
			}
			if got := controllerutil.ContainsFinalizer(stored, v1alpha1.FinalizerEvacuations); got != tc.wantHeld {
				t.Errorf("stored provider holds %s: %v, want %v (finalizers %v)", v1alpha1.FinalizerEvacuations, got, tc.wantHeld, stored.Finalizers)
			}
			if slices.Contains(tc.p.Finalizers, otherFinalizer) && !slices.Contains(stored.Finalizers, otherFinalizer) {
				t.Errorf("another finalizer was lost: %v", stored.Finalizers)
			}
		})
	}
}

// TestAddFinalizerFromAStaleCopyConflictsInsteadOfDroppingFinalizers: the
// finalizer is written under an optimistic lock. A copy read before someone
// else added a finalizer gets a conflict (the caller reads again), not a
// merge patch that would replace the list and drop the other finalizer.
func TestAddFinalizerFromAStaleCopyConflictsInsteadOfDroppingFinalizers(t *testing.T) {
	cl := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(provider("p", false)).Build()
	ctx := context.Background()
	stale := &v1alpha1.EvacuationProvider{}
	if err := cl.Get(ctx, types.NamespacedName{Name: "p"}, stale); err != nil {
		t.Fatal(err)
	}
	newer := stale.DeepCopy()
	newer.Finalizers = []string{otherFinalizer}
	if err := cl.Update(ctx, newer); err != nil {
		t.Fatal(err)
	}

	held, err := AddFinalizer(ctx, cl, stale)
	if held || !apierrors.IsConflict(err) {
		t.Fatalf("AddFinalizer from a stale copy = %v, %v; want false and a conflict", held, err)
	}
	stored := &v1alpha1.EvacuationProvider{}
	if err := cl.Get(ctx, types.NamespacedName{Name: "p"}, stored); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(stored.Finalizers, []string{otherFinalizer}) {
		t.Errorf("finalizers after the conflict %v, want only %s", stored.Finalizers, otherFinalizer)
	}
	// The caller's copy stays as it was read: it does not hold the
	// finalizer the write failed to add.
	if slices.Contains(stale.Finalizers, v1alpha1.FinalizerEvacuations) {
		t.Errorf("the caller's provider has finalizers %v after the conflict", stale.Finalizers)
	}
}

// TestAddFinalizerToAProviderGoneMeanwhile: the provider was deleted (and
// is gone) between the caller's read and the write: it holds nothing, and
// that is no error.
func TestAddFinalizerToAProviderGoneMeanwhile(t *testing.T) {
	cl := fake.NewClientBuilder().WithScheme(newScheme(t)).Build()
	held, err := AddFinalizer(context.Background(), cl, provider("p", false))
	if held || err != nil {
		t.Fatalf("AddFinalizer to a provider that is gone = %v, %v; want false and no error", held, err)
	}
}

// TestReconcileHoldsLiveProvidersAndReleasesDeletedOnesWithNoWork: every
// live provider holds the finalizer, whatever its evacuations (the model of
// Kubernetes' PVC protection); a deleted provider keeps it while one of its
// own unfinished Evacuations exists, and goes with its last one finished
// (the fake client, like the API server, deletes it with its last
// finalizer). Other finalizers are never touched.
func TestReconcileHoldsLiveProvidersAndReleasesDeletedOnesWithNoWork(t *testing.T) {
	for _, tc := range []struct {
		name     string
		p        *v1alpha1.EvacuationProvider
		evs      []*v1alpha1.Evacuation
		wantGone bool
		want     []string // the provider's finalizers after
	}{
		{
			name: "live, an unfinished evacuation: added",
			p:    provider("p", false),
			evs:  []*v1alpha1.Evacuation{evacuation("e1", "p", answered(v1alpha1.EvacuationCompleted)), evacuation("e2", "p", answered(v1alpha1.EvacuationInProgress))},
			want: []string{v1alpha1.FinalizerEvacuations},
		},
		{
			name: "live, no evacuation: added all the same",
			p:    provider("p", false, otherFinalizer),
			evs:  []*v1alpha1.Evacuation{evacuation("e1", "other")},
			want: []string{otherFinalizer, v1alpha1.FinalizerEvacuations},
		},
		{
			name: "live, every evacuation finished: kept",
			p:    provider("p", false, v1alpha1.FinalizerEvacuations),
			evs:  []*v1alpha1.Evacuation{evacuation("done", "p", answered(v1alpha1.EvacuationCompleted))},
			want: []string{v1alpha1.FinalizerEvacuations},
		},
		{
			name: "deleted, every evacuation finished, released or cancelled: removed, other finalizers kept",
			p:    provider("p", true, otherFinalizer, v1alpha1.FinalizerEvacuations),
			evs: []*v1alpha1.Evacuation{
				evacuation("done", "p", answered(v1alpha1.EvacuationCompleted)),
				evacuation("let-go", "p", released),
				evacuation("undone", "p", cancelAsked, answered(v1alpha1.EvacuationCancelled)),
				evacuation("elsewhere", "other"),
			},
			want: []string{otherFinalizer},
		},
		{
			name:     "deleted, no evacuation at all: it goes",
			p:        provider("p", true, v1alpha1.FinalizerEvacuations),
			wantGone: true,
		},
		{
			name: "deleted mid-evacuation: it stays",
			p:    provider("p", true, v1alpha1.FinalizerEvacuations),
			evs:  []*v1alpha1.Evacuation{evacuation("e", "p", cancelAsked, beingDeleted(v1alpha1.FinalizerCancel))},
			want: []string{v1alpha1.FinalizerEvacuations},
		},
		{
			name:     "deleted, its last evacuation finished: it goes",
			p:        provider("p", true, v1alpha1.FinalizerEvacuations),
			evs:      []*v1alpha1.Evacuation{evacuation("e", "p", answered(v1alpha1.EvacuationCompleted))},
			wantGone: true,
		},
		{
			name: "deleted without the finalizer: none is added to it",
			p:    provider("p", true, otherFinalizer),
			evs:  []*v1alpha1.Evacuation{evacuation("e", "p")},
			want: []string{otherFinalizer},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := []client.Object{tc.p}
			for _, ev := range tc.evs {
				objs = append(objs, ev)
			}
			cl := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(objs...).Build()
			r := &Reconciler{Client: cl, APIReader: cl}
			ctx := context.Background()
			res, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: "p"}})
			if err != nil || res != (reconcile.Result{}) {
				t.Fatalf("Reconcile = %+v, %v; want no requeue and no error", res, err)
			}
			stored := &v1alpha1.EvacuationProvider{}
			err = cl.Get(ctx, types.NamespacedName{Name: "p"}, stored)
			if tc.wantGone {
				if !apierrors.IsNotFound(err) {
					t.Fatalf("the provider is still there (%v, finalizers %v), want it gone", err, stored.Finalizers)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(stored.Finalizers, tc.want) {
				t.Errorf("finalizers %v, want %v", stored.Finalizers, tc.want)
			}
		})
	}
}

// TestReconcileAsksTheAPIServerBeforeTheFinalizerGoes: the race CI found.
// The NodeDrain controller created an Evacuation a moment ago and the
// cache has not seen it; the provider is deleted. Its finalizer stays,
// because the API server's own list shows the Evacuation. With the cache
// and the API server agreeing that none is unfinished, it goes.
func TestReconcileAsksTheAPIServerBeforeTheFinalizerGoes(t *testing.T) {
	ctx := context.Background()
	deleted := provider("p", true, otherFinalizer, v1alpha1.FinalizerEvacuations)
	cache := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(deleted).Build()
	server := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(deleted.DeepCopy(), evacuation("new", "p")).Build()
	r := &Reconciler{Client: cache, APIReader: server}
	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: "p"}}); err != nil {
		t.Fatal(err)
	}
	stored := &v1alpha1.EvacuationProvider{}
	if err := cache.Get(ctx, types.NamespacedName{Name: "p"}, stored); err != nil {
		t.Fatal(err)
	}
	if !controllerutil.ContainsFinalizer(stored, v1alpha1.FinalizerEvacuations) {
		t.Fatalf("finalizers %v: the finalizer went while the API server lists an unfinished Evacuation the cache had not seen", stored.Finalizers)
	}

	r.APIReader = cache
	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: "p"}}); err != nil {
		t.Fatal(err)
	}
	if err := cache.Get(ctx, types.NamespacedName{Name: "p"}, stored); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(stored.Finalizers, []string{otherFinalizer}) {
		t.Errorf("finalizers %v, want only %s once neither list shows work", stored.Finalizers, otherFinalizer)
	}
}

var errForbidden = apierrors.NewForbidden(schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "evacuationproviders"}, "p", errors.New("no"))

// TestReconcileHandlesAPIErrorsAsItsCommentsPromise: a provider that is gone
// needs nothing; a lost optimistic lock on either write is dropped (it
// brings its own watch event); a provider gone before its finalizer's
// removal needs nothing; any other failure (reading the provider, listing
// the Evacuations, a refused write) is returned, so the pass is retried.
func TestReconcileHandlesAPIErrorsAsItsCommentsPromise(t *testing.T) {
	gr := schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "evacuationproviders"}
	failPatch := func(err error) interceptor.Funcs {
		return interceptor.Funcs{Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
			return err
		}}
	}
	held := provider("p", true, v1alpha1.FinalizerEvacuations)
	free := provider("p", false)
	unfinished := evacuation("e", "p")
	for _, tc := range []struct {
		name    string
		objs    []client.Object
		funcs   interceptor.Funcs
		wantErr func(error) bool // nil: no error
	}{
		{name: "provider not found: nothing to do", objs: []client.Object{unfinished}},
		{
			name: "reading the provider refused: returned",
			objs: []client.Object{free, unfinished},
			funcs: interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
				return errForbidden
			}},
			wantErr: apierrors.IsForbidden,
		},
		{
			name: "listing the Evacuations fails: returned",
			objs: []client.Object{held},
			funcs: interceptor.Funcs{List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
				return apierrors.NewServiceUnavailable("etcd is away")
			}},
			wantErr: apierrors.IsServiceUnavailable,
		},
		{name: "conflict adding: ignored", objs: []client.Object{free, unfinished}, funcs: failPatch(apierrors.NewConflict(gr, "p", errors.New("stale")))},
		{name: "conflict removing: ignored", objs: []client.Object{held}, funcs: failPatch(apierrors.NewConflict(gr, "p", errors.New("stale")))},
		{name: "provider gone before the removal: ignored", objs: []client.Object{held}, funcs: failPatch(apierrors.NewNotFound(gr, "p"))},
		{name: "adding refused: returned", objs: []client.Object{free, unfinished}, funcs: failPatch(errForbidden), wantErr: apierrors.IsForbidden},
		{name: "removing refused: returned", objs: []client.Object{held}, funcs: failPatch(errForbidden), wantErr: apierrors.IsForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(tc.objs...).WithInterceptorFuncs(tc.funcs).Build()
			r := &Reconciler{Client: cl, APIReader: cl}
			res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "p"}})
			if res != (reconcile.Result{}) {
				t.Errorf("Reconcile asked for %+v, want no requeue", res)
			}
			switch {
			case tc.wantErr == nil && err != nil:
				t.Errorf("Reconcile = %v, want no error", err)
			case tc.wantErr != nil && !tc.wantErr(err):
				t.Errorf("Reconcile = %v, want the API's error returned", err)
			}
		})
	}
}
