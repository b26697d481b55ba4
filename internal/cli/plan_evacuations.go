package cli

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/hold"
	"github.com/vacate-dev/vacate/internal/hook"
	"github.com/vacate-dev/vacate/internal/policy"
	"github.com/vacate-dev/vacate/internal/providers"
)

// This file is the part of plan's decide step that concerns evacuations:
// which EvacuationProviders a drain asks and what their Evacuations would
// be (askProviders), whose HTTP hooks it calls (planHooks), and which pods
// each holds (planHolds). Like the rest of the decide step it reads
// nothing.

// askProviders lists the EvacuationProviders, asked or not and why, as
// the controller decides (internal/providers), and returns the node's
// Evacuations, by provider, as the drain's next pass leaves them: each
// provider it asks has the spec that pass writes (providers.Request; a
// changed spec is a new generation, not answered yet); one being deleted
// stays as it is until it is gone, and is asked again after.
func askProviders(np *NodePlan, nd *v1alpha1.NodeDrain, node *corev1.Node, leaving []*corev1.Pod, in *planInput,
	now time.Time) (map[string]*v1alpha1.Evacuation, error) {
	evs := map[string]*v1alpha1.Evacuation{} // the node's, by provider, as the controller reads them (those being deleted too)
	for i := range in.evacuations {
		if ev := &in.evacuations[i]; ev.Spec.NodeName == node.Name {
			evs[ev.Spec.Provider] = ev
		}
	}
	mode := nd.Mode()
	for _, p := range in.providers {
		pp := ProviderPlan{Name: p.Name, Stage: string(providers.Stage(p)), HeartbeatTimeoutSeconds: providers.Timeout(p).Seconds(), Pods: []string{}}
		for _, m := range p.Spec.Modes {
			pp.Modes = append(pp.Modes, string(m))
		}
		switch {
		case !p.DeletionTimestamp.IsZero():
			pp.Why = "being deleted: asked nothing new (an Evacuation it was asked for still holds its pods until it is Completed)"
		case !providers.TakesPart(p, mode):
			pp.Why = fmt.Sprintf("takes part only in %s drains", strings.Join(pp.Modes, " and "))
		}
		if !providers.Eligible(p, mode) {
			np.Providers = append(np.Providers, pp)
			continue
		}
		protected, err := providers.Protected(p, leaving, in.labelsOf)
		if err != nil {
			return nil, err
		}
		pp.Pods = podKeys(protected)
		have := evs[p.Name]
		deleting := have != nil && !have.DeletionTimestamp.IsZero()
		pp.Asked = providers.Asks(p, mode, len(protected), have != nil && !deleting && providers.AskedFor(have, nd.UID, node.UID))
		switch {
		case !pp.Asked:
			pp.Why = "protects none of the pods that leave the node"
		case len(protected) > 0:
			pp.Why = fmt.Sprintf("protects %d pod(s) that leave the node", len(protected))
		case mode == v1alpha1.ModeDecommission:
			pp.Why = "Decommission asks every provider that takes part, whether or not its pods are on the node"
		default:
			pp.Why = "asked already by this drain"
		}
		if deleting {
			// The controller has the provider cancel it, lets it go, then
			// asks again; what it recorded holds until then.
			pp.Why = fmt.Sprintf("its Evacuation %s is being deleted: the provider is asked to cancel it, then asked again; %s", have.Name, pp.Why)
		}
		if pp.Asked {
			pp.Evacuation = v1alpha1.EvacuationName(node.Name, p.Name)
			if !deleting {
				evs[p.Name] = nextEvacuation(nd, node, p, protected, have, now)
			}
		}
		np.Providers = append(np.Providers, pp)
	}
	return evs, nil
}

