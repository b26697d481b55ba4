// Package hold is the one model of what holds a pod a drain would evict:
// whether it may be evicted now and, if not, why. The NodeDrain
// controller's pass, the guard before every eviction call, and 'vacate
// plan' (on the Evacuations the next pass would write) all ask it, so they
// cannot disagree; status.blockers, which 'vacate explain' and the metrics
// read, are its answers.
package hold

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/hook"
	"github.com/vacate-dev/vacate/internal/providers"
)

// noSooner is the StaleIn of a verdict that nothing but a change turns
// stale: the caller's own period applies.
const noSooner = time.Duration(1<<63 - 1)

// BlockerUndoing is the reason of the hold of a drain being undone. Only
// the guard meets it (an undone drain's pass runs undo, which writes no
// blockers), so it is not one of status.blockers' reasons.
const BlockerUndoing = "Undoing"

// Model answers, for each pod a drain would evict, whether it may be
// evicted now and, if not, why, computed from plain data. A pod is held
// when
//   - the drain is being undone (every pod);
//   - an Evacuation this drain asked for this node records it, is
//     BeforeEviction, and is neither Completed for its current generation
//     nor released (one being deleted holds until it is gone);
//   - a provider that takes part in the drain's mode, is not being deleted
//     and is BeforeEviction selects it, but no Evacuation of this drain
//     records it yet;
//   - its HTTP hook, which the drain's policy calls, has not answered
//     Completed for this run, or is at an address vacate never calls.
//
// The first that applies is the pod's blocker, in that order; Holders
// lists every one that applies.
type Model struct {
	// evacuations are the drain's own Evacuations (asked by this drain for
	// this node), by provider name, each with its verdict.
	evacuations []Verdict
	// held are the held pods, by UID, with the blocker that says why.
	held map[types.UID]v1alpha1.Blocker
	// holders are, for each held pod, every holder, in the order above.
	holders map[types.UID][]string
	// hooked and hooksDone count the pods whose HTTP hook the run calls,
	// and those whose hook answered Completed.
	hooked, hooksDone int
}

// Input is what a Model is computed from, read by the caller: the pass
// from its scope, the guard from the cache right before an eviction call,
// 'vacate plan' from the API server.
type Input struct {
	Drain *v1alpha1.NodeDrain
	Node  *corev1.Node
	// OnNode are the node's pods, by UID: an Evacuation holds those of its
	// recorded pods that are still there.
	OnNode map[types.UID]*corev1.Pod
	// Leaving are the pods the drain moves: only these can be held by a
	// provider that was not asked for them yet, or by their HTTP hook.
	Leaving []*corev1.Pod
	// Evacuations are the Evacuations of the node's name, by provider;
	// another drain's or another node's are ignored.
	Evacuations map[string]*v1alpha1.Evacuation
	// Providers are the registered EvacuationProviders.
	Providers []*v1alpha1.EvacuationProvider
	// Selects reports whether a provider's selectors pick a pod
	// (providers.Selects).
	Selects func(*v1alpha1.EvacuationProvider, *corev1.Pod) (bool, error)
	// Hooks are the leaving pods whose HTTP hook the drain's policy calls,
	// by UID, with where their conversation stands.
	Hooks map[types.UID]HookState
	Now   time.Time
}

// HookState is a pod's HTTP hook as the model sees it.
type HookState struct {
	// Err: the pod's hook annotations cannot be used, or its address is
	// one vacate never calls (hook.IsRefused).
	Err error
	// Done: the hook answered Completed for this run.
	Done bool
	// Detail says where the conversation stands, for people.
	Detail string
}

// HookErrorDetail is the detail of a pod held because its hook cannot be
// called: the error, and the way out.
func HookErrorDetail(err error) string {
	if hook.IsRefused(err) {
		return v1alpha1.Truncate(err.Error()+"; the pod stays, as its data may not have moved: fix the pod (or its annotation "+hook.AnnotationPort+
			"), or leave its namespace out of the policy's httpHooks, or let timeouts.evacuation end the drain", v1alpha1.MaxMessage)
	}
	return v1alpha1.Truncate(err.Error()+"; the pod stays until it is fixed", v1alpha1.MaxMessage)
}

// Verdict is one of the drain's Evacuations as the model judges it.
type Verdict struct {
	Evacuation *v1alpha1.Evacuation
	// Done: Completed for its current generation, or released.
	Done bool
	// Why says how it stands, for people.
	Why string
	// StaleIn is how soon it may turn stale (or, being deleted, be gone)
	// if nothing changes.
	StaleIn time.Duration
	// Protects are its recorded pods still on the node.
	Protects []*corev1.Pod
}

