package nodedrain

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/eviction"
)

// Events go where people look: `kubectl describe node` and `kubectl
// describe pod` list the events regarding the object, not those that only
// name it as related. So an event about the drain as a whole (it started,
// is blocked, ended, was undone) is recorded on the drain and on its node
// (drainEvent), each naming the other; an event about one pod (evicted,
// held, refused, surged) on the pod, naming the drain (podEvent).
//
// The recorder is client-go's events.k8s.io broadcaster: it folds the
// repeats of an event (same object, related object, reason, action and
// type) into one Event with a series, written again at most every few
// minutes, so a pod refused on every pass costs one write, not one per
// pass. A drain writes about one event per pod it evicts (see
// docs/performance.md for the share of its API requests).

// drainEvent records an event about the drain as a whole on the drain and,
// when known, on its node.
func (r *Reconciler) drainEvent(nd *v1alpha1.NodeDrain, node *corev1.Node, eventtype, reason, action, note string, args ...any) {
	note = clip(fmt.Sprintf(note, args...))
	if node == nil {
		r.Events.Eventf(bare(nd), nil, eventtype, reason, action, "%s", note)
		return
	}
	r.Events.Eventf(bare(nd), bare(node), eventtype, reason, action, "%s", note)
	r.nodeEvent(node, nd, eventtype, reason, action, "%s", note)
}

// nodeEvent records an event about the drain on its node only, when known.
func (r *Reconciler) nodeEvent(node *corev1.Node, nd *v1alpha1.NodeDrain, eventtype, reason, action, note string, args ...any) {
	if node != nil {
		r.Events.Eventf(bare(node), bare(nd), eventtype, reason, action, "%s", clip(fmt.Sprintf(note, args...)))
	}
}

// podEvent records an event about one pod of the drain, on the pod.
func (r *Reconciler) podEvent(nd *v1alpha1.NodeDrain, pod *corev1.Pod, eventtype, reason, action, note string, args ...any) {
	r.Events.Eventf(bare(pod), bare(nd), eventtype, reason, action, "%s", clip(fmt.Sprintf(note, args...)))
}

// bare is a copy of the object with only what names it (namespace, name,
// UID): the recorder's reference to it then carries no resourceVersion,
// which is part of the key the broadcaster folds repeats by; a drain's
// changes with every status write, and no repeat would ever be folded.
func bare(obj ctrl.Object) runtime.Object {
	meta := metav1.ObjectMeta{Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: obj.GetUID()}
	switch obj.(type) {
	case *corev1.Pod:
		return &corev1.Pod{ObjectMeta: meta}
	case *corev1.Node:
		return &corev1.Node{ObjectMeta: meta}
	case *v1alpha1.NodeDrain:
		return &v1alpha1.NodeDrain{ObjectMeta: meta}
	}
	return obj
}

// maxNote is the longest note the events.k8s.io API accepts, in bytes; a
// longer one is refused, and the recorder drops it.
const maxNote = 1024

// clip cuts a note to maxNote bytes, at a character's start.
func clip(note string) string {
	if len(note) <= maxNote {
		return note
	}
	cut := maxNote - len(v1alpha1.TruncateMark)
	for cut > 0 && !utf8.RuneStart(note[cut]) {
		cut--
	}
	return note[:cut] + v1alpha1.TruncateMark
}

// eventNode is the drain's node as the pass read it, for drainEvent; nil
// when the pass did not read it, or read a node of the same name that is
// not the drain's.
func (s *scope) eventNode() *corev1.Node {
	node := s.node
	if node == nil {
		node = s.found.node
	}
	if node == nil || s.drain.Status.NodeUID != "" && s.drain.Status.NodeUID != string(node.UID) {
		return nil
	}
	return node
}

// reportDrain makes the drain's turns that its stages do not record
// themselves events on the drain and its node, once the status recording
// them is written: the drain started (its first stage past admission), and
// pods began to block it.
func (r *Reconciler) reportDrain(s *scope, before *v1alpha1.NodeDrainStatus) {
	nd, node, after := s.drain, s.eventNode(), &s.drain.Status
	if node == nil {
		return
	}
	if notBegun(before.Phase) && !notBegun(after.Phase) && after.Phase != v1alpha1.PhaseDrained && after.Phase != v1alpha1.PhaseFailed {
		note := fmt.Sprintf("draining node %s (%s mode, policy %s): requested by %s", nd.Spec.NodeName, after.Mode, after.Policy, requesterNames(nd))
		s.afterWrite(func() {
			r.drainEvent(nd, node, corev1.EventTypeNormal, v1alpha1.EventDrainStarted, "Drain", "%s", note)
		})
	}
	was := meta.FindStatusCondition(before.Conditions, v1alpha1.ConditionBlocked)
	is := meta.FindStatusCondition(after.Conditions, v1alpha1.ConditionBlocked)
	if stuck(is, after.Blockers) && !stuck(was, before.Blockers) {
		note := is.Message
		s.afterWrite(func() {
			r.drainEvent(nd, node, corev1.EventTypeWarning, v1alpha1.EventDrainBlocked, "Drain", "%s", note)
		})
	}
}

