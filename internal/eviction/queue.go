// Package eviction evicts pods through the Eviction API from a rate-limited
// queue of its own: keyed by pod UID, with the UID as precondition, bounded
// parallelism per node and overall, one token bucket that every call (first
// attempts and retries) takes a token from, a timeout on every call, and
// exponential backoff for every refusal. Each answer is classified by its
// type (a PodDisruptionBudget, throttling, a denial, an invalid request,
// another failure), never by its text; throttling pauses every call until
// its Retry-After has passed. It never deletes a pod and never uses a grace
// period of 0.
package eviction

import (
	"context"
	"errors"
	"sync"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"golang.org/x/time/rate"
)

// Result is how one eviction attempt ended.
type Result string

const (
	// Evicted: the API server accepted the eviction; the pod is terminating.
	Evicted Result = "Evicted"
	// Gone: the pod no longer exists, or is another pod now (404, or 409 on
	// the UID precondition); nothing left to do.
	Gone Result = "Gone"
	// PDBBlocked: a PodDisruptionBudget refused the eviction (429 with the
	// DisruptionBudget cause); it is retried with backoff.
	PDBBlocked Result = "PDBBlocked"
	// Throttled: the API server asked the client to slow down (429 without
	// a DisruptionBudget cause, such as API Priority and Fairness); it is
	// retried with backoff, no sooner than its Retry-After.
	Throttled Result = "Throttled"
	// Forbidden: the eviction was denied (403): RBAC, an admission webhook
	// or a ValidatingAdmissionPolicy; it is retried with backoff.
	Forbidden Result = "Forbidden"
	// Invalid: the API server found the eviction invalid (422), such as an
	// admission policy denying it with reason Invalid; it is retried with
	// backoff.
	Invalid Result = "Invalid"
	// Failed: another error, such as a 500; Outcome.Code keeps the HTTP
	// status code. It is retried with backoff and reported.
	Failed Result = "Failed"
	// Held: Options.MayEvict refused the eviction just before the call; no
	// call was made and the request left the queue.
	Held Result = "Held"
)

// Outcome reports one eviction attempt.
type Outcome struct {
	Pod    types.NamespacedName
	UID    types.UID
	Node   string
	For    string // the request's
	Result Result
	// Message is the API server's own explanation of a refusal (for
	// PDBBlocked, the DisruptionBudget cause's), or MayEvict's reason for
	// Held.
	Message string
	// Code is the HTTP status code of the API server's answer to a refused
	// eviction; 0 when there was none (such as a network error, or Held).
	Code int32
	// RetryAfter is the delay the API server asked for with a Throttled
	// answer (Retry-After); the next attempt comes no sooner.
	RetryAfter time.Duration
	// Err is the error of a refused eviction, wrapped with the pod's name.
	Err error
	At  time.Time
}

// Request asks for one pod to be evicted.
type Request struct {
	Pod  types.NamespacedName
	UID  types.UID
	Node string
	// For is who queued the eviction: ForDrains (the NodeDrain
	// controller), or another consumer that Handle registered (the
	// EvictionRequest coordinator). That consumer's MayEvict checks it
	// right before the call and its OnOutcome hears the answer; every
	// consumer's evictions share the workers, the rate, the per-node and
	// per-PDB bounds, and count against the PDBs' budgets (Budget) alike.
	For string
	// GracePeriodSeconds overrides the pod's own; nil keeps it. Never 0.
	GracePeriodSeconds *int64
	// PerNode bounds the evictions in flight on this pod's node (the drain
	// policy's maxParallelEvictionsPerNode); 0 uses Options.PerNode.
	PerNode int
	// PDBs are the PodDisruptionBudgets that select the pod
	// (namespace/name). At most Options.PerPDB evictions of a PDB's pods
	// are in flight at once that the PDB's status does not count yet
	// (Counted); the caller queues no more than the PDB's budget lets
	// through (Budget), so more than one is in flight only where the
	// budget allows more than one.
	PDBs []string
	// Marks are the pod's entries in each PDB's status.disruptedPods when
	// its eviction was asked (zero if none), by the index of PDBs
	// (MarksOf): a newer entry says the PDB's status counts the eviction
	// (CountedBy, Budget).
	Marks []metav1.Time
}

