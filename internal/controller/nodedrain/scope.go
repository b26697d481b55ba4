package nodedrain

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/policy"
)

// scope is what one pass knows about one drain.
type scope struct {
	drain  *v1alpha1.NodeDrain
	node   *corev1.Node
	policy policy.Policy
	now    time.Time
	// since is the PDB waiters' counter when the pass started (budget.go).
	since uint64
	log   klog.Logger
	// evac is what the evacuate stage learned, for evict and finalize.
	evac evacState
	// plan is the pass's plan of the node's pods (see Reconciler.plan);
	// honoured are the namespaces whose pods' surge annotation counts
	// (honouredNamespaces), read with it.
	plan     *drain.Plan
	honoured map[string]bool
	// steps are the pods the planner evicts with their next steps
	// (nextSteps), for the stages that take them.
	steps []podStep
	// gated are the blockers of endpoint-aware pods out of service that
	// wait for their endpoints (endpoints.go).
	gated map[types.UID]v1alpha1.Blocker
	// surge is the drain's replacements, read once per pass, and surging
	// the blockers of pods that wait on theirs (surge.go).
	surge   *surgePass
	surging map[types.UID]v1alpha1.Blocker
	// requested are the blockers of the pods asked for with EvictionRequests
	// (requests.go): what their Evictions say; requestWaits the PDBs whose
	// budgets the pods not asked for yet wait on.
	requested    map[types.UID]v1alpha1.Blocker
	requestWaits []string
	// withdraw: the drain failed or is held; its EvictionRequests are
	// withdrawn when the pass ends (Reconcile).
	withdraw bool
	// timeLeft bounds the wait of an evicting drain for its next pass: the
	// resync, or its timeout or deadline if sooner (timeouts).
	timeLeft time.Duration
	// replacing is how many of the drain's replacements are not handed
	// over or removed yet (replacements).
	replacing int
	// recheck, when set, bounds the wait for the next pass (an
	// endpoint-aware pod's settle time or timeout).
	recheck time.Duration
	// stop ends the pass after the current stage, with nothing to requeue:
	// the drain reached an end (Failed) and waits for a change.
	stop bool
	// found is what the pass found, for the status it writes (status.go).
	found facts
	// onWritten are the side effects of a transition (events, metrics): they
	// happen only once the status recording it was written. A pass working
	// from a stale cache loses the optimistic lock and has no side effects.
	onWritten []func()
	// podEvents are the events about pods that the pass queued (podEvent):
	// recorded, as onWritten, once the status is written.
	podEvents []podNote
}

// afterWrite defers a transition's side effect until the status is written.
func (s *scope) afterWrite(f func()) { s.onWritten = append(s.onWritten, f) }

// podEvent queues an event about one of the drain's pods, on the pod and
// naming the drain (events.go), recorded once the status is written. An
// event of a blocker of the pod names it, and is recorded once per pod and
// blocker (noticed).
func (s *scope) podEvent(nd *v1alpha1.NodeDrain, pod *corev1.Pod, eventtype, reason, action, blocker, note string) {
	s.podEvents = append(s.podEvents, podNote{drain: nd, pod: pod, eventtype: eventtype, reason: reason, action: action, blocker: blocker, note: note})
}

// podWarning queues a Warning about one of the drain's pods that goes on
// the drain too (events.go: podWarning), recorded once the status is
// written.
func (s *scope) podWarning(nd *v1alpha1.NodeDrain, pod *corev1.Pod, reason, action, note string) {
	s.podEvents = append(s.podEvents, podNote{drain: nd, pod: pod, eventtype: corev1.EventTypeWarning, reason: reason, action: action, note: note, onDrain: true})
}

// podNote is an event about one pod that a pass queued.
type podNote struct {
	drain                           *v1alpha1.NodeDrain
	pod                             *corev1.Pod
	eventtype, reason, action, note string
	blocker                         string
	onDrain                         bool
}

type stage func(context.Context, *scope) (reconcile.Result, error)

// recheckIn asks for the drain's next pass within d at the latest.
func (s *scope) recheckIn(d time.Duration) {
	d = max(d, 100*time.Millisecond)
	if s.recheck == 0 || d < s.recheck {
		s.recheck = d
	}
}
