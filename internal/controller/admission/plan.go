package admission

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/requeue"
	"github.com/vacate-dev/vacate/internal/requests"
	"github.com/vacate-dev/vacate/internal/schedule"
)

// This file is a pass's decision, pure over what queue.go read: which
// waiting drains wait for a maintenance window (gate), which for the rest
// of their batch, and which internal/schedule admits, with the messages
// their verdicts carry and when the queue needs its next pass.

// maxBatch bounds a batch that keeps growing: a drain waits at most this
// many batch windows after its own request.
const maxBatch = 5

// verdict is what a pass decided for one waiting drain.
type verdict struct {
	schedule.Verdict
	// gated: it waits for a maintenance window (or a readable schedule),
	// with its node schedulable meanwhile.
	gated bool
}

// plan is a pass's decisions for the waiting drains of a queue.
type plan struct {
	verdicts map[types.UID]verdict
	// order is the admitted drains in the order they are admitted.
	order []types.UID
	// why adds to a drain's admission message (a window it skipped).
	why map[types.UID]string
	// wake is when the queue needs its next pass without an event.
	wake time.Duration
	// skipped are the drains of complete batches that skip the batch
	// window (batch.go).
	skipped map[types.UID]bool
	// complete are the drains of complete batches, by their batch.
	complete map[types.UID]batchKey
}

func (p *plan) admits() bool { return len(p.order) > 0 }

// only keeps the verdicts of these drains: a drain the confirming read
// found but the pass did not cordon is decided by the next pass, and so
// are the drains that skip the batch window, when there is such a drain:
// it may be of their batch, which is cordoned whole before any of it
// starts.
func (p *plan) only(ms []*member) *plan {
	keep := map[types.UID]bool{}
	for _, m := range ms {
		keep[m.drain.UID] = true
	}
	for uid := range p.verdicts {
		if !keep[uid] {
			for skipped := range p.skipped {
				keep[skipped] = false
			}
			break
		}
	}
	for uid := range p.verdicts {
		if !keep[uid] {
			delete(p.verdicts, uid)
		}
	}
	p.order = slices.DeleteFunc(p.order, func(uid types.UID) bool { return !keep[uid] })
	return p
}

// plan decides, purely from what the pass read: which waiting drains wait
// for a window, which for their batch, and which the scheduler admits.
func (q *queue) plan() *plan {
	p := &plan{verdicts: map[types.UID]verdict{}, why: map[types.UID]string{}, wake: requeue.Resync, skipped: map[types.UID]bool{}}
	adm := q.policy.Admission
	var eligible []*member
	for _, m := range q.waiting {
		v, ok := q.gate(m, p)
		if !ok {
			p.verdicts[m.drain.UID] = v
			continue
		}
		eligible = append(eligible, m)
	}
	if closes := adm.Windows.Closes(q.now); !closes.IsZero() && len(eligible) > 0 {
		p.wake = min(p.wake, closes.Sub(q.now)) // queued drains give their nodes back then
	}
	newest := time.Time{}
	for _, m := range eligible {
		if t := requestTime(m.drain, q.now); t.After(newest) {
			newest = t
		}
	}
	// A batch its requester declared complete (batch.go) does not wait for
	// the window, unless a drain outside such batches is still gathering
	// its own: then it waits with it, as it would without its batch, and
	// never takes a slot before a drain requested earlier.
	complete, gathering := completeBatches(append(append([]*member(nil), q.admitted...), q.waiting...)), false
	p.complete = complete
	left := map[types.UID]time.Duration{}
	for _, m := range eligible {
		left[m.drain.UID] = min(newest.Add(adm.BatchWindow).Sub(q.now), requestTime(m.drain, q.now).Add(maxBatch*adm.BatchWindow).Sub(q.now))
		if _, inBatch := complete[m.drain.UID]; left[m.drain.UID] > 0 && !inBatch {
			gathering = true
		}
	}
	var ready []*member
	for _, m := range eligible {
		left := left[m.drain.UID]
		if _, inBatch := complete[m.drain.UID]; left > 0 && inBatch && !gathering {
			p.why[m.drain.UID] = "its batch complete: the batch window skipped"
			p.skipped[m.drain.UID] = true
			left = 0
		}
		if left > 0 {
			p.verdicts[m.drain.UID] = verdict{Verdict: schedule.Verdict{Node: m.node.Name, Reason: v1alpha1.ReasonWaitingForBatch,
				Message: fmt.Sprintf("gathering the drains requested with it, to cordon them all before any eviction: "+
					"the batch closes %s after the last request (batchWindow), at most %s after its own", adm.BatchWindow, maxBatch*adm.BatchWindow)}}
			p.wake = min(p.wake, left)
			continue
		}
		ready = append(ready, m)
	}
	if len(ready) == 0 {
		return p
	}
	drains := make([]schedule.Drain, 0, len(q.admitted)+len(ready))
	byNode := map[string]*member{}
	for _, m := range q.admitted {
		drains = append(drains, q.toSchedule(m))
	}
	for _, m := range ready {
		drains = append(drains, q.toSchedule(m))
		byNode[m.node.Name] = m
	}
	running := len(q.admitted)
	for _, v := range schedule.Admit(drains, q.pdbs, q.limits) {
		m := byNode[v.Node]
		if m == nil {
			continue
		}
		if v.Admit {
			running++
			v.Message = fmt.Sprintf("admitted by %s: %d of at most %d drains running", q.describe(m, p), running, q.limits.MaxParallel)
			p.order = append(p.order, m.drain.UID)
		}
		p.verdicts[m.drain.UID] = verdict{Verdict: v}
	}
	return p
}

