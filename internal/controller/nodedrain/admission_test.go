package nodedrain_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/operator"
	"github.com/vacate-dev/vacate/internal/requests"
	"github.com/vacate-dev/vacate/internal/schedule"
)

// drainWatch follows the NodeDrains of a set of nodes through a watch and
// checks, at every event, how many are evicting (admitted, not ended) and in
// how many zones. It also keeps every admission reason and message seen.
type drainWatch struct {
	mu          sync.Mutex
	zone        map[string]string // node -> zone
	state       map[string]*v1alpha1.NodeDrain
	maxEvicting int
	maxZones    int
	maxPosition int32
	limit       int
	zoneLimit   int
	violations  []string
	reasons     map[string]int
	messages    []string
	stop        func()
}

func watchDrains(t *testing.T, e *env, zone map[string]string, limit, zoneLimit int) *drainWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := e.cl.(client.WithWatch).Watch(ctx, &v1alpha1.NodeDrainList{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	dw := &drainWatch{zone: zone, state: map[string]*v1alpha1.NodeDrain{}, limit: limit, zoneLimit: zoneLimit, reasons: map[string]int{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			nd, ok := ev.Object.(*v1alpha1.NodeDrain)
			if !ok || zone[nd.Name] == "" {
				continue
			}
			dw.observe(ev.Type, nd)
		}
	}()
	var once sync.Once
	dw.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(dw.stop)
	return dw
}

func (dw *drainWatch) observe(typ watch.EventType, nd *v1alpha1.NodeDrain) {
	dw.mu.Lock()
	defer dw.mu.Unlock()
	if typ == watch.Deleted {
		delete(dw.state, nd.Name)
	} else {
		dw.state[nd.Name] = nd
	}
	dw.maxPosition = max(dw.maxPosition, nd.Status.QueuePosition)
	if c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionAdmitted); c != nil && c.Status == metav1.ConditionFalse {
		if dw.reasons[c.Reason] == 0 || strings.Contains(c.Message, "position") {
			dw.messages = append(dw.messages, nd.Name+": "+c.Reason+": "+c.Message)
		}
		dw.reasons[c.Reason]++
	}
	var evicting []string
	zones := map[string]bool{}
	for name, d := range dw.state {
		if meta.IsStatusConditionTrue(d.Status.Conditions, v1alpha1.ConditionAdmitted) &&
			d.Status.Phase != v1alpha1.PhaseDrained && d.Status.Phase != v1alpha1.PhaseFailed {
			evicting = append(evicting, name)
			zones[dw.zone[name]] = true
		}
	}
	dw.maxEvicting, dw.maxZones = max(dw.maxEvicting, len(evicting)), max(dw.maxZones, len(zones))
	if len(evicting) > dw.limit || len(zones) > dw.zoneLimit {
		sort.Strings(evicting)
		dw.violations = append(dw.violations, fmt.Sprintf("%d drains running (%s) in %d zones", len(evicting), strings.Join(evicting, ", "), len(zones)))
	}
}

// podWatch fails on any pod that lands on one of the given nodes after it
// started: evicted pods must never be scheduled onto a node being drained.
type podWatch struct {
	mu      sync.Mutex
	landed  []string
	events  int
	stop    func()
	initial map[types.UID]bool
}

func watchPodsLanding(t *testing.T, e *env, ns string, nodes []string) *podWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	list, err := e.c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	pw := &podWatch{initial: map[types.UID]bool{}}
	for _, p := range list.Items {
		pw.initial[p.UID] = true
	}
	w, err := e.c.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			pw.mu.Lock()
			pw.events++
			if !pw.initial[p.UID] && slices.Contains(nodes, p.Spec.NodeName) {
				pw.landed = append(pw.landed, fmt.Sprintf("pod %s scheduled onto %s", p.Name, p.Spec.NodeName))
				pw.initial[p.UID] = true // once per pod
			}
			pw.mu.Unlock()
		}
	}()
	var once sync.Once
	pw.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(pw.stop)
	return pw
}

func (pw *podWatch) check(t *testing.T) {
	t.Helper()
	pw.stop()
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if pw.events == 0 {
		t.Error("the pod watch saw no event; it proves nothing")
	}
	for _, l := range pw.landed {
		t.Error(l)
	}
}