// Options configure a Queue.
type Options struct {
	// Workers bounds evictions in flight across all nodes. Default
	// DefaultWorkers.
	Workers int
	// PerNode bounds evictions in flight per node. Default 10.
	PerNode int
	// PerPDB bounds the evictions in flight per PodDisruptionBudget that
	// its status does not count yet (Counted). Default DefaultPerPDB.
	PerPDB int
	// BaseDelay and MaxDelay bound the per-pod exponential backoff.
	// Defaults 1s and 1m.
	BaseDelay, MaxDelay time.Duration
	// QPS and Burst bound the eviction calls overall, first attempts and
	// retries alike: every call takes a token from one bucket, waiting for
	// it. Defaults DefaultQPS and DefaultBurst.
	QPS   float64
	Burst int
	// CallTimeout bounds each Eviction API call; a call that has no answer
	// by then is Failed and retried with backoff. Default
	// DefaultCallTimeout.
	CallTimeout time.Duration
	// OnOutcome is called after every attempt, from a worker goroutine.
	OnOutcome func(Outcome)
	// MayEvict is asked right before each Eviction API call, once the rate
	// limiter and the per-node bound let the request through. When it says
	// no, no call is made, the request leaves the queue (as with Forget) and
	// OnOutcome gets a Held outcome with why as its Message. It is called
	// from a worker goroutine without the queue's lock; nil always allows.
	MayEvict func(Request) (ok bool, why string)
	Clock    clock.WithTicker
}

// Queue evicts pods. Add is idempotent per UID: a pod already queued or in
// flight is not queued twice. Forget drops a pod (it left, or the drain was
// cancelled).
type Queue struct {
	evict1  EvictFunc
	opts    Options
	queue   workqueue.TypedRateLimitingInterface[types.UID]
	limiter workqueue.TypedRateLimiter[types.UID]
	// bucket is the token bucket every eviction call waits on.
	bucket *rate.Limiter

	mu       sync.Mutex
	requests map[types.UID]Request
	perNode  map[string]int
	// perPDB counts the evictions in flight per PDB that its status does
	// not count yet (at most Options.PerPDB), and parked are the pods that
	// wait for one of them to be counted or to end.
	perPDB map[string]int
	parked map[string][]types.UID
	// flying are the calls in flight that hold a slot of each PDB (by
	// PDB, then pod): a call gives its slot back when it ends, or sooner,
	// when the PDB's status shows the API server counted it (Counted).
	flying map[string]map[types.UID]flight
	// evicted remembers pods whose eviction succeeded, so that an Add that
	// races the informer (the pod not yet seen terminating) cannot evict a
	// pod twice.
	evicted map[types.UID]evictedPod
	// reserved are the pods taken out of service for their eviction and
	// not queued yet, refusals the latest refusal of each pod's eviction,
	// and byPDB the pods whose evictions may count against each PDB
	// (underway.go).
	reserved map[types.UID]Request
	refusals map[types.UID]Refusal
	byPDB    map[string]map[types.UID]bool
	// pausedUntil is when the API server's latest throttling ends: no
	// eviction call of any pod is made before.
	pausedUntil time.Time

	// consumers are the handlers of the requests For each consumer but
	// ForDrains, whose are opts' (Handle).
	consumers map[string]handlers
}

// ForDrains is Request.For of the drains' evictions.
const ForDrains = ""

// ForEvictionRequests is Request.For of the EvictionRequest coordinator's
// evictions, and of the reservations a drain makes for the pods it asked
// for with EvictionRequests (their evictions will be the coordinator's):
// the coordinator's Add takes a reservation over; ForgetNode drops the
// ones still reserved.
const ForEvictionRequests = "evictionrequest"

