package nodedrain

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	er "github.com/vacate-dev/vacate/internal/evictionrequest"
	"github.com/vacate-dev/vacate/internal/hold"
	"github.com/vacate-dev/vacate/internal/hook"
	"github.com/vacate-dev/vacate/internal/policy"
)

// hookRun is the drain's current run, as the hook protocol names it.
func hookRun(nd *v1alpha1.NodeDrain) hook.Run {
	return hook.Run{Drain: string(nd.UID), ID: nd.Status.RunID, Node: nd.Spec.NodeName, Mode: string(nd.Mode())}
}

// hookTargets are the pods, of those given, whose HTTP hooks the policy
// calls, with their targets for the drain's run (or why the annotations
// cannot be used, or why the address is never called). A pod that declares
// vacate's responder, where vacate coordinates EvictionRequests, is asked
// for with one: the coordinator calls its hook in that responder's turn.
func (r *Reconciler) hookTargets(ctx context.Context, pol policy.Policy, nd *v1alpha1.NodeDrain, pods []*corev1.Pod) ([]*corev1.Pod, []hook.Target, []error, error) {
	var outPods []*corev1.Pod
	var targets []hook.Target
	var errs []error
	if !pol.HTTPHooks {
		return nil, nil, nil, nil
	}
	run := hookRun(nd)
	for _, pod := range pods {
		if r.Requests && r.Responds && er.DeclaresResponder(pod, er.VacateResponder) {
			continue // the coordinator calls it, in its responder's turn
		}
		if ok, err := r.hookAllowed(ctx, pol, pod); err != nil || !ok {
			if err != nil {
				return nil, nil, nil, err
			}
			continue
		}
		t, err := hook.TargetFor(pod, run, r.AllowLoopbackHooks)
		outPods, targets, errs = append(outPods, pod), append(targets, t), append(errs, err)
	}
	return outPods, targets, errs, nil
}

// hookAllowed reports whether the policy calls the pod's HTTP hook (see
// policy.CallsHook, which vacate plan shares).
func (r *Reconciler) hookAllowed(ctx context.Context, p policy.Policy, pod *corev1.Pod) (bool, error) {
	ok, _, err := p.CallsHook(pod, r.namespaceLabels(ctx))
	return ok, err
}

// hookCalls is what a pass knows of the pods whose hooks the run calls.
type hookCalls struct {
	// written: the pods status.hookCalls recorded when the pass read the
	// drain; only these are called.
	written map[string]bool
	// next is the list this pass writes.
	next []v1alpha1.HookCall
}

// newHookCalls keeps the recorded calls of pods still on the node.
func newHookCalls(st *v1alpha1.NodeDrainStatus, onNode map[types.UID]*corev1.Pod) *hookCalls {
	hc := &hookCalls{written: map[string]bool{}}
	for _, c := range st.HookCalls {
		hc.written[c.UID] = true
		if _, ok := onNode[types.UID(c.UID)]; ok {
			hc.next = append(hc.next, c)
		}
	}
	return hc
}

// record adds a pod to the list, if there is room; it reports whether the
// pod is (now) recorded.
func (hc *hookCalls) record(uid types.UID) bool {
	if slices.ContainsFunc(hc.next, func(c v1alpha1.HookCall) bool { return c.UID == string(uid) }) {
		return true
	}
	if len(hc.next) >= v1alpha1.MaxHookCalls {
		return false
	}
	hc.next = append(hc.next, v1alpha1.HookCall{UID: string(uid)})
	return true
}

// completed marks a pod's Decommission evacuation Completed: a cancel keeps it.
func (hc *hookCalls) completed(uid types.UID) {
	for i := range hc.next {
		if hc.next[i].UID == string(uid) {
			hc.next[i].Completed = true
		}
	}
}

// callHooks runs the HTTP hooks of the leaving pods whose hooks the
// policy calls, and says where each stands: its status, and its state for
// holds (a pod is held until its own hook answers Completed for this run).
// A pod is called only once status.hookCalls, as written, records it, so a
// cancel reaches every hook that may have accepted a POST, whatever happens
// to the controller. Conversations of pods no longer called are dropped.
func (r *Reconciler) callHooks(ctx context.Context, s *scope, leaving []*corev1.Pod, onNode map[types.UID]*corev1.Pod) ([]v1alpha1.HookStatus, map[types.UID]hold.HookState, error) {
	pods, targets, errs, err := r.hookTargets(ctx, s.policy, s.drain, leaving)
	if err != nil {
		return nil, nil, err
	}
	st := &s.drain.Status
	if len(pods) > 0 && st.RunID == "" {
		st.RunID = string(uuid.NewUUID()) // a new run: its calls are made once this is written
	}
	calls := newHookCalls(st, onNode)
	talking := map[types.UID]bool{}
	var hooks []v1alpha1.HookStatus
	states := map[types.UID]hold.HookState{}
	for i, pod := range pods {
		h := r.callHook(s, pod, targets[i], errs[i], calls, talking)
		h.Name = "pod/" + pod.Namespace + "/" + pod.Name
		hooks = append(hooks, h)
		states[pod.UID] = hold.HookState{Err: errs[i], Done: h.Phase == string(v1alpha1.EvacuationCompleted), Detail: h.Message}
	}
	st.HookCalls = calls.next
	r.Hooks.Retain(s.drain.Spec.NodeName, talking)
	return hooks, states, nil
}

// callHook is one pod's hook in this pass: its status.
func (r *Reconciler) callHook(s *scope, pod *corev1.Pod, t hook.Target, terr error, calls *hookCalls, talking map[types.UID]bool) v1alpha1.HookStatus {
	pending := string(v1alpha1.EvacuationPending)
	switch {
	case hook.IsRefused(terr):
		return v1alpha1.HookStatus{Phase: string(v1alpha1.EvacuationFailed), Message: hold.HookErrorDetail(terr)}
	case terr != nil:
		return v1alpha1.HookStatus{Phase: pending, Message: hold.HookErrorDetail(terr)}
	case !calls.written[string(pod.UID)]:
		why := "recording the call before the first POST"
		if !calls.record(pod.UID) {
			why = fmt.Sprintf("waiting: %d hooks are being called (at most %d at once)", len(calls.next), v1alpha1.MaxHookCalls)
		}
		return v1alpha1.HookStatus{Phase: pending, Message: "HTTP hook " + t.URL() + ": " + why}
	}
	talking[pod.UID] = true
	res := r.Hooks.Evacuate(t)
	h := v1alpha1.HookStatus{Message: truncate("HTTP hook "+t.URL()+": "+res.Describe(), maxDetail)}
	if res.State != "" {
		h.CallerVerified = new(res.Verified != "")
	}
	switch {
	case res.Done():
		h.Phase = string(v1alpha1.EvacuationCompleted)
		if s.drain.Mode() == v1alpha1.ModeDecommission {
			calls.completed(pod.UID)
		}
	case res.State == hook.Failed:
		h.Phase = string(v1alpha1.EvacuationFailed)
	case res.State == "":
		h.Phase = pending
	default:
		h.Phase = string(v1alpha1.EvacuationInProgress)
	}
	return h
}

// stillTheTarget is the prober's check before every call, against the
// informer's current view (hook.StillTheTarget).
func (r *Reconciler) stillTheTarget(t hook.Target) error {
	ctx, cancel := context.WithTimeout(context.Background(), guardTimeout)
	defer cancel()
	return hook.StillTheTarget(ctx, r.Client, t, r.AllowLoopbackHooks)
}
