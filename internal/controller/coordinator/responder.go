package coordinator

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	er "github.com/vacate-dev/vacate/internal/evictionrequest"
	"github.com/vacate-dev/vacate/internal/hook"
	"github.com/vacate-dev/vacate/internal/policy"
)

// vacate as a responder. A pod that declares vacate's responder in its
// spec.evictionResponders gets, in its turn, what a drain gives it before
// its eviction: its HTTP evacuation hook (protocol v1) is called and its
// turn completes when the hook answers Completed, whoever asked for the
// eviction. The calls follow the same rules as a drain's: the DrainPolicy of
// the pod's node must enable httpHooks for its namespace, and only the pod's
// own address is called.

// Responder is vacate's responder name, for pods' spec.evictionResponders.
const Responder = er.VacateResponder

// hookPoll is how often a pass looks at the hook's conversation while
// vacate has the turn (the prober converses in the background).
const hookPoll = 2 * time.Second

// hookMode is the mode the hook protocol is told: the pod goes and comes
// back elsewhere, as in a maintenance drain; its node stays.
const hookMode = string(v1alpha1.ModeMaintenance)

// responderReport is the Eviction's status with vacate's report as the
// Active responder, and whether there is one to write; poll says a pass must
// come back soon (the hook is still at work).
func (r *Reconciler) responderReport(ctx context.Context, ev *lifecyclev1alpha1.Eviction, pod *corev1.Pod, now time.Time) (status lifecyclev1alpha1.EvictionStatus, write, poll bool, err error) {
	status = *ev.Status.DeepCopy()
	rs := active(&status, Responder)
	if rs == nil || rs.CompletionTime != nil {
		return status, false, false, nil
	}
	done, msg, err := r.evacuate(ctx, ev, pod)
	if err != nil {
		return status, false, false, err
	}
	if done {
		at := metav1.NewTime(now)
		if rs.StartTime != nil && at.Before(rs.StartTime) {
			at = *rs.StartTime
		}
		rs.CompletionTime, rs.Message = &at, ptr.To(capped(msg))
		return status, true, false, nil
	}
	return status, heartbeat(rs, msg, now), true, nil
}

// evacuate says whether vacate's part for the pod is done, and the message
// for its responder status: the pod's HTTP hook (callHook) and the
// EvacuationProviders that protect it (providers.go), side by side.
func (r *Reconciler) evacuate(ctx context.Context, ev *lifecyclev1alpha1.Eviction, pod *corev1.Pod) (bool, string, error) {
	node := &corev1.Node{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: pod.Spec.NodeName}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return true, "the pod's node " + pod.Spec.NodeName + " is gone: nothing to move off it", nil
		}
		return false, "", fmt.Errorf("reading node %s: %w", pod.Spec.NodeName, err)
	}
	hookDone, hookMsg, err := r.callHook(ctx, ev, pod, node)
	if err != nil {
		return false, "", err
	}
	provDone, provMsgs := r.askProviders(ctx, ev, pod, node)
	if len(provMsgs) == 0 {
		if hookMsg == "" {
			return true, "vacate has nothing to move for this pod: it has no annotation " + hook.AnnotationPort + " and no EvacuationProvider protects it", nil
		}
		return hookDone, hookMsg, nil
	}
	msgs := provMsgs
	if hookMsg != "" {
		msgs = append([]string{hookMsg}, provMsgs...)
	}
	return hookDone && provDone, strings.Join(msgs, "; "), nil
}

// callHook says whether the pod's HTTP hook is done, and its message (""
// for a pod without the hook annotation).
func (r *Reconciler) callHook(ctx context.Context, ev *lifecyclev1alpha1.Eviction, pod *corev1.Pod, node *corev1.Node) (bool, string, error) {
	if !hook.Wants(pod) {
		return true, "", nil
	}
	pol, err := policy.Resolve(ctx, r.Client, "", node)
	if err != nil {
		return false, "vacate cannot tell whether it may call the pod's HTTP hook: " + err.Error(), nil
	}
	calls, whyNot, err := pol.CallsHook(pod, policy.NamespaceLabelsFrom(ctx, r.Client))
	if err != nil {
		return false, "", err
	}
	if !calls {
		return true, "vacate does not call the pod's HTTP hook (" + whyNot + "): nothing was called", nil
	}
	t, err := hook.TargetFor(pod, hook.Run{Drain: string(ev.UID), ID: string(ev.UID), Node: pod.Spec.NodeName, Mode: hookMode}, r.AllowLoopbackHooks)
	if err != nil {
		return false, "vacate cannot call the pod's HTTP hook: " + err.Error(), nil
	}
	// Before the first call: the Eviction stays until vacate has undone
	// what the hook started, should every request go (the garbage
	// collector deletes it with the last).
	if err := r.holdForHook(ctx, ev); err != nil {
		return false, "", err
	}
	res := r.Hooks.Evacuate(t)
	if res.Done() {
		return true, "HTTP hook " + t.URL() + ": Completed: " + res.Message, nil
	}
	return false, "HTTP hook " + t.URL() + ": " + res.Describe(), nil
}

// stillTheTarget is the prober's check before every call, against the
// informer's current view (hook.StillTheTarget).
func (r *Reconciler) stillTheTarget(t hook.Target) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return hook.StillTheTarget(ctx, r.Client, t, r.AllowLoopbackHooks)
}

// heartbeat records msg on the responder status and a heartbeat, when the
// message changed or the last heartbeat is heartbeatEvery old; it reports
// whether it changed anything.
func heartbeat(rs *lifecyclev1alpha1.ResponderStatus, msg string, now time.Time) bool {
	msg = capped(msg)
	last := ptr.Deref(rs.HeartbeatTime, ptr.Deref(rs.StartTime, metav1.Time{}))
	if ptr.Deref(rs.Message, "") == msg && now.Sub(last.Time) < heartbeatEvery {
		return false
	}
	at := metav1.NewTime(now)
	if at.Before(&last) {
		at = last
	}
	rs.HeartbeatTime, rs.Message = &at, ptr.To(msg)
	return true
}

