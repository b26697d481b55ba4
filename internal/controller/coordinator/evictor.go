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

	"github.com/vacate-dev/vacate/internal/eviction"
	er "github.com/vacate-dev/vacate/internal/evictionrequest"
)

// The evictor's side. vacate answers as the imperative evictor (the API
// fixes its name, er.Evictor): when its turn comes it queues the pod's
// eviction, says in its message what the eviction waits on, heartbeats
// while it waits, and reports completion once the pod is terminating.

// Messages of the evictor's responder status.
const (
	msgQueued     = "vacate-controller is evicting the pod through its eviction queue (PodDisruptionBudgets, rate limits)"
	msgTerminated = "the pod is terminating"
)

// evictorReport is the Eviction's status with the evictor's report, and
// whether there is one to write: the evictor has the turn and either the
// pod is terminating (its completion), or its message changed, or its last
// heartbeat is heartbeatEvery old.
func (r *Reconciler) evictorReport(ev *lifecyclev1alpha1.Eviction, pod *corev1.Pod, now time.Time, held string) (lifecyclev1alpha1.EvictionStatus, bool) {
	status := *ev.Status.DeepCopy()
	rs := active(&status, er.Evictor)
	if rs == nil || rs.CompletionTime != nil {
		return status, false
	}
	state := r.Evictions.State(pod.UID)
	if !pod.DeletionTimestamp.IsZero() || state.Evicted {
		completeEvictor(rs, now)
		return status, true
	}
	msg := evictorMessage(state)
	if w, ok := r.budgetWaits.Load(client.ObjectKeyFromObject(pod)); ok && w.(budgetWait).uid == pod.UID && !state.Pending {
		msg = w.(budgetWait).why
	}
	if held != "" && !state.Pending {
		msg = held
	}
	return status, heartbeat(rs, msg, now)
}

// evictorHeld says why the evictor must not queue the pod's eviction yet,
// "" when it may: the EvacuationProviders that protect the pod are not done
// with it (askProviders asks them: a pod that declares no responder of
// vacate's, or whose move was undone after vacate's turn, is asked here).
func (r *Reconciler) evictorHeld(ctx context.Context, ev *lifecyclev1alpha1.Eviction, pod *corev1.Pod) string {
	if st := r.Evictions.State(pod.UID); st.Pending || st.Evicted || !pod.DeletionTimestamp.IsZero() {
		return "" // queued already (MayEvict checks again before the call), or going: nothing to ask for it
	}
	node := &corev1.Node{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: pod.Spec.NodeName}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return "" // nothing to move off a node that is gone
		}
		return "vacate cannot read the pod's node: " + err.Error()
	}
	done, msgs := r.askProviders(ctx, ev, pod, node)
	if done {
		return ""
	}
	return "waiting for the EvacuationProviders before evicting the pod: " + strings.Join(msgs, "; ")
}

// completeEvictor records the evictor's turn Completed: the pod is going.
func completeEvictor(rs *lifecyclev1alpha1.ResponderStatus, now time.Time) {
	at := metav1.NewTime(now)
	if rs.StartTime != nil && at.Before(rs.StartTime) { // clocks a little apart
		at = *rs.StartTime
	}
	rs.CompletionTime, rs.Message = &at, ptr.To(msgTerminated)
}

// evictorStarted gives the evictor's first message as its turn comes.
func evictorStarted(status *lifecyclev1alpha1.EvictionStatus) {
	if rs := active(status, er.Evictor); rs != nil && rs.Message == nil {
		rs.Message = ptr.To(msgQueued)
	}
}

// evictorMessage says what the pod's eviction waits on.
func evictorMessage(state eviction.PodState) string {
	if !state.Refused {
		return msgQueued
	}
	ref := state.Refusal
	if ref.Message == "" {
		return fmt.Sprintf("vacate-controller's eviction of the pod was refused (%s) since %s; it tries again", ref.Result, ref.Since.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("vacate-controller's eviction of the pod was refused (%s: %s) since %s; it tries again", ref.Result, ref.Message, ref.Since.UTC().Format(time.RFC3339))
}

// untilDeadline is when the next pass must look: when the Active
// responder's heartbeat reaches er.HeartbeatDeadline (its turn then
// passes on), or heartbeatEvery from now if that is sooner.
func untilDeadline(status lifecyclev1alpha1.EvictionStatus, now time.Time) time.Duration {
	wait := heartbeatEvery
	for _, t := range status.TargetResponders {
		if t.State != lifecyclev1alpha1.ResponderStateActive {
			continue
		}
		for _, rs := range status.Responders {
			if rs.Name != t.Name {
				continue
			}
			last := ptr.Deref(rs.HeartbeatTime, ptr.Deref(rs.StartTime, metav1.NewTime(now)))
			if d := last.Add(er.HeartbeatDeadline).Sub(now) + time.Second; d < wait {
				wait = max(d, time.Second)
			}
		}
	}
	return wait
}
