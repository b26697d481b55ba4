package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/requests"
)

// ConditionType is the node condition the agent keeps: True while it
// watches its sources with no problem, False with the first problem's
// reason otherwise.
const ConditionType = "VacateAgent"

// Reasons of the node condition.
const (
	ReasonWatching = "Watching"
	ReasonNotice   = "NoticeReceived"
)

// Options configure an Agent.
type Options struct {
	// Client reads and writes NodeDrains and the node.
	Client client.Client
	// Node is the node the agent runs on.
	Node string
	// Sources are the signals the agent watches.
	Sources []Source
	// PolicyName, when set, is the DrainPolicy of the drains the agent
	// creates (default: the policy that selects the node).
	PolicyName string
	// Interval is how often the agent looks at the node's drain between
	// notices (default 1s): it finishes a notice when the drain is Drained
	// or the deadline comes.
	Interval time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Metrics, when set, are updated (see NewMetrics).
	Metrics *Metrics
	Log     logr.Logger
}

// Agent turns its sources' notices into requesters on the node's
// NodeDrain, keeps the node tainted (TaintNotice) while a notice is
// current, tells each source when its drain is done, and reports its
// sources' problems in the node's VacateAgent condition.
//
// A notice of source S is the requester "agent:S" on the node's NodeDrain,
// with the notice's reason, deadline and mode (Decommission raises a
// Maintenance drain; modes never go down). When the notice goes (a
// shutdown cancelled, a notice withdrawn) the agent withdraws the
// requester, and vacate undoes the drain if nobody else wants it. The
// agent keeps no state of its own: after a restart it reads what it asked
// for from the NodeDrain, and withdraws a requester of its own that no
// source reports any more once every source has reported once (a node
// that comes back from a reboot is given back).
type Agent struct {
	opts Options
	wake chan struct{}

	mu       sync.Mutex
	notices  map[string][]Notice  // by source name, once it reported
	problems map[string][]Problem // by source name
	// finished records the notices told done, by key; kept while current.
	finished map[string]bool
	// seen records when each current notice was first seen, by key.
	seen map[string]seenNotice
}

// seenNotice is when the agent first saw a notice, and whether its
// deadline had passed by then (on the node's clock).
type seenNotice struct {
	at   time.Time
	late bool
}

// New returns an agent; Run starts it.
func New(opts Options) *Agent {
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics()
	}
	return &Agent{
		opts:     opts,
		wake:     make(chan struct{}, 1),
		notices:  map[string][]Notice{},
		problems: map[string][]Problem{},
		finished: map[string]bool{},
		seen:     map[string]seenNotice{},
	}
}

// reporter is what one source reports to.
type reporter struct {
	a      *Agent
	source string
}

func (r reporter) Notices(ns []Notice) {
	a := r.a
	a.mu.Lock()
	a.notices[r.source] = slices.Clone(ns)
	for _, n := range ns {
		if _, ok := a.seen[noticeKey(n)]; !ok {
			now := a.opts.Now()
			a.seen[noticeKey(n)] = seenNotice{at: now, late: !n.Deadline.IsZero() && !now.Before(n.Deadline)}
			a.opts.Metrics.Notices.WithLabelValues(n.Source).Inc()
			a.opts.Log.Info("notice", "source", n.Source, "reason", n.Reason, "deadline", n.Deadline, "mode", n.Mode, "cordonOnly", n.CordonOnly)
		}
	}
	a.mu.Unlock()
	a.poke()
}

func (r reporter) Problems(ps []Problem) {
	a := r.a
	a.mu.Lock()
	a.problems[r.source] = slices.Clone(ps)
	a.opts.Metrics.Problems.DeletePartialMatch(prometheus.Labels{labelSource: r.source})
	for _, p := range ps {
		a.opts.Metrics.Problems.WithLabelValues(r.source, p.Reason).Set(1)
	}
	a.mu.Unlock()
	a.poke()
}

func (a *Agent) poke() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// Run watches the sources and acts on their notices until ctx ends or a
// source fails for good.
func (a *Agent) Run(ctx context.Context) error {
	if len(a.opts.Sources) == 0 {
		return errors.New("no source to watch: enable at least one (logind, --on-sigterm, a cloud)")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(a.opts.Sources))
	var wg sync.WaitGroup
	for _, s := range a.opts.Sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.Run(ctx, reporter{a: a, source: s.Name()})
			if err != nil && ctx.Err() == nil {
				errs <- fmt.Errorf("source %s: %w", s.Name(), err)
			}
		}()
	}
	defer wg.Wait()
	tick := time.NewTicker(a.opts.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errs:
			return err
		case <-a.wake:
		case <-tick.C:
		}
		if err := a.sync(ctx); err != nil && ctx.Err() == nil {
			a.opts.Log.Error(err, "acting on notices; retrying")
		}
	}
}

// wanted is what the sources ask for now: the requesters with their
// notices, and whether every source has reported once.
type wanted struct {
	requesters map[string]*want
	cordon     []Notice // cordon-only notices
	problems   []Problem
	// reported is, by notice source, whether the sources that may report it
	// have all reported once ("" stands for the sources that are not
	// Owners, which may report any).
	reported map[string]bool
}