// handlers are one consumer's OnOutcome and MayEvict.
type handlers struct {
	onOutcome func(Outcome)
	mayEvict  func(Request) (bool, string)
}

// Defaults of Options.
const (
	// DefaultQPS and DefaultBurst bound eviction calls. Every successful
	// eviction makes the cluster do several writes more (the pod's deletion,
	// its replacement's creation and binding, status updates, endpoint
	// changes), so 50 calls a second are some 250 writes a second: what the
	// 2-core dev cluster serves (docs/performance.md), and far less than a
	// production control plane does. Most drains never reach it: the PDBs
	// let through one eviction call at a time each, and only as fast as
	// their workloads' replacements become ready. At 10 a second it was the
	// limit of a ten-node drain (docs/performance.md), slower than ten
	// `kubectl drain` processes. The burst lets the drains of several nodes
	// start their evictions together.
	DefaultQPS   = 50
	DefaultBurst = 100
	// DefaultWorkers bounds the eviction calls in flight: as many as
	// DefaultQPS, so that the rate, not the workers, bounds the calls
	// while the API server answers within a second. With 20, calls of
	// half a second to a second (100 nodes, 30,000 pods on the dev
	// cluster) made 20 to 40 calls a second at most, and pods whose
	// PDBs allowed them waited for a worker (docs/performance.md).
	DefaultWorkers = 50
	// DefaultCallTimeout bounds each eviction call: far above a healthy
	// answer (milliseconds), below the API server's own request timeout
	// (60s), so a worker stuck on a slow etcd is freed and retries later.
	DefaultCallTimeout = 30 * time.Second
	// DefaultPerPDB bounds the evictions in flight per
	// PodDisruptionBudget whose write of the PDB's status the PDB watch
	// has not shown yet (Counted). Each accepted eviction updates the
	// PDB's status; the API server serializes evictions of one PDB
	// through that update: one sent while another's update is under way
	// conflicts and the API server tries it again 500 ms later
	// (docs/performance.md measures what that costs against what it
	// saves).
	DefaultPerPDB = 1
)

// evictedPod is when a pod of a node was evicted, and its request.
type evictedPod struct {
	at   time.Time
	node string
	req  Request
}

// evictedMemory is how long the queue remembers a successful eviction; the
// informer shows the pod terminating long before.
const evictedMemory = 10 * time.Minute

// nodeBusyDelay is how long a pod waits when its node already has PerNode
// evictions in flight; the worker serves other nodes meanwhile.
const nodeBusyDelay = 100 * time.Millisecond

// EvictFunc makes one Eviction API call.
type EvictFunc func(ctx context.Context, ev *policyv1.Eviction) error

// ClientEvictor evicts through a clientset. A dry run (DeleteOptions.DryRun
// set) is also asked for in the request's dryRun parameter: admission
// (webhooks, admission policies) sees only that one, and must know that
// nothing will happen.
func ClientEvictor(cs kubernetes.Interface) EvictFunc {
	return func(ctx context.Context, ev *policyv1.Eviction) error {
		if ev.DeleteOptions == nil || len(ev.DeleteOptions.DryRun) == 0 {
			return cs.CoreV1().Pods(ev.Namespace).EvictV1(ctx, ev)
		}
		return cs.CoreV1().RESTClient().Post().AbsPath("/api/v1").Namespace(ev.Namespace).Resource("pods").Name(ev.Name).SubResource("eviction").
			VersionedParams(&metav1.CreateOptions{DryRun: ev.DeleteOptions.DryRun}, scheme.ParameterCodec).
			Body(ev).Do(ctx).Error()
	}
}

// NewQueue returns a queue that evicts through cs.
func NewQueue(cs kubernetes.Interface, opts Options) *Queue {
	return NewQueueWithEvictor(ClientEvictor(cs), opts)
}

