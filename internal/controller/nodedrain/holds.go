package nodedrain

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
	"github.com/vacate-dev/vacate/internal/controller/requeue"
	"github.com/vacate-dev/vacate/internal/hook"
	"github.com/vacate-dev/vacate/internal/providers"
)

// blockerUndoing is the reason of the hold of a drain being undone. Only
// the guard meets it (an undone drain's pass runs undo, which writes no
// blockers), so it is not one of status.blockers' reasons.
const blockerUndoing = "Undoing"

// holds answers, for each pod a drain would evict, whether it may be
// evicted now and, if not, why: one model, computed from plain data, that
// the evacuate stage and the guard before every eviction call (mayEvict)
// both ask, so the two cannot disagree. A pod is held when
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
// The first that applies is the pod's blocker, in that order.
type holds struct {
	// evacuations are the drain's own Evacuations (asked by this drain for
	// this node), by provider name, each with its verdict.
	evacuations []evacVerdict
	// held are the held pods, by UID, with the blocker that says why.
	held map[types.UID]v1alpha1.Blocker
	// hooked and hooksDone count the pods whose HTTP hook the run calls,
	// and those whose hook answered Completed.
	hooked, hooksDone int
}

// holdInput is what holds are computed from, read by the caller: the pass
// from its scope, the guard from the cache right before an eviction call.
type holdInput struct {
	drain *v1alpha1.NodeDrain
	node  *corev1.Node
	// onNode are the node's pods, by UID: an Evacuation holds those of its
	// recorded pods that are still there.
	onNode map[types.UID]*corev1.Pod
	// leaving are the pods the drain moves: only these can be held by a
	// provider that was not asked for them yet, or by their HTTP hook.
	leaving []*corev1.Pod
	// evacuations are the Evacuations of the node's name, by provider
	// (evacuationsOf); another drain's or another node's are ignored.
	evacuations map[string]*v1alpha1.Evacuation
	// providers are the registered EvacuationProviders.
	providers []*v1alpha1.EvacuationProvider
	// selects reports whether a provider's selectors pick a pod
	// (providers.Selects).
	selects func(*v1alpha1.EvacuationProvider, *corev1.Pod) (bool, error)
	// hooks are the leaving pods whose HTTP hook the drain's policy calls,
	// by UID, with where their conversation stands.
	hooks map[types.UID]hookState
	now   time.Time
}

// hookState is a pod's HTTP hook as holds see it.
type hookState struct {
	// err: the pod's hook annotations cannot be used, or its address is
	// one vacate never calls (hook.IsRefused).
	err error
	// done: the hook answered Completed for this run.
	done bool
	// detail says where the conversation stands, for people.
	detail string
}

// evacVerdict is one of the drain's Evacuations as holds judge it.
type evacVerdict struct {
	ev *v1alpha1.Evacuation
	// done: Completed for its current generation, or released.
	done bool
	// why says how it stands, for people.
	why string
	// staleIn is how soon it may turn stale (or, being deleted, be gone)
	// if nothing changes.
	staleIn time.Duration
	// protects are its recorded pods still on the node.
	protects []*corev1.Pod
}

// holdsOf computes the holds of the given pods.
func holdsOf(in holdInput) (*holds, error) {
	h := &holds{held: map[types.UID]v1alpha1.Blocker{}}
	if !in.drain.Requested() {
		for _, pod := range in.onNode {
			h.hold(pod, blockerUndoing, "NodeDrain "+in.drain.Name, "the drain is being undone", in.now)
		}
		for _, pod := range in.leaving {
			h.hold(pod, blockerUndoing, "NodeDrain "+in.drain.Name, "the drain is being undone", in.now)
		}
		return h, nil
	}
	byName := map[string]*v1alpha1.EvacuationProvider{}
	for _, p := range in.providers {
		byName[p.Name] = p
	}
	recorded := map[string]map[types.UID]bool{} // by provider: the pods its Evacuation for this drain records
	for _, name := range slices.Sorted(maps.Keys(in.evacuations)) {
		ev := in.evacuations[name]
		if !providers.AskedFor(ev, in.drain.UID, in.node.UID) {
			continue // another drain's or another node's, left behind; not this drain's to judge
		}
		recorded[name] = map[types.UID]bool{}
		for _, pp := range ev.Spec.ProtectedPods {
			recorded[name][types.UID(pp.UID)] = true
		}
		v := verdict(ev, byName[ev.Spec.Provider], in.onNode, in.now)
		h.evacuations = append(h.evacuations, v)
		if v.done || providers.StageOf(ev) != v1alpha1.StageBeforeEviction {
			continue
		}
		for _, pod := range v.protects {
			h.holdSince(pod, v1alpha1.BlockerEvacuation, "Evacuation "+ev.Name, truncate(v.why, maxDetail), ev.CreationTimestamp)
		}
	}
	if err := h.notAskedYet(in, recorded); err != nil {
		return nil, err
	}
	for _, pod := range in.leaving {
		st, ok := in.hooks[pod.UID]
		if !ok {
			continue
		}
		h.hooked++
		reason := v1alpha1.BlockerHTTPHook
		switch {
		case hook.IsRefused(st.err):
			reason = v1alpha1.BlockerHTTPHookRefused
		case st.err == nil && st.done:
			h.hooksDone++
			continue
		}
		h.hold(pod, reason, "HTTP hook of pod "+pod.Namespace+"/"+pod.Name, st.detail, in.now)
	}
	return h, nil
}

