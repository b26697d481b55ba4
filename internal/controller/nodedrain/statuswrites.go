package nodedrain

import (
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	// own are, per drain, the resourceVersions of its progress-only status
	// writes whose update events have not come yet, oldest first, at most
	// maxOwn (ownProgress).
	own map[string][]string
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

// maxOwn bounds the progress writes of one drain whose events are awaited:
// an event that never comes (the watch restarted and listed a later
// version) is forgotten after maxOwn more writes.
const maxOwn = 8

// wroteProgress records that a progress-only write of the drain's status
// produced this resourceVersion. The writes before it stay recorded: under
// load the watch delivers an update more than progressInterval after it was
// written, after the next write.
func (w *statusWrites) wroteProgress(name, resourceVersion string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.own == nil {
		w.own = map[string][]string{}
	}
	own := append(w.own[name], resourceVersion)
	if len(own) > maxOwn {
		own = own[len(own)-maxOwn:]
	}
	w.own[name] = own
}

// ownProgress says whether the drain's update is this process's own
// progress-only write, and nothing else: the drain's pass needs no pass
// after it (nothing it plans with changed; a change of anything else has
// another resourceVersion, and every input has its own watch). Progress is
// written up to once a second per drain, so a long drain would otherwise
// run an extra pass a second for nothing (at 10,000 pods, 0.7 per eviction).
func (w *statusWrites) ownProgress(o client.Object) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	own := w.own[o.GetName()]
	i := slices.Index(own, o.GetResourceVersion())
	if i < 0 {
		return false
	}
	// The watch delivers a drain's versions in order: the earlier writes'
	// events came already, or never will.
	if own = own[i+1:]; len(own) == 0 {
		delete(w.own, o.GetName())
	} else {
		w.own[o.GetName()] = own
	}
	return true
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