// NewQueueWithEvictor returns a queue that evicts through evict.
func NewQueueWithEvictor(evict EvictFunc, opts Options) *Queue {
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.PerNode <= 0 {
		opts.PerNode = 10
	}
	if opts.PerPDB <= 0 {
		opts.PerPDB = DefaultPerPDB
	}
	if opts.BaseDelay <= 0 {
		opts.BaseDelay = time.Second
	}
	if opts.MaxDelay <= 0 {
		opts.MaxDelay = time.Minute
	}
	if opts.QPS <= 0 {
		opts.QPS = DefaultQPS
	}
	if opts.Burst <= 0 {
		opts.Burst = DefaultBurst
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = DefaultCallTimeout
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.OnOutcome == nil {
		opts.OnOutcome = func(Outcome) {}
	}
	if opts.MayEvict == nil {
		opts.MayEvict = func(Request) (bool, string) { return true, "" }
	}
	// The workqueue's limiter is only consulted for retries: it keeps the
	// per-pod backoff; the rate of calls is the bucket's, taken by every
	// call in next.
	limiter := workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](opts.BaseDelay, opts.MaxDelay)
	q := &Queue{
		evict1:   evict,
		opts:     opts,
		limiter:  limiter,
		bucket:   newTokenBucket(opts.QPS, opts.Burst),
		queue:    workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: "vacate_evictions", Clock: opts.Clock}),
		requests: map[types.UID]Request{},
		perNode:  map[string]int{},
		perPDB:   map[string]int{},
		parked:   map[string][]types.UID{},
		flying:   map[string]map[types.UID]flight{},
		evicted:  map[types.UID]evictedPod{},
		reserved: map[types.UID]Request{},
		refusals: map[types.UID]Refusal{},
		byPDB:    map[string]map[types.UID]bool{},

		consumers: map[string]handlers{},
	}
	return q
}

// ErrCallTimeout is the error of an eviction call the API server did not
// answer within Options.CallTimeout.
var ErrCallTimeout = errors.New("the eviction call timed out")

// Handle sets the OnOutcome and MayEvict (see Options) of the requests For
// consumer, for a consumer built after the queue: the NodeDrain controller
// (ForDrains), which checks its holds before every call and hears every
// answer, and the EvictionRequest coordinator. Call it before Run. A
// request For a consumer nobody registered is never evicted.
func (q *Queue) Handle(consumer string, onOutcome func(Outcome), mayEvict func(Request) (bool, string)) {
	if consumer == ForDrains {
		if onOutcome != nil {
			q.opts.OnOutcome = onOutcome
		}
		if mayEvict != nil {
			q.opts.MayEvict = mayEvict
		}
		return
	}
	h := handlers{onOutcome: onOutcome, mayEvict: mayEvict}
	if h.onOutcome == nil {
		h.onOutcome = func(Outcome) {}
	}
	if h.mayEvict == nil {
		h.mayEvict = func(Request) (bool, string) { return true, "" }
	}
	q.consumers[consumer] = h
}

// handlersOf are the handlers of the requests For consumer. A request for
// a consumer nobody registered is held: nothing checks it.
func (q *Queue) handlersOf(consumer string) handlers {
	if h, ok := q.consumers[consumer]; ok {
		return h
	}
	if consumer == ForDrains {
		return handlers{onOutcome: q.opts.OnOutcome, mayEvict: q.opts.MayEvict}
	}
	return handlers{onOutcome: func(Outcome) {}, mayEvict: func(Request) (bool, string) {
		return false, "no consumer " + consumer + " is registered to check it"
	}}
}

// Start runs the queue's workers until ctx ends: the queue is a
// component of the manager of its own (leader only), not part of a
// controller.
func (q *Queue) Start(ctx context.Context) error {
	q.Run(ctx)
	return nil
}