// mayWithdraw says whether a requester of the agent that no source reports
// may be withdrawn: every source that may report it has reported once.
func (w wanted) mayWithdraw(requester string) bool {
	if ok, owned := w.reported[strings.TrimPrefix(requester, RequesterPrefix)]; owned {
		return ok
	}
	return w.reported[""]
}

type want struct {
	requester v1alpha1.Requester
	mode      v1alpha1.DrainMode
	notices   []Notice
}

func (a *Agent) wanted() wanted {
	a.mu.Lock()
	defer a.mu.Unlock()
	w := wanted{requesters: map[string]*want{}, reported: map[string]bool{"": true}}
	for _, s := range a.opts.Sources {
		_, reported := a.notices[s.Name()]
		if o, ok := s.(Owner); ok {
			for _, src := range o.NoticeSources() {
				prev, seen := w.reported[src]
				w.reported[src] = reported && (prev || !seen)
			}
		} else {
			w.reported[""] = w.reported[""] && reported
		}
	}
	for _, s := range a.opts.Sources {
		w.problems = append(w.problems, a.problems[s.Name()]...)
		for _, n := range a.notices[s.Name()] {
			if n.CordonOnly {
				w.cordon = append(w.cordon, n)
				continue
			}
			name := RequesterPrefix + n.Source
			r := w.requesters[name]
			if r == nil {
				r = &want{requester: v1alpha1.Requester{Name: name}, mode: v1alpha1.ModeMaintenance}
				w.requesters[name] = r
			}
			r.notices = append(r.notices, n)
			if n.Mode == v1alpha1.ModeDecommission {
				r.mode = v1alpha1.ModeDecommission
			}
			if !n.Deadline.IsZero() && (r.requester.Deadline == nil || n.Deadline.Before(r.requester.Deadline.Time)) {
				r.requester.Deadline = &metav1.Time{Time: n.Deadline.Truncate(time.Second)}
			}
		}
	}
	current := map[string]bool{}
	for _, ns := range a.notices {
		for _, n := range ns {
			current[noticeKey(n)] = true
		}
	}
	for k := range a.finished { // a notice gone and back is new
		if !current[k] {
			delete(a.finished, k)
		}
	}
	for k := range a.seen {
		if !current[k] {
			delete(a.seen, k)
		}
	}
	for _, r := range w.requesters {
		reasons := make([]string, 0, len(r.notices))
		for _, n := range r.notices {
			reasons = append(reasons, n.Reason)
		}
		r.requester.Reason = truncate(strings.Join(reasons, "; "), 1024)
	}
	return w
}