// maxMessage bounds a message vacate writes in a responder status (the API
// allows 4000 characters; a refusal's text, an admission webhook's denial
// or an app's answer, can be longer).
const maxMessage = 1000

// capped is msg cut to maxMessage runes.
func capped(msg string) string {
	if r := []rune(msg); len(r) > maxMessage {
		return string(r[:maxMessage-1]) + "…"
	}
	return msg
}

// active is the named responder's status while it has the turn.
func active(status *lifecyclev1alpha1.EvictionStatus, name string) *lifecyclev1alpha1.ResponderStatus {
	for _, t := range status.TargetResponders {
		if t.Name != name || t.State != lifecyclev1alpha1.ResponderStateActive {
			continue
		}
		for i := range status.Responders {
			if status.Responders[i].Name == name {
				return &status.Responders[i]
			}
		}
	}
	return nil
}

// AnnotationHookCancelled on an Eviction records that the cancel of vacate's
// hook call for it is over: the hook acknowledged its DELETE, or
// timeouts.cancel passed (the value says which).
const AnnotationHookCancelled = "vacate.dev/hook-cancelled"

// cancelHook undoes vacate's part when an Eviction is cancelled (every
// requester withdrew) while vacate's turn had begun and its hook had not
// answered Completed: the hook is asked to undo (DELETE), as a cancelled
// drain asks it, until it acknowledges or the node's policy's
// timeouts.cancel passes. pending says a pass must come back.
func (r *Reconciler) cancelHook(ctx context.Context, ev *lifecyclev1alpha1.Eviction, pod *corev1.Pod) (reconcile.Result, bool, error) {
	failed := findTrue(ev, lifecyclev1alpha1.EvictionConditionFailed)
	if failed == nil || failed.Reason != string(lifecyclev1alpha1.EvictionConditionReasonCanceledDueToNoRequesters) ||
		ev.Annotations[AnnotationHookCancelled] != "" || !hook.Wants(pod) {
		return reconcile.Result{}, false, nil
	}
	rs := er.ResponderStatus(ev.Status.DeepCopy(), Responder)
	if rs.StartTime == nil || rs.CompletionTime != nil {
		return reconcile.Result{}, false, nil // vacate's turn never came, or its hook had completed
	}
	t, err := hook.TargetFor(pod, hook.Run{Drain: string(ev.UID), ID: string(ev.UID), Node: pod.Spec.NodeName, Mode: hookMode}, r.AllowLoopbackHooks)
	if err != nil || r.Hooks.NeverReached(t) {
		return reconcile.Result{}, false, nil // it cannot be called, or never got the POST
	}
	res, acknowledged := r.Hooks.Cancel(t)
	limit := r.cancelLimit(ctx, pod.Spec.NodeName)
	outcome := ""
	switch {
	case acknowledged:
		outcome = "acknowledged"
	case r.Clock.Now().Sub(failed.LastTransitionTime.Time) >= limit:
		outcome = "timed out"
		r.Events.Eventf(ev, pod, corev1.EventTypeWarning, ReasonHookCancelTimeout, "Cancel",
			"the HTTP hook %s did not acknowledge the cancel within %s (timeouts.cancel): %s", t.URL(), limit, res.Describe())
	default:
		return reconcile.Result{RequeueAfter: hookPoll}, true, nil
	}
	patch := client.MergeFrom(ev.DeepCopy())
	if ev.Annotations == nil {
		ev.Annotations = map[string]string{}
	}
	ev.Annotations[AnnotationHookCancelled] = outcome
	if err := r.Client.Patch(ctx, ev, patch); err != nil {
		return reconcile.Result{}, true, fmt.Errorf("recording the hook's cancel on Eviction %s/%s: %w", ev.Namespace, ev.Name, err)
	}
	return reconcile.Result{}, false, nil
}

// FinalizerHook keeps an Eviction whose pod's HTTP hook vacate called, or
// for which it asked an EvacuationProvider, until the hook's cancel is
// over (cancelHook) and the Evacuations are undone (endEvacuations): the
// garbage collector deletes an Eviction with its last request, and both
// need the Eviction.
const FinalizerHook = er.FinalizerHook

// holdForHook puts FinalizerHook on the Eviction (not on one being deleted:
// the API refuses new finalizers there).
func (r *Reconciler) holdForHook(ctx context.Context, ev *lifecyclev1alpha1.Eviction) error {
	if controllerutil.ContainsFinalizer(ev, FinalizerHook) || !ev.DeletionTimestamp.IsZero() {
		return nil
	}
	patch := client.MergeFromWithOptions(ev.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.AddFinalizer(ev, FinalizerHook)
	if err := r.Client.Patch(ctx, ev, patch); err != nil {
		return fmt.Errorf("adding finalizer %s to Eviction %s/%s: %w", FinalizerHook, ev.Namespace, ev.Name, err)
	}
	return nil
}

// releaseHook removes FinalizerHook from an Eviction that no longer needs
// it.
func (r *Reconciler) releaseHook(ctx context.Context, ev *lifecyclev1alpha1.Eviction) error {
	if !controllerutil.ContainsFinalizer(ev, FinalizerHook) {
		return nil
	}
	patch := client.MergeFromWithOptions(ev.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(ev, FinalizerHook)
	if err := r.Client.Patch(ctx, ev, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing finalizer %s from Eviction %s/%s: %w", FinalizerHook, ev.Namespace, ev.Name, err)
	}
	return nil
}