// Compute computes the model for the given pods.
func Compute(in Input) (*Model, error) {
	h := &Model{held: map[types.UID]v1alpha1.Blocker{}, holders: map[types.UID][]string{}}
	if !in.Drain.Requested() {
		for _, pod := range in.OnNode {
			h.hold(pod, BlockerUndoing, "NodeDrain "+in.Drain.Name, "the drain is being undone", in.Now)
		}
		for _, pod := range in.Leaving {
			h.hold(pod, BlockerUndoing, "NodeDrain "+in.Drain.Name, "the drain is being undone", in.Now)
		}
		return h, nil
	}
	byName := map[string]*v1alpha1.EvacuationProvider{}
	for _, p := range in.Providers {
		byName[p.Name] = p
	}
	recorded := map[string]map[types.UID]bool{} // by provider: the pods its Evacuation for this drain records
	for _, name := range slices.Sorted(maps.Keys(in.Evacuations)) {
		ev := in.Evacuations[name]
		if !providers.AskedFor(ev, in.Drain.UID, in.Node.UID) {
			continue // another drain's or another node's, left behind; not this drain's to judge
		}
		recorded[name] = map[types.UID]bool{}
		for _, pp := range ev.Spec.ProtectedPods {
			recorded[name][types.UID(pp.UID)] = true
		}
		v := judgeEvacuation(ev, byName[ev.Spec.Provider], in.OnNode, in.Now)
		h.evacuations = append(h.evacuations, v)
		if v.Done || providers.StageOf(ev) != v1alpha1.StageBeforeEviction {
			continue
		}
		for _, pod := range v.Protects {
			h.holdSince(pod, v1alpha1.BlockerEvacuation, "Evacuation "+ev.Name, v1alpha1.Truncate(v.Why, v1alpha1.MaxMessage), ev.CreationTimestamp)
		}
	}
	if err := h.notAskedYet(in, recorded); err != nil {
		return nil, err
	}
	for _, pod := range in.Leaving {
		st, ok := in.Hooks[pod.UID]
		if !ok {
			continue
		}
		h.hooked++
		reason := v1alpha1.BlockerHTTPHook
		switch {
		case hook.IsRefused(st.Err):
			reason = v1alpha1.BlockerHTTPHookRefused
		case st.Err == nil && st.Done:
			h.hooksDone++
			continue
		}
		h.hold(pod, reason, "HTTP hook of pod "+pod.Namespace+"/"+pod.Name, st.Detail, in.Now)
	}
	return h, nil
}

// notAskedYet holds the leaving pods that a provider which takes part in
// the drain selects but whose Evacuation for this drain does not record
// them yet: the drain asks it first.
func (h *Model) notAskedYet(in Input, recorded map[string]map[types.UID]bool) error {
	ps := slices.SortedFunc(slices.Values(in.Providers), func(a, b *v1alpha1.EvacuationProvider) int { return cmp.Compare(a.Name, b.Name) })
	for _, p := range ps {
		if !providers.Eligible(p, in.Drain.Mode()) || providers.Stage(p) != v1alpha1.StageBeforeEviction {
			continue
		}
		for _, pod := range in.Leaving {
			if recorded[p.Name][pod.UID] {
				continue // its Evacuation's own state decides
			}
			ok, err := in.Selects(p, pod)
			if err != nil {
				return err
			}
			if ok {
				h.hold(pod, v1alpha1.BlockerEvacuation, "EvacuationProvider "+p.Name,
					"it protects the pod and has not been asked for it yet: the drain asks it first", in.Now)
			}
		}
	}
	return nil
}

// hold records a holder of the pod; the first is its blocker.
func (h *Model) hold(pod *corev1.Pod, reason, holder, detail string, now time.Time) {
	h.holdSince(pod, reason, holder, detail, metav1.NewTime(now))
}

func (h *Model) holdSince(pod *corev1.Pod, reason, holder, detail string, since metav1.Time) {
	if slices.Contains(h.holders[pod.UID], holder) {
		return
	}
	h.holders[pod.UID] = append(h.holders[pod.UID], holder)
	if _, held := h.held[pod.UID]; held {
		return
	}
	h.held[pod.UID] = v1alpha1.Blocker{Pod: pod.Namespace + "/" + pod.Name, Reason: reason, Holder: holder, Detail: detail, Since: since}
}

// Of says whether the pod is held, and by what.
func (h *Model) Of(pod *corev1.Pod) (v1alpha1.Blocker, bool) {
	if h == nil {
		return v1alpha1.Blocker{}, false
	}
	b, ok := h.held[pod.UID]
	return b, ok
}

