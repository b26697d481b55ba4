package nodedrain

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/hook"
)

// cancelHooks asks the hooks that took part in this run to undo (DELETE)
// and reports whether every one acknowledged. The hooks are those
// status.hookCalls records, so a hook that accepted a POST gets its DELETE
// even after a controller restart; a Decommission evacuation that
// Completed is kept, and so is everything when the node goes away. A pod
// that has left cannot be asked, and holds nothing.
func (r *Reconciler) cancelHooks(ctx context.Context, s *scope, u undoing) (bool, error) {
	st := &s.drain.Status
	if u.nodeGoing || len(st.HookCalls) == 0 {
		return true, nil // the node goes away: what the apps moved stays moved
	}
	pods, err := r.podsOnNode(ctx, s.drain.Spec.NodeName)
	if err != nil {
		return false, err
	}
	byUID := map[string]*corev1.Pod{}
	for _, pod := range pods {
		byUID[string(pod.UID)] = pod
	}
	run := hookRun(s.drain)
	var left []v1alpha1.HookCall
	var hooks []v1alpha1.HookStatus
	for _, c := range st.HookCalls {
		pod, ok := byUID[c.UID]
		if !ok || c.Completed || !hook.Wants(pod) { // called under the policy of then: cancelled whatever it says now
			continue
		}
		t, err := hook.TargetFor(pod, run, r.AllowLoopbackHooks)
		if err != nil || r.Hooks.NeverReached(t) {
			continue // it cannot be called, or never got the POST
		}
		res, acknowledged := r.Hooks.Cancel(t)
		if acknowledged {
			r.Hooks.Forget(pod.UID)
			continue
		}
		left = append(left, c)
		hooks = append(hooks, v1alpha1.HookStatus{Name: "pod/" + pod.Namespace + "/" + pod.Name, Phase: string(v1alpha1.EvacuationInProgress),
			Message: truncate("cancelling: "+res.Describe(), maxDetail)})
	}
	st.HookCalls = left
	if len(hooks) > 0 && u.expired {
		names := make([]string, 0, len(hooks))
		for _, h := range hooks {
			names = append(names, h.Name)
		}
		r.Events.Eventf(s.drain, nil, corev1.EventTypeWarning, v1alpha1.EventCancelTimeout, "Cancel",
			"HTTP hook(s) of %s did not acknowledge the cancel within %s (timeouts.cancel); giving the node back without them",
			listSome(names, 10), u.limit)
		st.HookCalls = nil
		return true, nil
	}
	if len(hooks) > 0 {
		st.Hooks, st.HooksOmitted = boundHooks(hooks)
		s.found.cancelling = fmt.Sprintf("waiting for %d HTTP hook(s) to acknowledge the cancel before restoring the node (at most %s, timeouts.cancel)", len(hooks), u.limit)
		return false, nil
	}
	return true, nil
}
