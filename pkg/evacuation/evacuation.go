// Package evacuation helps a stateful system take part in vacate's drains as
// an EvacuationProvider. vacate creates one Evacuation per drained node and
// provider; a Runner watches the provider's Evacuations, calls the
// provider's Evacuate or Cancel until it reports done, and writes the
// status vacate waits for, with a heartbeat while work goes on.
//
//	type store struct{ ... }
//
//	func (s *store) Evacuate(ctx context.Context, node string, mode v1alpha1.DrainMode) (evacuation.Progress, error) {
//		left := s.moveSomeReplicasOff(node)
//		return evacuation.Progress{Done: left == 0, Remaining: int64(left), Message: "copying replicas"}, nil
//	}
//
//	func (s *store) Cancel(ctx context.Context, node string) (evacuation.Progress, error) { ... }
//
//	r := &evacuation.Runner{Client: mgr.GetClient(), Name: "my-store", Provider: &store{}}
//	err := r.SetupWithManager(mgr)
//
// Evacuate and Cancel are called again and again (after every change and at
// each heartbeat) until they report Done, so they must be idempotent: look
// at the world, do the next step, report what is left.
//
// Only the provider's reporter may write its Evacuations' status (the
// admission policy vacate-evacuation-status): name the identity the Runner
// runs as in the EvacuationProvider, so no other system can complete them:
//
//	spec:
//	  reporter:
//	    serviceAccount: {namespace: storage, name: my-store}
//
// An Evacuation is cancelled even while it is being deleted: vacate keeps
// it (finalizer vacate.dev/cancel) until the cancel is confirmed. A
// provider written without this package must do the same.
package evacuation

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// Provider is a stateful system's part in a drain.
type Provider interface {
	// Evacuate moves the provider's data off node (or, for an
	// AfterEviction provider, cleans up after the node's pods left). An
	// AfterEviction provider is asked from the start of the drain, before
	// the pods leave: it must itself wait until what it removes is no
	// longer in use.
	Evacuate(ctx context.Context, node string, mode v1alpha1.DrainMode) (Progress, error)
	// Cancel undoes what Evacuate did on node, as far as it can.
	Cancel(ctx context.Context, node string) (Progress, error)
}

// Progress is what a step reports.
type Progress struct {
	// Done: nothing is left to do.
	Done bool
	// Remaining is how much is left, in the provider's unit.
	Remaining int64
	// Message says what is happening, for people.
	Message string
}

// failed marks an error the provider cannot get past by retrying alone.
type failed struct{ err error }

func (f failed) Error() string { return f.err.Error() }
func (f failed) Unwrap() error { return f.err }

// Failed marks err as a failure: the evacuation's phase becomes Failed and
// the drain holds the provider's pods and says why. The Runner still calls
// the provider at each heartbeat, so the evacuation resumes once the cause
// is fixed. Other errors are reported as InProgress and retried.
func Failed(err error) error { return failed{err} }

// IsFailed reports whether err was marked by Failed.
func IsFailed(err error) bool {
	var f failed
	return errors.As(err, &f)
}

// DefaultHeartbeat is how often a Runner reports on unfinished work.
const DefaultHeartbeat = 10 * time.Second

// Runner reconciles one provider's Evacuations.
type Runner struct {
	Client client.Client
	// Name is the EvacuationProvider's name.
	Name     string
	Provider Provider
	// Heartbeat is how often unfinished work is retried and reported; keep
	// it well under the EvacuationProvider's timeout. Default 10s.
	Heartbeat time.Duration
	Clock     clock.PassiveClock
}

func (r *Runner) defaults() {
	if r.Heartbeat == 0 {
		r.Heartbeat = DefaultHeartbeat
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
}

// SetupWithManager watches the Evacuations addressed to this provider.
func (r *Runner) SetupWithManager(mgr ctrl.Manager) error {
	r.defaults()
	mine := predicate.NewPredicateFuncs(func(o client.Object) bool {
		ev, ok := o.(*v1alpha1.Evacuation)
		return ok && ev.Spec.Provider == r.Name
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("evacuation-"+r.Name).
		For(&v1alpha1.Evacuation{}, builder.WithPredicates(mine, predicate.GenerationChangedPredicate{})).
		Complete(r)
}

// Reconcile does the next step of one evacuation and reports it.
func (r *Runner) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	r.defaults()
	ev := &v1alpha1.Evacuation{}
	if err := r.Client.Get(ctx, req.NamespacedName, ev); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	// An Evacuation being deleted is still cancelled when vacate asks: its
	// finalizer keeps it until the cancel is confirmed. Nothing new starts
	// on one that goes.
	if ev.Spec.Provider != r.Name || (!ev.DeletionTimestamp.IsZero() && ev.Spec.Desired != v1alpha1.DesiredCancel) {
		return reconcile.Result{}, nil
	}
	final := v1alpha1.EvacuationCompleted
	step := func() (Progress, error) { return r.Provider.Evacuate(ctx, ev.Spec.NodeName, ev.Spec.Mode) }
	if ev.Spec.Desired == v1alpha1.DesiredCancel {
		final = v1alpha1.EvacuationCancelled
		step = func() (Progress, error) { return r.Provider.Cancel(ctx, ev.Spec.NodeName) }
	}
	if ev.Status.Phase == final && ev.Status.ObservedGeneration == ev.Generation {
		return reconcile.Result{}, nil // finished; nothing to report
	}
	if ev.Status.ObservedGeneration != ev.Generation {
		// Say it is taken up before any work, with a lock: vacate deletes an
		// Evacuation nobody took up without asking for a cancel, and must
		// not do so once work may have begun.
		patch := client.MergeFromWithOptions(ev.DeepCopy(), client.MergeFromWithOptimisticLock{})
		ev.Status.ObservedGeneration, ev.Status.HeartbeatTime = ev.Generation, &metav1.Time{Time: r.Clock.Now()}
		ev.Status.Phase, ev.Status.Message = v1alpha1.EvacuationInProgress, "taken up"
		if err := r.Client.Status().Patch(ctx, ev, patch); err != nil {
			if apierrors.IsNotFound(err) {
				return reconcile.Result{}, nil
			}
			return reconcile.Result{}, fmt.Errorf("reporting evacuation %s taken up: %w", ev.Name, err)
		}
	}
	p, err := step()
	st := v1alpha1.EvacuationStatus{ObservedGeneration: ev.Generation, Remaining: p.Remaining, Message: p.Message,
		HeartbeatTime: &metav1.Time{Time: r.Clock.Now()}}
	switch {
	case IsFailed(err):
		st.Phase, st.Message = v1alpha1.EvacuationFailed, err.Error()
	case err != nil:
		st.Phase, st.Message = v1alpha1.EvacuationInProgress, "retrying after an error: "+err.Error()
	case p.Done:
		st.Phase = final
	default:
		st.Phase = v1alpha1.EvacuationInProgress
	}
	if len(st.Message) > 2048 {
		st.Message = st.Message[:2045] + "..."
	}
	if !equality.Semantic.DeepEqual(st, ev.Status) {
		patch := client.MergeFrom(ev.DeepCopy())
		ev.Status = st
		if err := r.Client.Status().Patch(ctx, ev, patch); err != nil && !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("reporting evacuation %s: %w", ev.Name, err)
		}
	}
	if st.Phase == final {
		return reconcile.Result{}, nil
	}
	return reconcile.Result{RequeueAfter: r.Heartbeat}, nil
}
