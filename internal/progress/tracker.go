// Package progress follows drains for people: it keeps what was seen of each
// NodeDrain (phase, counts, blockers met and for how long) and renders it as a
// live view for terminals, as stable lines for scripts, and as a summary and
// report at the end. The Tracker and the views are pure: callers feed them
// NodeDrains and the time. The Follower feeds them from a watch.
package progress

import (
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// Node is what the tracker knows of one node's drain.
type Node struct {
	Name string
	// Seen is false until a NodeDrain for the node was observed.
	Seen    bool
	Phase   v1alpha1.DrainPhase
	Evicted int32
	Total   int32
	Blocked int32
	// Blockers are the current blockers, as the NodeDrain reports them.
	Blockers []v1alpha1.Blocker
	// Hooks are the drain's evacuations (providers' and HTTP hooks).
	Hooks []v1alpha1.HookStatus
	// Waiting says why a drain that has not started waits (Admitted=False,
	// node not found), or why it failed.
	Waiting string
	// Start and End come from the NodeDrain's status.
	Start, End time.Time
	// Met are the blockers met during the drain, by holder (or reason).
	Met map[string]*Met
	// Cancelled is set when the NodeDrain was deleted or lost its last
	// requester before it ended.
	Cancelled bool
}

// Met is one kind of blocker met during a drain.
type Met struct {
	// Key is the holder, such as "PodDisruptionBudget shop/db", or the
	// reason when no object holds the pod (such as "Unmanaged").
	Key string
	// Pods are the pods it held.
	Pods map[string]bool
	// First and Last are when it was first seen holding a pod, and last
	// seen holding one (or, once gone, the observation that found it gone).
	First, Last time.Time
	// Holding is set while the drain's status still lists it.
	Holding bool
}

// Held is how long the blocker held the drain up: until now while it still
// holds, else until it was last seen.
func (m *Met) Held(now time.Time) time.Duration {
	if m.Holding && now.After(m.Last) {
		return now.Sub(m.First)
	}
	return m.Last.Sub(m.First)
}

// Ended reports whether the drain reached an end: Drained, Failed or
// cancelled.
func (n *Node) Ended() bool {
	return n.Cancelled || n.Phase == v1alpha1.PhaseDrained || n.Phase == v1alpha1.PhaseFailed
}

// Result is Drained, Failed, Cancelled, or the phase of a running drain.
func (n *Node) Result() string {
	if n.Cancelled {
		return "Cancelled"
	}
	return string(n.Phase)
}

// Took is how long the drain ran: from its start to its end, or to now.
func (n *Node) Took(now time.Time) time.Duration {
	if n.Start.IsZero() {
		return 0
	}
	if !n.End.IsZero() {
		return n.End.Sub(n.Start)
	}
	return now.Sub(n.Start)
}

// MetKeys returns the blockers met, sorted.
func (n *Node) MetKeys() []string {
	keys := make([]string, 0, len(n.Met))
	for k := range n.Met {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Tracker follows the drains of a set of nodes.
type Tracker struct {
	start time.Time
	nodes map[string]*Node
	order []string
}

// NewTracker follows the named nodes, in that order.
func NewTracker(nodes []string, now time.Time) *Tracker {
	t := &Tracker{start: now, nodes: map[string]*Node{}}
	for _, n := range nodes {
		t.add(n)
	}
	return t
}

func (t *Tracker) add(name string) *Node {
	if n, ok := t.nodes[name]; ok {
		return n
	}
	n := &Node{Name: name, Met: map[string]*Met{}}
	t.nodes[name] = n
	t.order = append(t.order, name)
	return n
}

// Nodes returns the followed nodes in order.
func (t *Tracker) Nodes() []*Node {
	out := make([]*Node, 0, len(t.order))
	for _, name := range t.order {
		out = append(out, t.nodes[name])
	}
	return out
}

// Node returns the named node, or nil when it is not followed.
func (t *Tracker) Node(name string) *Node { return t.nodes[name] }

// Elapsed is the time since the tracker started.
func (t *Tracker) Elapsed(now time.Time) time.Duration { return now.Sub(t.start) }

// Observe records a NodeDrain as seen at now. Drains of nodes the tracker
// does not follow are ignored.
func (t *Tracker) Observe(nd *v1alpha1.NodeDrain, now time.Time) {
	n, ok := t.nodes[nd.Spec.NodeName]
	if !ok {
		return
	}
	st := nd.Status
	n.Seen = true
	n.Cancelled = !nd.Requested()
	n.Phase = st.Phase
	if n.Phase == "" {
		n.Phase = v1alpha1.PhasePending
	}
	n.Evicted, n.Total, n.Blocked = st.Evicted, st.Total, st.Blocked
	n.Blockers = append([]v1alpha1.Blocker(nil), st.Blockers...)
	n.Hooks = append([]v1alpha1.HookStatus(nil), st.Hooks...)
	n.Start, n.End = time.Time{}, time.Time{}
	if st.StartTime != nil {
		n.Start = st.StartTime.Time
	}
	if st.CompletionTime != nil {
		n.End = st.CompletionTime.Time
	}
	n.Waiting = waitingReason(nd)
	wasHolding := map[*Met]bool{}
	for _, m := range n.Met {
		wasHolding[m] = m.Holding
		m.Holding = false
	}
	defer func() {
		// A blocker that held at the last observation and is gone now held
		// until now, as far as anyone saw: the same "until now" that Held
		// gives while it holds (without it, a drain whose status did not
		// change while the blocker held would report only until the
		// blocker's last listing).
		for m, was := range wasHolding {
			if was && !m.Holding {
				m.Last = now
			}
		}
	}()
	for _, b := range st.Blockers {
		key := b.Holder
		if key == "" {
			key = b.Reason
		}
		m, ok := n.Met[key]
		if !ok {
			m = &Met{Key: key, Pods: map[string]bool{}, First: b.Since.Time}
			if m.First.IsZero() || m.First.After(now) {
				m.First = now
			}
			n.Met[key] = m
		}
		m.Pods[b.Pod] = true
		m.Last, m.Holding = now, true
	}
}

// Forget records that the node's NodeDrain was deleted.
func (t *Tracker) Forget(node string) {
	if n, ok := t.nodes[node]; ok && n.Seen {
		n.Cancelled = true
	}
}

// Gone records that a listing of the NodeDrains lacks the node's: deleted
// before or while it was followed. A drain that ended stays as it ended.
func (t *Tracker) Gone(node string) {
	if n, ok := t.nodes[node]; ok && !(n.Seen && n.Ended()) {
		n.Seen, n.Cancelled = true, true
	}
}

// waitingReason says why a drain does not progress: the message of a false
// Admitted or Cordoned condition (policy or node missing), or of Drained
// when it failed.
func waitingReason(nd *v1alpha1.NodeDrain) string {
	if nd.Status.Phase == v1alpha1.PhaseFailed {
		if c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionDrained); c != nil {
			return c.Message
		}
		return "failed"
	}
	if nd.Status.Phase != "" && nd.Status.Phase != v1alpha1.PhasePending {
		return ""
	}
	if len(nd.Spec.Requesters) == 0 {
		return "no requester: the drain is idle"
	}
	if c := nd.AdmissionHold(); c != nil { // this run's: the last run's says nothing of it
		return c.Message
	}
	if c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionCordoned); c != nil && c.Status != "True" {
		return c.Message
	}
	return "waiting for the controller"
}

// Done reports whether every followed drain ended.
func (t *Tracker) Done() bool {
	for _, n := range t.nodes {
		if !n.Ended() {
			return false
		}
	}
	return true
}

// Counts returns how many drains are drained, failed (or cancelled), and
// still running.
func (t *Tracker) Counts() (drained, failed, running int) {
	for _, n := range t.nodes {
		switch {
		case n.Cancelled, n.Phase == v1alpha1.PhaseFailed:
			failed++
		case n.Phase == v1alpha1.PhaseDrained:
			drained++
		default:
			running++
		}
	}
	return drained, failed, running
}

// ETA estimates how long the running drains still take, from the rate at
// which they evicted so far. ok is false when there is no estimate: nothing
// evicted yet, or a drain is blocked and not moving.
func (t *Tracker) ETA(now time.Time) (eta time.Duration, ok bool) {
	any := false
	for _, n := range t.nodes {
		if n.Ended() {
			continue
		}
		left := n.Total - n.Evicted
		if n.Blocked > 0 && left <= n.Blocked {
			return 0, false // only blocked pods are left: no rate predicts them
		}
		took := n.Took(now)
		if n.Evicted == 0 || took <= 0 {
			return 0, false
		}
		per := took / time.Duration(n.Evicted)
		if e := per * time.Duration(left); e > eta {
			eta = e
		}
		any = true
	}
	return eta, any
}