// gate checks the policy's schedule: no drain starts, or is even cordoned,
// outside its maintenance windows or while the schedule cannot be read.
// Node deletion does not wait for a window (a deleted node cannot wait for
// Sunday): a drain whose node is being deleted, or that the delete trigger
// requests, skips the schedule, and so does a drain that ended and runs
// again; its admission message says so.
func (q *queue) gate(m *member, p *plan) (verdict, bool) {
	adm, v := q.policy.Admission, verdict{Verdict: schedule.Verdict{Node: m.node.Name}, gated: true}
	switch {
	case !m.node.DeletionTimestamp.IsZero() || requests.Index(m.drain, v1alpha1.RequesterDelete) >= 0:
		if adm.ScheduleErr != nil || !adm.Windows.Open(q.now) {
			p.why[m.drain.UID] = "its maintenance windows skipped: the node is being deleted"
		}
		return verdict{}, true
	case m.drain.Status.Run != nil && m.drain.Status.Run.Reason != "":
		// A drain that ran and runs again goes on with what it started
		// (its node stays cordoned), as a running drain does outside its
		// windows.
		if adm.ScheduleErr != nil || !adm.Windows.Open(q.now) {
			p.why[m.drain.UID] = "its maintenance windows skipped: it ran before and runs again (" + m.drain.Status.Run.Reason + ")"
		}
		return verdict{}, true
	case adm.ScheduleErr != nil:
		v.Reason = schedule.InvalidSchedule
		v.Message = fmt.Sprintf("%s: %v; no drain is admitted until it is fixed", q.policy.Describe(), adm.ScheduleErr)
	case !adm.Windows.Open(q.now):
		next := adm.Windows.Next(q.now)
		p.wake = min(p.wake, next.Sub(q.now))
		v.Reason = schedule.OutsideWindow
		v.Message = fmt.Sprintf("outside the maintenance windows of %s: %s; the next opens %s (in %s); vacate leaves the node schedulable until then",
			q.policy.Describe(), adm.Windows, next.In(adm.Windows.Location()).Format("Mon 2006-01-02 15:04 MST"), next.Sub(q.now).Round(time.Second))
	default:
		return verdict{}, true
	}
	return v, false
}

// describe names the policy in an admission message, with what it skipped.
func (q *queue) describe(m *member, p *plan) string {
	pol := q.policy
	if why := p.why[m.drain.UID]; why != "" {
		pol.Why = strings.TrimPrefix(pol.Why+"; ", "; ") + why
	}
	return pol.Describe()
}

// toSchedule describes a member for the scheduler.
func (q *queue) toSchedule(m *member) schedule.Drain {
	d := schedule.Drain{Node: m.node.Name, Admitted: m.admitted, Requested: requestTime(m.drain, q.now), Topology: map[string]string{}, PDBs: q.needs[m.node.Name].pdbs, Unguarded: q.needs[m.node.Name].unguarded}
	for _, lim := range q.limits.Topology {
		d.Topology[lim.Key] = m.node.Labels[lim.Key]
	}
	if dl := v1alpha1.EarliestDeadline(m.drain.Spec.Requesters); dl != nil {
		d.Deadline = dl.Time.Time
	}
	return d
}

// requestTime is when the drain's current run was requested:
// status.requestTime once admission recorded it for this run, else now
// (this pass records it).
func requestTime(nd *v1alpha1.NodeDrain, now time.Time) time.Time {
	if nd.Status.RequestTime != nil && nd.AdmissionCurrent() {
		return nd.Status.RequestTime.Time
	}
	return now
}
