package nodedrain

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/hook"
)

// hookRun is the drain's current run, as the hook protocol names it.
func hookRun(nd *v1alpha1.NodeDrain) hook.Run {
	return hook.Run{Drain: string(nd.UID), ID: nd.Status.RunID, Node: nd.Spec.NodeName, Mode: string(modeOf(nd))}
}

// hookTargets are the leaving pods whose HTTP hooks the policy allows, with
// their targets (or why the annotations cannot be used, or why the address
// is never called).
func (r *Reconciler) hookTargets(ctx context.Context, s *scope, pods []*corev1.Pod) ([]*corev1.Pod, []hook.Target, []error, error) {
	var outPods []*corev1.Pod
	var targets []hook.Target
	var errs []error
	if !s.policy.HTTPHooks {
		return nil, nil, nil, nil
	}
	run := hookRun(s.drain)
	for _, pod := range pods {
		if ok, err := r.hookAllowed(ctx, s.policy, pod); err != nil || !ok {
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

// callHooks runs the HTTP hooks of the leaving pods: each pod is held until
// its own hook answers Completed for this run. A pod is called only once
// status.hookCalls, as written, records it, so a cancel reaches every hook
// that may have accepted a POST, whatever happens to the controller. A pod
// whose hook address is refused is held with a blocker saying why and the
// way out. Conversations of pods no longer called are dropped.
func (r *Reconciler) callHooks(ctx context.Context, s *scope, leaving []*corev1.Pod, onNode map[types.UID]*corev1.Pod) ([]v1alpha1.HookStatus, int, int, error) {
	pods, targets, errs, err := r.hookTargets(ctx, s, leaving)
	if err != nil {
		return nil, 0, 0, err
	}
	st := &s.drain.Status
	if len(pods) > 0 && st.RunID == "" {
		st.RunID = string(uuid.NewUUID()) // a new run: its calls are made once this is written
	}
	calls := newHookCalls(st, onNode)
	talking := map[types.UID]bool{}
	var hooks []v1alpha1.HookStatus
	done := 0
	for i, pod := range pods {
		name := "pod/" + pod.Namespace + "/" + pod.Name
		h, reason := r.callHook(s, pod, targets[i], errs[i], calls, talking)
		h.Name = name
		if h.Phase == string(v1alpha1.EvacuationCompleted) {
			done++
			hooks = append(hooks, h)
			continue
		}
		// A hook is called from the drain's first pass after admission.
		if st.StartTime != nil && r.evacuationTimedOut(s, name, st.StartTime.Time) {
			h.Phase = v1alpha1.PhaseTimedOut
		}
		hooks = append(hooks, h)
		if _, held := s.evac.holding[pod.UID]; !held { // a provider's hold is shown first; both must finish
			s.evac.holding[pod.UID] = v1alpha1.Blocker{Pod: pod.Namespace + "/" + pod.Name, Reason: reason,
				Holder: "HTTP hook of pod " + pod.Namespace + "/" + pod.Name, Detail: h.Message, Since: metav1.NewTime(s.now)}
		}
	}
	st.HookCalls = calls.next
	r.Hooks.Retain(s.drain.Spec.NodeName, talking)
	return hooks, len(pods), done, nil
}

// callHook is one pod's hook in this pass: its status and, when it holds
// the pod, the blocker's reason.
func (r *Reconciler) callHook(s *scope, pod *corev1.Pod, t hook.Target, terr error, calls *hookCalls, talking map[types.UID]bool) (v1alpha1.HookStatus, string) {
	pending := string(v1alpha1.EvacuationPending)
	switch {
	case hook.IsRefused(terr):
		return v1alpha1.HookStatus{Phase: string(v1alpha1.EvacuationFailed), Message: truncate(terr.Error()+
			"; the pod stays, as its data may not have moved: fix the pod (or its annotation "+hook.AnnotationPort+
			"), or leave its namespace out of the policy's httpHooks, or let timeouts.evacuation end the drain", maxDetail)}, v1alpha1.BlockerHTTPHookRefused
	case terr != nil:
		return v1alpha1.HookStatus{Phase: pending, Message: truncate(terr.Error()+"; the pod stays until it is fixed", maxDetail)}, v1alpha1.BlockerHTTPHook
	case !calls.written[string(pod.UID)]:
		why := "recording the call before the first POST"
		if !calls.record(pod.UID) {
			why = fmt.Sprintf("waiting: %d hooks are being called (at most %d at once)", len(calls.next), v1alpha1.MaxHookCalls)
		}
		return v1alpha1.HookStatus{Phase: pending, Message: "HTTP hook " + t.URL() + ": " + why}, v1alpha1.BlockerHTTPHook
	}
	talking[pod.UID] = true
	res := r.Hooks.Evacuate(t)
	h := v1alpha1.HookStatus{Message: truncate("HTTP hook "+t.URL()+": "+res.Describe(), maxDetail)}
	switch {
	case res.Done():
		h.Phase = string(v1alpha1.EvacuationCompleted)
		if modeOf(s.drain) == v1alpha1.ModeDecommission {
			calls.completed(pod.UID)
		}
	case res.State == hook.Failed:
		h.Phase = string(v1alpha1.EvacuationFailed)
	case res.State == "":
		h.Phase = pending
	default:
		h.Phase = string(v1alpha1.EvacuationInProgress)
	}
	return h, v1alpha1.BlockerHTTPHook
}

// stillTheTarget is the prober's check before every call, against the
// informer's current view: the pod is there with the same UID, and the
// target's IP is still one of its addresses and one vacate calls. A pod
// gone, replaced or moved to another IP is not called: the IP may belong
// to another pod by now.
func (r *Reconciler) stillTheTarget(t hook.Target) error {
	ctx, cancel := context.WithTimeout(context.Background(), guardTimeout)
	defer cancel()
	pod := &corev1.Pod{}
	if err := r.Client.Get(ctx, t.Key, pod); err != nil {
		return fmt.Errorf("reading pod %s: %w", t.Name, err)
	}
	if pod.UID != t.Pod {
		return fmt.Errorf("pod %s is gone (another pod has its name)", t.Name)
	}
	return hook.CheckPod(pod, t.IP, r.AllowLoopbackHooks)
}