// Holders are every holder of the pod ("Evacuation <name>",
// "EvacuationProvider <name>", "HTTP hook of pod <namespace>/<name>"), the
// blocker's first; none when it is not held.
func (h *Model) Holders(uid types.UID) []string {
	if h == nil {
		return nil
	}
	return h.holders[uid]
}

// Evacuations are the drain's own Evacuations (asked by this drain for this
// node), by provider name, each with its verdict.
func (h *Model) Evacuations() []Verdict {
	if h == nil {
		return nil
	}
	return h.evacuations
}

// Any reports whether any pod is held.
func (h *Model) Any() bool { return h != nil && len(h.held) > 0 }

// Held are the held pods' UIDs, in no order.
func (h *Model) Held() []types.UID {
	if h == nil {
		return nil
	}
	return slices.Collect(maps.Keys(h.held))
}

// BeforeEviction counts the evacuations the pods wait for (the drain's
// BeforeEviction Evacuations and the HTTP hooks it calls) and those of them
// that are done.
func (h *Model) BeforeEviction() (done, total int) {
	done, total = h.hooksDone, h.hooked
	for _, v := range h.evacuations {
		if providers.StageOf(v.Evacuation) != v1alpha1.StageBeforeEviction {
			continue
		}
		total++
		if v.Done {
			done++
		}
	}
	return done, total
}

// judgeEvacuation judges one of the drain's Evacuations: released counts as done;
// one being deleted (and not released) is not done until it is gone; a
// provider deleted (or being deleted) while its evacuation is unfinished is
// said so, with the way out.
func judgeEvacuation(ev *v1alpha1.Evacuation, p *v1alpha1.EvacuationProvider, onNode map[types.UID]*corev1.Pod, now time.Time) Verdict {
	v := Verdict{Evacuation: ev, Protects: providers.ProtectedOnNode(ev, onNode)}
	if rel := ev.Spec.Release; rel != nil {
		v.Done, v.Why, v.StaleIn = true, fmt.Sprintf("released by %s at %s", rel.By, rel.Time.UTC().Format(time.RFC3339)), noSooner
		if rel.Reason != "" {
			v.Why += ": " + rel.Reason
		}
		return v
	}
	v.Done, v.Why, v.StaleIn = Judge(ev, p, now)
	if !v.Done && (p == nil || !p.DeletionTimestamp.IsZero()) {
		v.Why = fmt.Sprintf("provider %s deleted while evacuating %d pod(s) on node %s; they stay until it finishes, "+
			"or until someone runs 'vacate release %s --provider %s' (last word: %s)", ev.Spec.Provider, len(v.Protects), ev.Spec.NodeName,
			ev.Spec.NodeName, ev.Spec.Provider, v.Why)
	}
	if !ev.DeletionTimestamp.IsZero() {
		v.Done, v.Why, v.StaleIn = false, fmt.Sprintf("Evacuation %s is being deleted: vacate asks provider %s to cancel it, then asks again; "+
			"its pods stay until then", ev.Name, ev.Spec.Provider), min(v.StaleIn, 2*time.Second)
	}
	return v
}

// Judge says whether an evacuation counts as done, why not, and how soon
// it turns stale if nothing changes. Only Completed for the current spec
// is done; silence past the provider's timeout is reported as such.
func Judge(ev *v1alpha1.Evacuation, p *v1alpha1.EvacuationProvider, now time.Time) (done bool, why string, staleIn time.Duration) {
	timeout := providers.Timeout(p)
	st := ev.Status
	if ev.CurrentPhase() == v1alpha1.EvacuationCompleted {
		return true, "Completed: " + st.Message, noSooner
	}
	silent := now.Sub(ev.LastHeard())
	if !ev.Answered() {
		if silent >= timeout {
			return false, fmt.Sprintf("provider %s has not taken up the request for %s (timeout %s): is it running?", ev.Spec.Provider, silent.Round(time.Second), timeout), noSooner
		}
		return false, fmt.Sprintf("waiting for provider %s to take up the request", ev.Spec.Provider), timeout - silent
	}
	if silent >= timeout {
		return false, fmt.Sprintf("provider %s is stale: no heartbeat for %s (timeout %s); its last word: %s %s", ev.Spec.Provider,
			silent.Round(time.Second), timeout, st.Phase, st.Message), noSooner
	}
	if st.Phase == v1alpha1.EvacuationFailed {
		return false, fmt.Sprintf("provider %s failed: %s", ev.Spec.Provider, st.Message), timeout - silent
	}
	msg := fmt.Sprintf("%s: %s", st.Phase, st.Message)
	if st.Remaining > 0 {
		msg += fmt.Sprintf(" (%d remaining)", st.Remaining)
	}
	return false, msg, timeout - silent
}