// fleet makes requested nodes and spare nodes in three zones, all in one
// pool, and a policy that governs only the requested ones.
func fleet(t *testing.T, e *env, prefix string, requested, spare int, conc v1alpha1.Concurrency) (drained, spares []string, zone map[string]string) {
	t.Helper()
	pool := map[string]string{"pool": prefix}
	zones := []string{"zone-a", "zone-b", "zone-c"}
	drained = testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: prefix, Count: requested, Zones: zones, Labels: map[string]string{"pool": prefix, "fleet": prefix}})
	if spare > 0 {
		spares = testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: prefix + "-spare", Count: spare, Zones: zones, Labels: pool})
	}
	zone = map[string]string{}
	for i, n := range drained {
		zone[n] = zones[i%len(zones)]
	}
	create(t, e, &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": prefix}},
		Concurrency:  conc,
	}})
	waitPolicy(t, e, prefix, fmt.Sprintf("governing its %d nodes", requested), func(dp *v1alpha1.DrainPolicy) bool {
		return dp.Status.Nodes == int32(requested)
	})
	return drained, spares, zone
}

// deployOnPool runs a Deployment with a PDB on the pool and waits until
// it is Ready and its PDB healthy.
func deployOnPool(t *testing.T, e *env, ns, pool, name string, replicas int32, maxUnavailable string) {
	t.Helper()
	ctx := testenv.Context(t)
	d := devcluster.Deployment(ns, name, replicas)
	d.Spec.Template.Spec.NodeSelector = map[string]string{"pool": pool}
	// Evenly, so every node holds one; cordoned nodes leave the count
	// (Honor), so replacements can go to the spare nodes.
	d.Spec.Template.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: devcluster.HostnameLabel, WhenUnsatisfiable: corev1.DoNotSchedule,
		NodeTaintsPolicy: ptr.To(corev1.NodeInclusionPolicyHonor),
		LabelSelector:    &metav1.LabelSelector{MatchLabels: map[string]string{devcluster.AppLabel: name}},
	}}
	if _, err := e.c.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, devcluster.PDB(ns, name, name, "", maxUnavailable), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sel := labels.SelectorFromSet(labels.Set{devcluster.AppLabel: name})
	if _, err := devcluster.WaitForPodsReady(ctx, e.c.Client, ns, sel, int(replicas), 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.WaitForPDB(ctx, e.c.Client, ns, name, replicas, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// requestAll asks for every node's drain, one after another, as the CLI does.
func requestAll(t *testing.T, e *env, nodes []string) {
	t.Helper()
	for _, n := range nodes {
		if err := requests.Apply(testenv.Context(t), e.cl, n, v1alpha1.Requester{Name: "cli:test", Reason: "fleet upgrade"}, "", ""); err != nil {
			t.Fatal(err)
		}
		name := n
		t.Cleanup(func() {
			_ = e.cl.Delete(context.Background(), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: name}})
		})
	}
}