// notAskedYet holds the leaving pods that a provider which takes part in
// the drain selects but whose Evacuation for this drain does not record
// them yet: the drain asks it first.
func (h *holds) notAskedYet(in holdInput, recorded map[string]map[types.UID]bool) error {
	ps := slices.SortedFunc(slices.Values(in.providers), func(a, b *v1alpha1.EvacuationProvider) int { return cmp.Compare(a.Name, b.Name) })
	for _, p := range ps {
		if !providers.Eligible(p, modeOf(in.drain)) || providers.Stage(p) != v1alpha1.StageBeforeEviction {
			continue
		}
		for _, pod := range in.leaving {
			if _, held := h.held[pod.UID]; held || recorded[p.Name][pod.UID] {
				continue // held already, or its Evacuation's own state decides
			}
			ok, err := in.selects(p, pod)
			if err != nil {
				return err
			}
			if ok {
				h.hold(pod, v1alpha1.BlockerEvacuation, "EvacuationProvider "+p.Name,
					"it protects the pod and has not been asked for it yet: the drain asks it first", in.now)
			}
		}
	}
	return nil
}

// hold records a pod's blocker, unless an earlier rule holds it already.
func (h *holds) hold(pod *corev1.Pod, reason, holder, detail string, now time.Time) {
	h.holdSince(pod, reason, holder, detail, metav1.NewTime(now))
}

func (h *holds) holdSince(pod *corev1.Pod, reason, holder, detail string, since metav1.Time) {
	if _, held := h.held[pod.UID]; held {
		return
	}
	h.held[pod.UID] = v1alpha1.Blocker{Pod: pod.Namespace + "/" + pod.Name, Reason: reason, Holder: holder, Detail: detail, Since: since}
}

// Of says whether the pod is held, and by what.
func (h *holds) Of(pod *corev1.Pod) (v1alpha1.Blocker, bool) {
	if h == nil {
		return v1alpha1.Blocker{}, false
	}
	b, ok := h.held[pod.UID]
	return b, ok
}

// Any reports whether any pod is held.
func (h *holds) Any() bool { return h != nil && len(h.held) > 0 }

// Held are the held pods' UIDs, in no order.
func (h *holds) Held() []types.UID {
	if h == nil {
		return nil
	}
	return slices.Collect(maps.Keys(h.held))
}

// BeforeEviction counts the evacuations the pods wait for (the drain's
// BeforeEviction Evacuations and the HTTP hooks it calls) and those of them
// that are done.
func (h *holds) BeforeEviction() (done, total int) {
	done, total = h.hooksDone, h.hooked
	for _, v := range h.evacuations {
		if providers.StageOf(v.ev) != v1alpha1.StageBeforeEviction {
			continue
		}
		total++
		if v.done {
			done++
		}
	}
	return done, total
}

// verdict judges one of the drain's Evacuations: released counts as done;
// one being deleted (and not released) is not done until it is gone; a
// provider deleted (or being deleted) while its evacuation is unfinished is
// said so, with the way out.
func verdict(ev *v1alpha1.Evacuation, p *v1alpha1.EvacuationProvider, onNode map[types.UID]*corev1.Pod, now time.Time) evacVerdict {
	v := evacVerdict{ev: ev, protects: providers.ProtectedOnNode(ev, onNode)}
	if rel := ev.Spec.Release; rel != nil {
		v.done, v.why, v.staleIn = true, fmt.Sprintf("released by %s at %s", rel.By, rel.Time.UTC().Format(time.RFC3339)), requeue.Resync
		if rel.Reason != "" {
			v.why += ": " + rel.Reason
		}
		return v
	}
	v.done, v.why, v.staleIn = judge(ev, p, now)
	if !v.done && (p == nil || !p.DeletionTimestamp.IsZero()) {
		v.why = fmt.Sprintf("provider %s deleted while evacuating %d pod(s) on node %s; they stay until it finishes, "+
			"or until someone runs 'vacate release %s --provider %s' (last word: %s)", ev.Spec.Provider, len(v.protects), ev.Spec.NodeName,
			ev.Spec.NodeName, ev.Spec.Provider, v.why)
	}
	if !ev.DeletionTimestamp.IsZero() {
		v.done, v.why, v.staleIn = false, fmt.Sprintf("Evacuation %s is being deleted: vacate asks provider %s to cancel it, then asks again; "+
			"its pods stay until then", ev.Name, ev.Spec.Provider), min(v.staleIn, 2*time.Second)
	}
	return v
}

// judge says whether an evacuation counts as done, why not, and how soon
// it turns stale if nothing changes. Only Completed for the current spec
// is done; silence past the provider's timeout is reported as such.
func judge(ev *v1alpha1.Evacuation, p *v1alpha1.EvacuationProvider, now time.Time) (done bool, why string, staleIn time.Duration) {
	timeout := providers.Timeout(p)
	st := ev.Status
	if ev.CurrentPhase() == v1alpha1.EvacuationCompleted {
		return true, "Completed: " + st.Message, requeue.Resync
	}
	silent := now.Sub(ev.LastHeard())
	if !ev.Answered() {
		if silent >= timeout {
			return false, fmt.Sprintf("provider %s has not taken up the request for %s (timeout %s): is it running?", ev.Spec.Provider, silent.Round(time.Second), timeout), requeue.Resync
		}
		return false, fmt.Sprintf("waiting for provider %s to take up the request", ev.Spec.Provider), timeout - silent
	}
	if silent >= timeout {
		return false, fmt.Sprintf("provider %s is stale: no heartbeat for %s (timeout %s); its last word: %s %s", ev.Spec.Provider,
			silent.Round(time.Second), timeout, st.Phase, st.Message), requeue.Resync
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