// sync makes the cluster match the sources' notices.
func (a *Agent) sync(ctx context.Context) error {
	w := a.wanted()
	c := a.opts.Client
	nd := &v1alpha1.NodeDrain{}
	err := c.Get(ctx, types.NamespacedName{Name: a.opts.Node}, nd)
	if apierrors.IsNotFound(err) {
		nd = nil
	} else if err != nil {
		return fmt.Errorf("reading NodeDrain %s: %w", a.opts.Node, err)
	}
	var errs []error
	// The taint first: nothing new lands on a node about to go, even
	// while its drain waits for admission.
	if err := a.taint(ctx, w); err != nil {
		errs = append(errs, err)
	}
	for _, name := range sortedKeys(w.requesters) {
		if err := a.request(ctx, nd, w.requesters[name]); err != nil {
			errs = append(errs, err)
		}
	}
	if nd != nil {
		for _, r := range nd.Spec.Requesters {
			if strings.HasPrefix(r.Name, RequesterPrefix) && w.requesters[r.Name] == nil && w.mayWithdraw(r.Name) {
				if err := a.withdraw(ctx, nd, r.Name); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if err := a.finish(ctx, w); err != nil {
		errs = append(errs, err)
	}
	if err := a.condition(ctx, w); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// request puts the requester on the drain, unless it is there already
// with the same reason and deadline and the drain's mode is high enough.
func (a *Agent) request(ctx context.Context, nd *v1alpha1.NodeDrain, w *want) error {
	c, node := a.opts.Client, a.opts.Node
	if nd == nil {
		a.opts.Log.Info("requesting a drain", "requester", w.requester.Name, "mode", w.mode, "reason", w.requester.Reason, "deadline", w.requester.Deadline)
		return requests.Apply(ctx, c, node, w.requester, w.mode, a.opts.PolicyName)
	}
	mode := nd.Spec.Mode
	if mode == "" {
		mode = v1alpha1.ModeMaintenance
	}
	if i := requests.Index(nd, w.requester.Name); i >= 0 && sameRequester(nd.Spec.Requesters[i], w.requester) &&
		(mode == v1alpha1.ModeDecommission || w.mode == v1alpha1.ModeMaintenance) {
		return nil
	}
	a.opts.Log.Info("requesting a drain", "requester", w.requester.Name, "mode", w.mode, "reason", w.requester.Reason, "deadline", w.requester.Deadline)
	if w.mode == v1alpha1.ModeDecommission && mode != v1alpha1.ModeDecommission {
		return requests.Raise(ctx, c, node, w.requester, nd)
	}
	return requests.Apply(ctx, c, node, w.requester, mode, nd.Spec.PolicyName)
}

func sameRequester(have, want v1alpha1.Requester) bool {
	if have.Reason != want.Reason || (have.Deadline == nil) != (want.Deadline == nil) {
		return false
	}
	return have.Deadline == nil || have.Deadline.Equal(want.Deadline)
}

// withdraw takes the agent's requester off the drain, and deletes the
// drain if nobody else wants it, so vacate undoes it.
func (a *Agent) withdraw(ctx context.Context, nd *v1alpha1.NodeDrain, name string) error {
	a.opts.Log.Info("withdrawing", "requester", name)
	after, err := requests.Withdraw(ctx, a.opts.Client, nd.DeepCopy(), name)
	if apierrors.IsNotFound(err) {
		return nil // gone: nothing is left to withdraw from
	}
	if err != nil {
		return fmt.Errorf("withdrawing %s from NodeDrain %s: %w", name, nd.Name, err)
	}
	_, err = requests.DeleteIfIdle(ctx, a.opts.Client, after)
	return err
}

// finish records, once per notice, that it is done (the drain is Drained,
// or the notice's deadline came), and tells its source if the source
// wants to know (a Finisher). A notice whose deadline had passed already
// when the agent first saw it (a cloud event due before the agent heard
// of it, a logind delay no longer than the margin) is done only when the
// drain is Drained: releasing it at once would let the machine go with
// nothing drained, and the platform goes on its own time anyway (logind
// stops waiting after InhibitDelayMaxSec, Azure starts an event once its
// NotBefore has passed).
func (a *Agent) finish(ctx context.Context, w wanted) error {
	now := a.opts.Now()
	var nd *v1alpha1.NodeDrain
	var errs []error
	for _, s := range a.opts.Sources {
		for _, n := range a.current(s.Name()) {
			if n.CordonOnly || a.isFinished(n) {
				continue
			}
			if nd == nil {
				nd = &v1alpha1.NodeDrain{}
				if err := a.opts.Client.Get(ctx, types.NamespacedName{Name: a.opts.Node}, nd); err != nil && !apierrors.IsNotFound(err) {
					return err
				}
			}
			drained := drainedFor(nd, w.requesters[RequesterPrefix+n.Source])
			late := !n.Deadline.IsZero() && !now.Before(n.Deadline) && !a.lateOnArrival(n)
			if !drained && !late {
				continue
			}
			a.opts.Log.Info("notice done", "source", n.Source, "drained", drained, "deadline", n.Deadline)
			if f, ok := s.(Finisher); ok {
				if err := f.Finish(ctx, n, drained); err != nil {
					errs = append(errs, fmt.Errorf("finishing notice %s: %w", n.Source, err))
					continue
				}
			}
			a.markFinished(n, drained, now)
		}
	}
	return errors.Join(errs...)
}

// drainedFor reports whether the drain is Drained for what the agent
// wants: its requester on it as wanted, in a mode at least the wanted one,
// and the status for the current spec (a raised mode runs the drain
// again). A cache that has not seen the agent's last write yet is not
// Drained for it.
func drainedFor(nd *v1alpha1.NodeDrain, w *want) bool {
	if w == nil || nd.Name == "" {
		return false
	}
	i := requests.Index(nd, w.requester.Name)
	if i < 0 || !sameRequester(nd.Spec.Requesters[i], w.requester) ||
		(w.mode == v1alpha1.ModeDecommission && nd.Spec.Mode != v1alpha1.ModeDecommission) {
		return false
	}
	return nd.Drained()
}

func (a *Agent) current(source string) []Notice {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.notices[source])
}

func noticeKey(n Notice) string { return n.Source + "/" + n.ID + "/" + n.Deadline.String() }

// lateOnArrival says whether the notice's deadline had passed when the
// agent first saw it.
func (a *Agent) lateOnArrival(n Notice) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.seen[noticeKey(n)].late
}

func (a *Agent) isFinished(n Notice) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.finished[noticeKey(n)]
}

func (a *Agent) markFinished(n Notice, drained bool, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.finished[noticeKey(n)] = true
	if seen, ok := a.seen[noticeKey(n)]; ok && drained {
		a.opts.Metrics.NoticeToDrained.WithLabelValues(n.Source).Observe(now.Sub(seen.at).Seconds())
	}
	if !n.Deadline.IsZero() {
		a.opts.Metrics.DeadlineMargin.WithLabelValues(n.Source).Set(n.Deadline.Sub(now).Seconds())
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// truncate cuts s to at most n bytes, on a character boundary (a cut
// character would be stored as U+FFFD, and never compare equal again).
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - 3
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// nodeOf reads the agent's node.
func (a *Agent) nodeOf(ctx context.Context) (*corev1.Node, error) {
	node := &corev1.Node{}
	if err := a.opts.Client.Get(ctx, types.NamespacedName{Name: a.opts.Node}, node); err != nil {
		return nil, fmt.Errorf("reading node %s: %w", a.opts.Node, err)
	}
	return node, nil
}