// nextEvacuation is the provider's Evacuation once the drain's next pass
// asked it: have with the spec that pass writes, a new generation if the
// spec changed, or a new one, created now, not answered yet.
func nextEvacuation(nd *v1alpha1.NodeDrain, node *corev1.Node, p *v1alpha1.EvacuationProvider, protected []*corev1.Pod, have *v1alpha1.Evacuation,
	now time.Time) *v1alpha1.Evacuation {
	spec := providers.Request(nd, node, p, protected, have)
	if have == nil {
		return &v1alpha1.Evacuation{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.EvacuationName(node.Name, p.Name), Generation: 1,
			CreationTimestamp: metav1.NewTime(now)}, Spec: spec}
	}
	next := have.DeepCopy()
	if !equality.Semantic.DeepEqual(have.Spec, spec) {
		next.Spec, next.Generation = spec, have.Generation+1
	}
	return next
}

// planHolds says which pods each provider and each of the node's
// Evacuations holds, from the model, and counts the evacuations the drain
// waits for before and after eviction (those of its Evacuations not done).
func planHolds(np *NodePlan, h *hold.Model, existing *v1alpha1.NodeDrain, node *corev1.Node, leaving []*corev1.Pod,
	onNode map[types.UID]*corev1.Pod, in *planInput) (before, after int) {
	heldBy := func(holders ...string) []*corev1.Pod {
		var out []*corev1.Pod
		for _, pod := range leaving {
			if slices.ContainsFunc(h.Holders(pod.UID), func(x string) bool { return slices.Contains(holders, x) }) {
				out = append(out, pod)
			}
		}
		return out
	}
	verdicts := map[string]hold.Verdict{} // by provider
	for _, v := range h.Evacuations() {
		verdicts[v.Evacuation.Spec.Provider] = v
		switch {
		case v.Done:
		case providers.StageOf(v.Evacuation) == v1alpha1.StageBeforeEviction:
			before++
		default:
			after++
		}
	}
	for i := range np.Providers {
		pp := &np.Providers[i]
		if !pp.Asked {
			continue
		}
		v, judged := verdicts[pp.Name]
		deleting := judged && !v.Evacuation.DeletionTimestamp.IsZero()
		held := heldBy("Evacuation "+pp.Evacuation, "EvacuationProvider "+pp.Name)
		pp.Holds = len(held) > 0
		if pp.Holds {
			pp.Pods = podKeys(held)
		}
		switch {
		case judged && !deleting && v.Done:
			pp.Why += "; its Evacuation " + v.Evacuation.Name + " is already Completed or released"
		case judged && !deleting && providers.StageOf(v.Evacuation) == v1alpha1.StageAfterEviction,
			(!judged || deleting) && pp.Stage == string(v1alpha1.StageAfterEviction):
			pp.Why += "; AfterEviction: its pods are evicted first, and the node is Drained only once its Evacuation Completed"
		case pp.Holds:
			pp.Why += fmt.Sprintf("; BeforeEviction: %d pod(s) are evicted only once its Evacuation Completed", len(held))
		default:
			pp.Why += "; BeforeEviction: it holds no pod, and the node is Drained only once its Evacuation Completed"
		}
	}
	for i := range in.evacuations {
		ev := &in.evacuations[i]
		if ev.Spec.NodeName != node.Name {
			continue
		}
		ep := EvacuationPlan{Name: ev.Name, Provider: ev.Spec.Provider, Stage: string(providers.StageOf(ev)), Mode: string(ev.Spec.Mode),
			Phase: string(ev.CurrentPhase()), Message: ev.Status.Message, CurrentDrain: existing != nil && providers.AskedFor(ev, existing.UID, node.UID),
			PodsOnNode: podKeys(providers.ProtectedOnNode(ev, onNode)), Deleting: !ev.DeletionTimestamp.IsZero(), Holds: len(heldBy("Evacuation "+ev.Name)) > 0}
		if rel := ev.Spec.Release; rel != nil {
			ep.Phase, ep.ReleasedBy = v1alpha1.PhaseReleased, rel.By
		}
		np.Evacuations = append(np.Evacuations, ep)
	}
	slices.SortFunc(np.Evacuations, func(a, b EvacuationPlan) int { return strings.Compare(a.Provider, b.Provider) })
	return before, after
}

func podKeys(pods []*corev1.Pod) []string {
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	sort.Strings(out)
	return out
}