// notBegun reports whether a drain in this phase has not begun yet: it
// waits for admission, or is idle.
func notBegun(phase v1alpha1.DrainPhase) bool {
	return phase == "" || phase == v1alpha1.PhasePending
}

// stuck reports whether the Blocked condition says pods block the drain,
// and more than their PDBs' pacing: a pod waiting for its PDB's budget is
// how every drain goes, not news for the node.
func stuck(c *metav1.Condition, blockers []v1alpha1.Blocker) bool {
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonBlocked {
		return false
	}
	return slices.ContainsFunc(blockers, func(b v1alpha1.Blocker) bool { return b.Reason != v1alpha1.BlockerPDB })
}

// requesterNames lists the drain's requesters, for people.
func requesterNames(nd *v1alpha1.NodeDrain) string {
	names := make([]string, 0, len(nd.Spec.Requesters))
	for _, q := range nd.Spec.Requesters {
		names = append(names, q.Name)
	}
	if len(names) == 0 {
		return "nobody"
	}
	return listSome(names, 3)
}

// reportEvicted records the eviction the API server accepted for a drain on
// the pod: the pod is gone or going, and its events are what `kubectl
// describe` and `kubectl get events` show of why.
func (r *Reconciler) reportEvicted(o eviction.Outcome) {
	nd := &v1alpha1.NodeDrain{}
	if err := r.Client.Get(context.Background(), types.NamespacedName{Name: o.Node}, nd); err != nil || nd.Spec.NodeName != o.Node {
		// The drains are named after their nodes; one gone already leaves
		// its pods' events unnamed rather than wrong.
		nd = nil
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: o.Pod.Namespace, Name: o.Pod.Name, UID: o.UID}}
	if nd == nil {
		r.Events.Eventf(pod, nil, corev1.EventTypeNormal, v1alpha1.EventEvicted, "Evict", "evicted by vacate: draining node %s", o.Node)
		return
	}
	// Who asked for the drain stays on the drain and its node: the pod's
	// namespace may be a tenant's.
	r.podEvent(nd, pod, corev1.EventTypeNormal, v1alpha1.EventEvicted, "Evict",
		"evicted by vacate: NodeDrain %s drains node %s (%s mode)", nd.Name, o.Node, nd.Mode())
}

// holdNote says why the drain holds a pod back, for its event.
func holdNote(nd *v1alpha1.NodeDrain, b v1alpha1.Blocker) string {
	why := b.Reason
	if b.Holder != "" {
		why += ", " + b.Holder
	}
	return fmt.Sprintf("not evicted yet (NodeDrain %s, %s): %s", nd.Name, why, b.Detail)
}

// podWarning records a Warning about one pod on the pod and on the drain:
// rare, and what a person describing the drain must see too (a pod
// force-deleted, a replacement that failed or was left, a pod evicted
// before its endpoints caught up).
func (r *Reconciler) podWarning(nd *v1alpha1.NodeDrain, pod *corev1.Pod, reason, action, note string, args ...any) {
	r.Events.Eventf(nd, pod, corev1.EventTypeWarning, reason, action, note, args...)
	r.podEvent(nd, pod, corev1.EventTypeWarning, reason, action, note, args...)
}

// recordPodEvents records the events about pods that the pass queued
// (scope.podEvent), once its status is written.
func (r *Reconciler) recordPodEvents(s *scope) {
	for _, e := range s.podEvents {
		if e.blocker != "" {
			r.noticed.tell(s.drain.Spec.NodeName, e.pod.UID, e.blocker)
		}
		if e.onDrain {
			r.podWarning(e.drain, e.pod, e.reason, e.action, "%s", e.note)
		} else {
			r.podEvent(e.drain, e.pod, e.eventtype, e.reason, e.action, "%s", e.note)
		}
	}
}

// noticed remembers, per node, the pods whose hold or refusal was an event,
// and for which blocker: a pod is told once, however many passes see it,
// and again only once that blocker went away and came back (or the
// controller restarted). The drain's status lists only the first
// MaxBlockers pods, so it cannot say which were told.
type noticed struct {
	mu     sync.Mutex
	byNode map[string]map[types.UID]string
}

// told reports whether the pod was told of this blocker.
func (n *noticed) told(node string, pod types.UID, blocker string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.byNode[node][pod] == blocker
}

// tell records that the pod was told of this blocker.
func (n *noticed) tell(node string, pod types.UID, blocker string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.byNode == nil {
		n.byNode = map[string]map[types.UID]string{}
	}
	if n.byNode[node] == nil {
		n.byNode[node] = map[types.UID]string{}
	}
	n.byNode[node][pod] = blocker
}

// keep forgets what the node's pods were told unless they still have that
// blocker (current: every blocked pod's blocker, by UID).
func (n *noticed) keep(node string, current map[types.UID]string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for pod, blocker := range n.byNode[node] {
		if current[pod] != blocker {
			delete(n.byNode[node], pod)
		}
	}
}

// forget drops the node's record: its drain ended, failed or was undone.
func (n *noticed) forget(node string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.byNode, node)
}