// Run evicts until ctx ends.
func (q *Queue) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for i := 0; i < q.opts.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for q.next(ctx) {
			}
		}()
	}
	<-ctx.Done()
	q.queue.ShutDown()
	wg.Wait()
}

func (q *Queue) next(ctx context.Context) bool {
	uid, shutdown := q.queue.Get()
	if shutdown {
		return false
	}
	defer q.queue.Done(uid)
	q.mu.Lock()
	r, ok := q.requests[uid]
	if !ok { // forgotten while queued
		q.mu.Unlock()
		return true
	}
	limit := r.PerNode
	if limit <= 0 {
		limit = q.opts.PerNode
	}
	if q.perNode[r.Node] >= limit {
		q.mu.Unlock()
		q.queue.AddAfter(uid, nodeBusyDelay)
		return true
	}
	for _, pdb := range r.PDBs {
		if q.perPDB[pdb] >= q.opts.PerPDB { // queued again when a call ends
			q.parked[pdb] = append(q.parked[pdb], uid)
			q.mu.Unlock()
			return true
		}
	}
	q.take(r)
	q.mu.Unlock()

	if !q.admit(ctx) || !q.Pending(uid) { // shut down, or forgotten meanwhile
		q.release(r)
		return true
	}
	if ok, why := q.handlersOf(r.For).mayEvict(r); !ok {
		q.hold(r, why)
		return true
	}
	out := q.evict(ctx, r)

	q.mu.Lock()
	q.give(r)
	// An answer that arrives after the pod was forgotten (its drain
	// stopped meanwhile) is not remembered: nothing would ever drop it.
	if _, wanted := q.requests[uid]; wanted || out.Result == Evicted || out.Result == Gone {
		q.recordLocked(out)
	}
	switch out.Result {
	case Evicted:
		q.evicted[uid] = evictedPod{at: out.At, node: r.Node, req: r}
		delete(q.requests, uid)
	case Gone:
		delete(q.requests, uid)
		q.unclaimLocked(uid, r.PDBs)
	}
	_, stillWanted := q.requests[uid]
	q.mu.Unlock()

	switch {
	case out.Result == Evicted || out.Result == Gone:
		q.queue.Forget(uid)
	case stillWanted && ctx.Err() == nil && out.Result == PDBBlocked:
		// The caller tries it again at once (RetryNow) when the PDB's
		// status allows; until then it waits MaxDelay.
		q.retry(uid, q.opts.MaxDelay)
	case stillWanted && ctx.Err() == nil:
		q.retry(uid, out.RetryAfter)
	}
	if out.Result == Throttled {
		q.pause(out)
	}
	q.handlersOf(r.For).onOutcome(out)
	return true
}

// flight is a call in flight under one PDB: its pod's name and the
// pod's entry in the PDB's status.disruptedPods when it was queued
// (Request.Marks).
type flight struct {
	pod  string
	mark metav1.Time
}

// take uses the request's node slot and a call in flight of each of its
// PDBs.
// q.mu is held.
func (q *Queue) take(r Request) {
	q.perNode[r.Node]++
	for i, pdb := range r.PDBs {
		q.perPDB[pdb]++
		if q.flying[pdb] == nil {
			q.flying[pdb] = map[types.UID]flight{}
		}
		q.flying[pdb][r.UID] = flight{pod: r.Pod.Name, mark: markOf(r, i)}
	}
}

// give frees what take used (the PDBs' slots Counted has not freed
// already), and queues again the pods parked behind the PDBs' calls. q.mu
// is held.
func (q *Queue) give(r Request) {
	q.perNode[r.Node]--
	for _, pdb := range r.PDBs {
		if _, held := q.flying[pdb][r.UID]; held {
			q.land(pdb, r.UID)
		}
		q.unpark(pdb)
	}
}