// planHooks says, for each pod with the annotation vacate.dev/evacuate-port,
// whether the controller calls its HTTP hook before evicting it and where
// (policy.CallsHook, hook.TargetFor, as a controller run with
// allowLoopback calls them), or why not. It returns the hooks the
// drain calls as the model of holds sees them, how many the drain waits for
// (to answer Completed), and the pods held until something changes instead
// (an address vacate never calls, bad annotations).
func planHooks(np *NodePlan, existing *v1alpha1.NodeDrain, pol policy.Policy, mode v1alpha1.DrainMode, plan drain.Plan,
	originals map[types.UID]*corev1.Pod, labelsOf policy.NamespaceLabels, allowLoopback bool) (map[types.UID]hold.HookState, int, map[types.UID]bool, error) {
	completed := map[string]string{} // the hooks this drain's run saw Completed, by pod
	last := map[string]string{}      // what the others last said in this drain's run
	verified := map[string]*bool{}   // whether they said they verified their caller
	if existing != nil {
		for _, h := range existing.Status.Hooks {
			pod, ok := strings.CutPrefix(h.Name, "pod/")
			switch {
			case !ok:
				continue
			case h.Phase == string(v1alpha1.EvacuationCompleted):
				completed[pod] = h.Message
			case h.Message != "":
				last[pod] = h.Message
			}
			verified[pod] = h.CallerVerified
		}
	}
	run := hook.Run{Node: np.Node, Mode: string(mode)}
	states := map[types.UID]hold.HookState{}
	blocked := map[types.UID]bool{}
	waits := 0
	for _, d := range plan.Decisions {
		pod := originals[d.Pod.UID]
		if !hook.Wants(pod) {
			continue
		}
		hp := HookPlan{Pod: d.Key()}
		calls, whyNot, err := pol.CallsHook(pod, labelsOf)
		if err != nil {
			return nil, 0, nil, err
		}
		t, terr := hook.TargetFor(pod, run, allowLoopback)
		msg, done := completed[hp.Pod]
		switch {
		case d.Action == drain.Skip:
			hp.Why = fmt.Sprintf("not called: the pod stays (%s)", d.Reason)
		case !calls:
			hp.Why = "not called: " + whyNot
		case terr != nil:
			hp.Holds = true
			// Without an IP yet, it is called once it has one.
			blocked[pod.UID] = hook.IsRefused(terr) || pod.Status.PodIP != ""
			hp.Why = hold.HookErrorDetail(terr)
		case done:
			hp.Called, hp.URL = true, t.URL()
			hp.Why = "called at " + t.URL() + "; it answered Completed in this drain's run (" + msg + ")"
		default:
			hp.Called, hp.URL, hp.Holds = true, t.URL(), true
			hp.Why = "called at " + t.URL() + " before the pod's eviction (POST, then GET until it answers); the pod is evicted only once it answers Completed"
			if msg, ok := last[hp.Pod]; ok {
				hp.Why += "; in this drain's run so far: " + msg
			}
		}
		if hp.Called {
			hp.Caller = hookCaller(verified[hp.Pod])
			hp.Why += "; " + hp.Caller
		}
		if d.Action != drain.Skip && calls {
			states[pod.UID] = hold.HookState{Err: terr, Done: done && terr == nil, Detail: hp.Why}
		}
		if hp.Holds {
			if !blocked[pod.UID] {
				waits++ // a blocked one is no evacuation under way: the plan says it would not finish
			}
		}
		np.HTTPHooks = append(np.HTTPHooks, hp)
		np.Hooks = append(np.Hooks, "HTTP hook of "+hp.Pod+": "+hp.Why)
	}
	return states, waits, blocked, nil
}

// hookCaller says what a called hook is told of its caller, and what its
// answer in the drain's run said of it (nil: no answer yet).
func hookCaller(verified *bool) string {
	const told = "told vacate-controller's identity (a short-lived token of its service account, for this pod alone)"
	switch {
	case verified == nil:
		return told + "; whether it checks it is known once it answers"
	case *verified:
		return told + "; it verified it in this drain's run"
	default:
		return told + "; it did not say that it checks it: any pod that reaches it may call it (docs/evacuation.md, \"Who may call a hook\")"
	}
}
