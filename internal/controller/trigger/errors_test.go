package trigger

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/requeue"
	"github.com/vacate-dev/vacate/internal/metrics"
)

// This file tests how a pass handles the API's errors: a lost lock is a
// requeue, anything else is returned.

// TestReconcileHandlesAPIErrorsAsItsCommentsPromise: a lost optimistic lock
// (the finalizer's patch, a trigger's apply) is a requeue after
// requeue.ConflictRetry, not an error; a node gone before its finalizer's
// patch needs nothing, and a release whose node is gone is neither counted
// nor announced; every other failure is returned. A failed request does not
// stop the finalizer (its bound applies even then), but nothing is
// withdrawn in that pass.
func TestReconcileHandlesAPIErrorsAsItsCommentsPromise(t *testing.T) {
	for _, tc := range append(readErrorCases(), writeErrorCases()...) {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, tc.funcs, objects(tc.node, tc.nd, tc.policy)...)
			w.applies.err = tc.applyErr
			before := promtestutil.ToFloat64(metrics.NodeDeletionTimeouts)
			res, err := w.reconcile()
			tc.checkResult(t, res, err)
			if len(w.applies.got) != tc.wantApply {
				t.Errorf("applied %v, want %d apply(s)", w.applies.got, tc.wantApply)
			}
			tc.checkFinalizers(t, w)
			if got := w.recorded(); len(got) != 0 {
				t.Errorf("events %q, want none", got)
			}
			if got := promtestutil.ToFloat64(metrics.NodeDeletionTimeouts) - before; got != 0 {
				t.Errorf("%v releases counted, want none", got)
			}
		})
	}
}

// apiErrorCase is a node, its drain and its policy, the API's answers (an
// interceptor's, and the applies'), and what the pass does with them.
type apiErrorCase struct {
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
}

// checkResult checks that the pass returned the error the case wants (or
// none) and asked for the requeue it wants.
func (tc apiErrorCase) checkResult(t *testing.T, res reconcile.Result, err error) {
	t.Helper()
	switch {
	case tc.wantErr == nil && err != nil:
		t.Errorf("Reconcile = %v, want no error", err)
	case tc.wantErr != nil && !tc.wantErr(err):
		t.Errorf("Reconcile = %v, want the API's error returned", err)
	}
	if res != tc.wantResult {
		t.Errorf("Reconcile asked for %+v, want %+v", res, tc.wantResult)
	}
}

// checkFinalizers checks the node's finalizers after the pass, when the
// case names them.
func (tc apiErrorCase) checkFinalizers(t *testing.T, w *world) {
	t.Helper()
	if tc.wantFin == nil {
		return
	}
	n := w.node()
	if n == nil {
		t.Fatalf("the node is gone, want it with finalizers %v", tc.wantFin)
	}
	if !slices.Equal(n.Finalizers, tc.wantFin) {
		t.Errorf("the node's finalizers %v, want %v", n.Finalizers, tc.wantFin)
	}
}

// forbidden is the API's refusal of a call on gr.
func forbidden(gr schema.GroupResource) error {
	return apierrors.NewForbidden(gr, "node-a", errors.New("no"))
}

// nodeConflict is a lost optimistic lock on node-a.
var nodeConflict = apierrors.NewConflict(nodesGR, "node-a", errors.New("stale"))

// tainted is node-a with vacate's taint: a pass requests a drain for it.
func tainted() *corev1.Node {
	return newNode("node-a").Taint(v1alpha1.TaintDrain, corev1.TaintEffectNoSchedule).Obj()
}

// expired is node-a deleted two hours ago and held by vacate's finalizer:
// past the default bound, so a pass releases it.
func expired() *corev1.Node {
	return newNode("node-a").Finalizers(v1alpha1.FinalizerDrain).Deleted(2 * time.Hour).Obj()
}

// readErrorCases: reading the node or the drain, or listing the policies,
// fails.
func readErrorCases() []apiErrorCase {
	return []apiErrorCase{
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
	}
}

// writeErrorCases: the finalizer's patch, a request, a withdrawal or a
// release fails.
func writeErrorCases() []apiErrorCase {
	return []apiErrorCase{
		{
			name:       "the finalizer's patch conflicts: requeued",
			node:       tainted(),
			policy:     defaultPolicy(onDelete),
			funcs:      failOn("patch", &corev1.Node{}, nodeConflict),
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