func drainedAll(t *testing.T, e *env, nodes []string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for _, n := range nodes {
		e.waitDrain(t, n, "Drained", time.Until(deadline), func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
	}
}

// TestManyDrainsWithinBudget: 12 nodes in 3 zones requested at once under a
// policy of 3 nodes at a time and 1 zone at a time. A watch checks the
// limits at every change; every node ends Drained; no evicted pod is ever
// scheduled onto any of the 12 (they are cordoned together first); no PDB
// is ever short.
func TestManyDrainsWithinBudget(t *testing.T) {
	e := startEnv(t)
	ns := testenv.Namespace(t, e.c)
	nodes, spares, zone := fleet(t, e, "many", 12, 6, v1alpha1.Concurrency{
		MaxParallelNodes:             ptr.To(intstr.FromInt32(3)),
		MaxUnavailablePerTopologyKey: []v1alpha1.TopologyLimit{{TopologyKey: devcluster.ZoneLabel, MaxUnavailable: 1}},
	})
	// The PDB allows more than the policy, so only the policy's limits hold
	// the drains back.
	deployOnPool(t, e, ns, "many", "web", int32(len(nodes)+len(spares)), "6")
	guard := testenv.WatchPDBs(t, e.c, ns)
	dw := watchDrains(t, e, zone, 3, 1)
	pw := watchPodsLanding(t, e, ns, nodes)

	requestAll(t, e, nodes)
	drainedAll(t, e, nodes, 4*time.Minute)
	dw.stop()
	pw.check(t)
	guard.Check(t)

	dw.mu.Lock()
	defer dw.mu.Unlock()
	for _, v := range dw.violations {
		t.Errorf("over the policy's limits: %s", v)
	}
	t.Logf("at most %d drains ran at once, in at most %d zone(s); furthest queue position %d; queue reasons seen: %v", dw.maxEvicting, dw.maxZones, dw.maxPosition, dw.reasons)
	if dw.maxEvicting < 2 {
		t.Errorf("at most %d drain ran at once: the policy allows 3 and the nodes of a zone could run together", dw.maxEvicting)
	}
	for _, want := range []string{schedule.WaitingForSlot, schedule.WaitingForZone} {
		if dw.reasons[want] == 0 {
			t.Errorf("no drain ever waited with reason %s (seen: %v)", want, dw.reasons)
		}
	}
	// Nine wait behind the first three; how far back the last one is seen
	// depends on how soon the first ones finish.
	if dw.maxPosition < 6 {
		t.Errorf("the furthest queue position seen is %d; messages: %s", dw.maxPosition, strings.Join(dw.messages, "\n"))
	}
	for _, n := range nodes {
		node, err := e.c.Client.CoreV1().Nodes().Get(testenv.Context(t), n, metav1.GetOptions{})
		if err != nil || !node.Spec.Unschedulable {
			t.Errorf("node %s not cordoned after its drain (%v)", n, err)
		}
	}
}

// TestPDBAwareOrderCompletes: two Deployments whose PDBs allow one
// disruption each, one pod of each on every requested node. Started all at
// once, every drain would compete for the same two disruptions; PDB-aware
// admission starts a node whose PDBs have room and queues the others
// (WaitingForPDBHeadroom) until the disruptions it needs are spent. All end
// Drained with no PDB ever short.
func TestPDBAwareOrderCompletes(t *testing.T) {
	e := startEnv(t)
	ns := testenv.Namespace(t, e.c)
	nodes, spares, zone := fleet(t, e, "tight", 4, 4, v1alpha1.Concurrency{MaxParallelNodes: ptr.To(intstr.FromInt32(4))})
	for _, app := range []string{"alpha", "beta"} {
		deployOnPool(t, e, ns, "tight", app, int32(len(nodes)+len(spares)), "1")
	}
	guard := testenv.WatchPDBs(t, e.c, ns)
	dw := watchDrains(t, e, zone, 4, 3)
	pods, err := e.c.Client.CoreV1().Pods(ns).List(testenv.Context(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodeOf := map[string]string{}
	for _, p := range pods.Items {
		nodeOf[p.Name] = p.Spec.NodeName
	}

	requestAll(t, e, nodes)
	drainedAll(t, e, nodes, 3*time.Minute)
	dw.stop()
	guard.Check(t)
	dw.mu.Lock()
	defer dw.mu.Unlock()
	t.Logf("queue reasons seen: %v; at most %d drains admitted and not yet Drained at once", dw.reasons, dw.maxEvicting)
	if dw.reasons[schedule.WaitingForPDBHeadroom] == 0 {
		t.Errorf("no drain waited for PDB headroom though all four need the same two disruptions (seen %v)", dw.reasons)
	}
	// One evicts while the others wait for its disruptions; the next may
	// start as the first's replacements become Ready. The API server's
	// record of the evictions says how many drains evicted at once (a
	// drain's phase says it later: its last pass may come after the next
	// drain began).
	events, err := devcluster.ReadAudit(e.c.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	overlap, windows := evictingAtOnce(events, ns, nodeOf)
	t.Logf("eviction windows by node: %v", windows)
	if len(windows) != len(nodes) {
		t.Errorf("evictions seen on %d nodes, want %d: %v", len(windows), len(nodes), windows)
	}
	if overlap > 2 {
		t.Errorf("%d drains evicted at once, each needing the one disruption both PDBs allow: %v", overlap, windows)
	}
}

// evictingAtOnce reads the successful evictions of the namespace's pods
// from the audit log and gives, per node, the span from its first to its
// last, and the most spans that overlap.
func evictingAtOnce(events []devcluster.AuditEvent, ns string, nodeOf map[string]string) (int, map[string][2]time.Time) {
	windows := map[string][2]time.Time{}
	for _, ev := range events {
		if ev.Verb != "create" || ev.ObjectRef == nil || ev.ObjectRef.Subresource != "eviction" || ev.ObjectRef.Namespace != ns || !ev.Succeeded() {
			continue
		}
		node := nodeOf[ev.ObjectRef.Name]
		w, ok := windows[node]
		if !ok {
			w = [2]time.Time{ev.Received, ev.Received}
		}
		if ev.Received.Before(w[0]) {
			w[0] = ev.Received
		}
		if ev.Received.After(w[1]) {
			w[1] = ev.Received
		}
		windows[node] = w
	}
	most := 0
	for _, w := range windows {
		at := 0
		for _, o := range windows {
			if !o[0].After(w[0]) && !o[1].Before(w[0]) { // o spans w's start
				at++
			}
		}
		most = max(most, at)
	}
	return most, windows
}

// TestNodeGoneGivesUpAdmission: an admitted drain whose node disappears
// gives its slot up (a queued drain starts); when a node of that name comes
// back, its drain queues again rather than resume beside the other.
func TestNodeGoneGivesUpAdmission(t *testing.T) {
	e := startEnv(t)
	ctx := testenv.Context(t)
	nodes, _, zone := fleet(t, e, "gone", 2, 0, v1alpha1.Concurrency{MaxParallelNodes: ptr.To(intstr.FromInt32(1))})
	ns := testenv.Namespace(t, e.c)
	if err := devcluster.WaitForServiceAccount(ctx, e.c.Client, ns, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes { // a pod without a controller holds each drain (built-in rules)
		if _, err := e.c.Client.CoreV1().Pods(ns).Create(ctx, devcluster.BarePod(ns, "loner-"+n, n), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dw := watchDrains(t, e, zone, 1, 1)
	admittedNow := func(nd *v1alpha1.NodeDrain) bool {
		return meta.IsStatusConditionTrue(nd.Status.Conditions, v1alpha1.ConditionAdmitted)
	}
	waitingWith := func(reason string) func(*v1alpha1.NodeDrain) bool {
		return func(nd *v1alpha1.NodeDrain) bool {
			c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionAdmitted)
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == reason
		}
	}
	requestAll(t, e, nodes[:1])
	e.waitDrain(t, nodes[0], "admitted", time.Minute, admittedNow)
	requestAll(t, e, nodes[1:])
	e.waitDrain(t, nodes[1], "queued behind the first", time.Minute, waitingWith(schedule.WaitingForSlot))

	old, err := e.c.Client.CoreV1().Nodes().Get(ctx, nodes[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.c.Client.CoreV1().Nodes().Delete(ctx, nodes[0], metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitDrain(t, nodes[0], "holding with NodeNotFound", time.Minute, waitingWith(v1alpha1.ReasonNodeNotFound))
	e.waitDrain(t, nodes[1], "admitted once the slot is free", time.Minute, admittedNow)

	back := devcluster.SimulatedNode(nodes[0], zone[nodes[0]], 110)
	back.Labels = old.Labels
	if _, err := e.c.Client.CoreV1().Nodes().Create(ctx, back, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitDrain(t, nodes[0], "queued again behind the running drain", time.Minute, waitingWith(schedule.WaitingForSlot))
	time.Sleep(2 * time.Second) // a moment in which a wrong controller would resume it
	dw.stop()
	dw.mu.Lock()
	defer dw.mu.Unlock()
	for _, v := range dw.violations {
		t.Errorf("over the policy's limit of 1: %s", v)
	}
}

// TestMaintenanceWindow: a drain requested outside its policy's window
// waits, uncordoned, saying when the window opens; when the controller's
// clock enters the window it starts and completes. A schedule the
// controller cannot read (an unknown time zone) is reported on the policy
// and holds its drains, with the node untouched.
func TestMaintenanceWindow(t *testing.T) {
	clk := testutil.NewShiftedClock(0)
	c := testenv.Start(t)
	e := &env{c: c, cl: testenv.Controller(t, c, func(o *operator.Options) { o.Controllers.Clock = clk })}
	ctx := testenv.Context(t)
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "win", Count: 3, Labels: map[string]string{"pool": "win"}})
	ns := testenv.Namespace(t, e.c)
	if err := devcluster.WaitForServiceAccount(ctx, e.c.Client, ns, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if _, err := e.c.Client.CoreV1().Pods(ns).Create(ctx, devcluster.BarePod(ns, "loner-"+n, n), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// The window opens two hours from now (UTC) and lasts one hour.
	opens := clk.Now().UTC().Add(2 * time.Hour).Truncate(time.Minute)
	win := v1alpha1.MaintenanceWindow{
		Days:  []v1alpha1.Weekday{v1alpha1.Weekday(opens.Weekday().String()[:3])},
		Start: opens.Format("15:04"), End: opens.Add(time.Hour).Format("15:04"),
	}
	create(t, e, &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "win"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "win", devcluster.HostnameLabel: nodes[0]}},
		Pods:         v1alpha1.PodPolicy{Unmanaged: "Delete"},
		Schedule:     &v1alpha1.Schedule{TimeZone: "UTC", Windows: []v1alpha1.MaintenanceWindow{win}},
	}})
	requestAll(t, e, nodes[:1])
	nd := e.waitDrain(t, nodes[0], "waiting for the window", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionAdmitted)
		return c != nil && c.Reason == schedule.OutsideWindow
	})
	msg := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionAdmitted).Message
	t.Logf("Admitted=False: %s", msg)
	if want := "the next opens " + opens.Format("Mon 2006-01-02 15:04 UTC"); !strings.Contains(msg, want) {
		t.Errorf("the reason does not say when the window opens (%q): %s", want, msg)
	}
	time.Sleep(2 * time.Second) // a moment in which a wrong controller would act
	untouched(t, e, ns, nodes[0])

	clk.Shift(opens.Sub(clk.Now()) + time.Second)
	e.waitDrain(t, nodes[0], "Drained once the window opened", time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })

	// A drain queued inside the window (here: a long batch window) is
	// cordoned; when the window closes first, vacate gives the node back
	// while the drain waits for the next window.
	create(t, e, &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "win-late"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "win", devcluster.HostnameLabel: nodes[2]}},
		Concurrency:  v1alpha1.Concurrency{BatchWindow: &metav1.Duration{Duration: 10 * time.Minute}},
		Schedule:     &v1alpha1.Schedule{TimeZone: "UTC", Windows: []v1alpha1.MaintenanceWindow{win}},
	}})
	requestAll(t, e, nodes[2:])
	e.waitDrain(t, nodes[2], "queued and cordoned in the window", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionAdmitted)
		return c != nil && c.Reason == v1alpha1.ReasonWaitingForBatch && meta.IsStatusConditionTrue(nd.Status.Conditions, v1alpha1.ConditionCordoned)
	})
	clk.Shift(time.Hour) // past the window's end
	e.waitDrain(t, nodes[2], "waiting for the next window", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionAdmitted)
		return c != nil && c.Reason == schedule.OutsideWindow
	})
	untouched(t, e, ns, nodes[2])

	// A schedule in an unknown time zone passes the API server's checks;
	// the policy says what is wrong and its drains wait, node untouched.
	bad := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "win-bad"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "win", devcluster.HostnameLabel: nodes[1]}},
		Schedule:     &v1alpha1.Schedule{TimeZone: "Mars/Olympus", Windows: []v1alpha1.MaintenanceWindow{{Start: "00:00", End: "24:00"}}},
	}}
	create(t, e, bad)
	waitPolicy(t, e, bad.Name, "reported invalid", func(dp *v1alpha1.DrainPolicy) bool {
		c := meta.FindStatusCondition(dp.Status.Conditions, v1alpha1.ConditionValid)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == schedule.InvalidSchedule &&
			strings.Contains(c.Message, `"Mars/Olympus" is not a known time zone`)
	})
	requestAll(t, e, nodes[1:])
	e.waitDrain(t, nodes[1], "held by the unreadable schedule", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionAdmitted)
		return c != nil && c.Reason == schedule.InvalidSchedule && strings.Contains(c.Message, "DrainPolicy win-bad")
	})
	time.Sleep(2 * time.Second)
	untouched(t, e, ns, nodes[1])
}

// untouched fails if the node was cordoned or its pod evicted.
func untouched(t *testing.T, e *env, ns, node string) {
	t.Helper()
	ctx := testenv.Context(t)
	if n, err := e.c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil || n.Spec.Unschedulable {
		t.Errorf("node %s cordoned while its drain may not start (%v)", node, err)
	}
	if _, err := e.c.Client.CoreV1().Pods(ns).Get(ctx, "loner-"+node, metav1.GetOptions{}); err != nil {
		t.Errorf("a pod on %s was evicted while its drain may not start: %v", node, err)
	}
}