// land frees the PDB's slot the pod's call holds. q.mu is held.
func (q *Queue) land(pdb string, uid types.UID) {
	if delete(q.flying[pdb], uid); len(q.flying[pdb]) == 0 {
		delete(q.flying, pdb)
	}
	if q.perPDB[pdb]--; q.perPDB[pdb] <= 0 {
		delete(q.perPDB, pdb)
	}
}

// unpark queues again the pods parked behind the PDB's calls. q.mu is
// held.
func (q *Queue) unpark(pdb string) {
	for _, uid := range q.parked[pdb] {
		q.queue.Add(uid)
	}
	delete(q.parked, pdb)
}

// Counted frees the PDB's slots of the calls in flight its status (as the
// PDB watch shows it now) already counts (CountedBy), and queues the pods
// parked behind them. The API server takes one from disruptionsAllowed
// and records the pod in disruptedPods in one write of the PDB's status,
// then deletes the pod and answers: a next eviction of the PDB sent once
// that write is seen reads the PDB as it left it, and does not conflict
// with it, while the first call's answer can take a second more on a
// loaded API server. So one write of the PDB's status is in flight at a
// time (Options.PerPDB), not one call, and a budget that allows several
// disruptions lets its evictions through one after another without
// waiting for each answer (docs/performance.md). key is the PDB's
// namespace/name.
func (q *Queue) Counted(key string, pdb *policyv1.PodDisruptionBudget) {
	q.mu.Lock()
	defer q.mu.Unlock()
	freed := false
	for uid, f := range q.flying[key] {
		if CountedBy(pdb, f.pod, f.mark) {
			q.land(key, uid)
			freed = true
		}
	}
	if freed {
		q.unpark(key)
	}
}

// release frees what a call that was not made had taken.
func (q *Queue) release(r Request) {
	q.mu.Lock()
	q.give(r)
	q.mu.Unlock()
}

// hold drops a request MayEvict refused, frees its node's slot and reports
// it Held.
func (q *Queue) hold(r Request, why string) {
	q.mu.Lock()
	q.give(r)
	q.dropRequestLocked(r.UID)
	delete(q.refusals, r.UID)
	q.mu.Unlock()
	q.queue.Forget(r.UID)
	q.handlersOf(r.For).onOutcome(Outcome{Pod: r.Pod, UID: r.UID, Node: r.Node, For: r.For, Result: Held, Message: why, At: q.opts.Clock.Now()})
}

// retry queues the pod again after its backoff, and no sooner than the
// delay the API server asked for.
func (q *Queue) retry(uid types.UID, notBefore time.Duration) {
	q.queue.AddAfter(uid, max(q.limiter.When(uid), notBefore))
}

// DryRun asks the API server whether the pod's eviction would be allowed
// now: an eviction with dryRun All, which checks the PodDisruptionBudgets
// (and admission) like a real one but changes nothing and reserves nothing
// (Reserve does, in the queue).
// Its Outcome is Evicted when the eviction would be allowed. It takes a
// token from the bucket every call takes from, but never waits for one:
// made is false, and no call was made, while the bucket is empty or the
// API server's throttling pause lasts; the caller asks again later.
func (q *Queue) DryRun(ctx context.Context, r Request) (out Outcome, made bool) {
	if r.GracePeriodSeconds != nil && *r.GracePeriodSeconds <= 0 {
		return Outcome{}, false
	}
	if q.pauseLeft() > 0 || !q.bucket.AllowN(q.opts.Clock.Now(), 1) {
		return Outcome{}, false
	}
	out = q.call(ctx, r, []string{metav1.DryRunAll})
	if out.Result == Throttled {
		q.pause(out)
	}
	// Its answer is the pod's latest: a refusal (its message saying it
	// was a dry run) until one is allowed.
	switch out.Result {
	case Gone:
	case Evicted:
		q.mu.Lock()
		q.recordLocked(out)
		q.mu.Unlock()
	default:
		out.Message = "dry run: " + out.Message
		q.mu.Lock()
		q.recordLocked(out)
		q.mu.Unlock()
	}
	return out, true
}
