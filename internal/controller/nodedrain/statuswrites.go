package nodedrain

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// progressInterval is the least time between two status writes of a drain
// when the later one changes only its progress: the counts, and the
// condition messages that carry them. A drain emptying its node at tens of
// pods a second would otherwise write its status several times per pod
// (each eviction, each pod terminating, each pod gone). Any other change
// (a phase, a condition's status or reason, a blocker, an admission) is
// written at once; progress held back is written by a pass no later than
// the interval after the last write (holdBack).
const progressInterval = time.Second

// statusWrites remembers when each drain's status was last written, by
// this process, in real time (not the reconciler's clock, which tests may
// stop: the interval is about the API server's load).
type statusWrites struct {
	mu   sync.Mutex
	last map[types.UID]time.Time
	// flush are, per drain, the timers that wake a pass to write progress
	// held back (holdBack).
	flush map[types.UID]*time.Timer
}

// holdBack arranges a pass of the drain after wait, to write the progress
// held back now, unless one is arranged already; a write before then
// cancels it. (A RequeueAfter could not be cancelled: the pass it queued
// came even when an event's pass had written the progress meanwhile, about
// one pass a second per running drain.)
func (w *statusWrites) holdBack(uid types.UID, wait time.Duration, wake func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.flush == nil {
		w.flush = map[types.UID]*time.Timer{}
	}
	if _, ok := w.flush[uid]; ok {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(wait, func() {
		w.mu.Lock()
		if w.flush[uid] == t {
			delete(w.flush, uid)
		}
		w.mu.Unlock()
		wake()
	})
	w.flush[uid] = t
}

// progressUpdate says whether a drain's update changed only its progress
// (progressOnly) and nothing else of the object: no pass needs to follow
// it, since nothing a pass plans with changed, and the pass recomputes the
// progress from the cluster. These are the controller's own progress
// writes, up to one a second per drain (at 10,000 pods, 0.7 passes per
// eviction when each woke one). They are told by what they change, not by
// remembering their resourceVersions: the watch delivered most of them
// before the write that made them had returned. Any change of the spec,
// the metadata (finalizers, deletion, labels, annotations) or another part
// of the status passes.
func progressUpdate(e event.UpdateEvent) bool {
	o, okOld := e.ObjectOld.(*v1alpha1.NodeDrain)
	n, okNew := e.ObjectNew.(*v1alpha1.NodeDrain)
	if !okOld || !okNew {
		return false
	}
	om, nm := o.ObjectMeta, n.ObjectMeta
	om.ResourceVersion, nm.ResourceVersion = "", ""
	om.ManagedFields, nm.ManagedFields = nil, nil
	return equality.Semantic.DeepEqual(om, nm) && equality.Semantic.DeepEqual(o.Spec, n.Spec) && progressOnly(&o.Status, &n.Status)
}

// wait is how long the drain's progress-only change must wait (0: write).
func (w *statusWrites) wait(uid types.UID, now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if at, ok := w.last[uid]; ok && now.Sub(at) < progressInterval {
		return progressInterval - now.Sub(at)
	}
	return 0
}

// wrote records a write of the drain's status, and forgets the writes that
// no longer hold anything back.
func (w *statusWrites) wrote(uid types.UID, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last == nil {
		w.last = map[types.UID]time.Time{}
	}
	for k, at := range w.last {
		if now.Sub(at) >= progressInterval {
			delete(w.last, k)
		}
	}
	w.last[uid] = now
	if t, ok := w.flush[uid]; ok {
		t.Stop()
		delete(w.flush, uid)
	}
}

// progressOnly reports whether after differs from before only in the
// drain's progress: the counts, the messages of conditions whose status and
// reason stay, and which pods wait for a PodDisruptionBudget (the plan
// holds them back while their PDB allows no disruption; which ones, and
// whether that makes the drain Blocked, changes with every eviction a PDB
// lets through). Blockers of any other kind are not progress.
func progressOnly(before, after *v1alpha1.NodeDrainStatus) bool {
	b, a := withoutPDBWaits(before), withoutPDBWaits(after)
	a.Total, a.Evicted, a.Remaining, a.Progress = b.Total, b.Evicted, b.Remaining, b.Progress
	a.Blocked, a.BlockersOmitted = b.Blocked, b.BlockersOmitted
	onlyPDBs := len(a.Blockers) == 0 && len(b.Blockers) == 0
	for i := range a.Conditions {
		c := &a.Conditions[i]
		old := meta.FindStatusCondition(b.Conditions, c.Type)
		switch {
		case old == nil:
		case c.Type == v1alpha1.ConditionBlocked && onlyPDBs:
			*c = *old
		case old.Status == c.Status && old.Reason == c.Reason:
			c.Message, c.LastTransitionTime, c.ObservedGeneration = old.Message, old.LastTransitionTime, old.ObservedGeneration
		}
	}
	return equality.Semantic.DeepEqual(*b, *a)
}

// withoutPDBWaits is a copy of the status without its PodDisruptionBudget
// blockers.
func withoutPDBWaits(st *v1alpha1.NodeDrainStatus) *v1alpha1.NodeDrainStatus {
	out := st.DeepCopy()
	out.Blockers = nil
	for _, b := range st.Blockers {
		if b.Reason != v1alpha1.BlockerPDB {
			out.Blockers = append(out.Blockers, b)
		}
	}
	return out
}
