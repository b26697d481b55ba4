package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/hook"
)

// The control plane fails mid-drain (issue 12, section 2). Each test checks
// that every pod was evicted at most once (audit log) and that no PDB
// dipped (a watch that resumes across API server restarts).

// TestAPIServerFrozenMidDrain freezes the API server (SIGSTOP) for 30 s while
// the controller evicts, then continues it: the drain finishes.
func TestAPIServerFrozenMidDrain(t *testing.T) {
	newEnv(t).faultMidDrain(t, "freeze-api", func(e *env, _ *proc) {
		e.freeze(t, devcluster.KubeAPIServer, 30*time.Second)
	})
}

// TestAPIServerRestartedMidDrain kills the API server (SIGKILL) while the
// controller evicts and starts it again with the same flags: the drain
// finishes.
func TestAPIServerRestartedMidDrain(t *testing.T) {
	newEnv(t).faultMidDrain(t, "restart-api", func(e *env, ctrl *proc) {
		t.Log("killing the API server (SIGKILL) and starting it again")
		if err := e.c.Restart(testenv.Context(t), devcluster.KubeAPIServer); err != nil {
			t.Fatal(err)
		}
		// Restart returns once the new API server authorizes by RBAC; until
		// then it refuses every request but a cluster admin's, and the
		// controller retries. Its log has second precision.
		ctrl.tolerateForbiddenUntil(time.Now().Add(time.Second))
	})
}

// TestEtcdFrozenMidEvacuation freezes etcd (SIGSTOP) for 20 s while the
// pods' HTTP hooks report InProgress; the apps complete while etcd is
// frozen; once it continues, the drain finishes, and no hooked pod was
// evicted before its hook said Completed.
func TestEtcdFrozenMidEvacuation(t *testing.T) {
	e := newEnv(t)
	hooks := e.hookedWorkload(t, "freeze-etcd")
	startController(t, e.c, "freeze-etcd", false, "freeze-etcd")
	e.drain(t, hooks.node)
	hooks.waitInProgress(t, e)
	e.freeze(t, devcluster.Etcd, 20*time.Second, func() {
		t.Log("the apps finish their evacuation while etcd is frozen")
		hooks.complete()
	})
	nd := e.waitDrain(t, hooks.node, "Drained", afterKill, drained)
	t.Logf("drained: %s evicted", nd.Status.Progress)
	hooks.checkNoEarlyEviction(t)
	e.checkOneEvictionPerPod(t, hooks.ns, int(nd.Status.Total))
	hooks.guard.Check(t)
}

// freeze pauses a control plane component for d, runs during (if any) while
// it is frozen, and continues it.
func (e *env) freeze(t *testing.T, component string, d time.Duration, during ...func()) {
	t.Helper()
	t.Logf("freezing %s (SIGSTOP) for %s", component, d)
	if err := e.c.Pause(component); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = e.c.Resume(component)
		}
	}()
	for _, f := range during {
		f()
	}
	time.Sleep(d)
	t.Logf("continuing %s (SIGCONT)", component)
	resumed = true
	if err := e.c.Resume(component); err != nil {
		t.Fatal(err)
	}
}

// hookPort is where the test's apps serve their evacuation hook, on each
// simulated pod's own loopback IP.
const hookPort = 18090

// hookedPods is a workload whose pods all have an HTTP evacuation hook
// served by the test, under a DrainPolicy that enables hooks.
type hookedPods struct {
	ns, node string
	guard    *testenv.PDBGuard
	app      *hookApp
	early    chan string // a hooked pod deleted before its hook said Completed
}

// hookedWorkload starts 8 pods on 2 nodes behind a PDB (maxUnavailable 1),
// each with a hook that answers InProgress until complete is called.
func (e *env) hookedWorkload(t *testing.T, prefix string) *hookedPods {
	t.Helper()
	ctx := testenv.Context(t)
	ns, node := e.annotatedWorkload(t, prefix, 2, 8, "1", map[string]string{hook.AnnotationPort: fmt.Sprint(hookPort)})
	h := &hookedPods{ns: ns, node: node, guard: testenv.WatchPDBs(t, e.c, ns), app: &hookApp{}, early: make(chan string, 100)}
	policy := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{testLabel: prefix}},
		HTTPHooks:    v1alpha1.HTTPHooks{Enabled: true},
	}}
	if err := e.cl.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cl.Delete(context.Background(), policy) })
	pods, err := e.c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.Set{devcluster.AppLabel: "web"}.String()})
	if err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		serveHook(t, &pods.Items[i], h.app)
	}
	// A pod of the drained node deleted before the app said Completed
	// would have been evicted while its data was still moving.
	wctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	w, err := e.c.Client.CoreV1().Pods(ns).Watch(wctx, metav1.ListOptions{ResourceVersion: pods.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && p.DeletionTimestamp != nil && p.Spec.NodeName == node && !h.app.isCompleted() {
				h.early <- p.Name
			}
		}
	}()
	return h
}

// waitInProgress waits until every hooked pod of the drained node has
// answered InProgress at least once.
func (h *hookedPods) waitInProgress(t *testing.T, e *env) {
	t.Helper()
	e.waitDrain(t, h.node, "evacuating through the hooks", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		if nd.Status.Phase != v1alpha1.PhaseEvacuating || len(nd.Status.Hooks) == 0 {
			return false
		}
		for _, hs := range nd.Status.Hooks {
			if hs.Phase != string(v1alpha1.EvacuationInProgress) {
				return false
			}
		}
		return true
	})
}

func (h *hookedPods) complete() { h.app.setCompleted() }

func (h *hookedPods) checkNoEarlyEviction(t *testing.T) {
	t.Helper()
	select {
	case p := <-h.early:
		t.Errorf("pod %s was deleted before its hook answered Completed", p)
	default:
	}
}

// hookApp is the apps' evacuation hook: InProgress (with a count that goes
// down, so every answer is news) until completed, then Completed. It
// records who called, by User-Agent, and when.
type hookApp struct {
	mu        sync.Mutex
	completed bool
	answered  int // GETs answered, to count down what remains
	calls     []hookCall
}

type hookCall struct {
	method, agent string
	at            time.Time
}

func (a *hookApp) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, hookCall{method: r.Method, agent: r.UserAgent(), at: time.Now()})
	switch r.Method {
	case http.MethodPost:
		w.WriteHeader(http.StatusAccepted)
	case http.MethodDelete:
		w.WriteHeader(http.StatusOK)
	default:
		a.answered++
		answer := map[string]any{"state": hook.InProgress, "message": "moving data", "remaining": 1000 - a.answered}
		if a.completed {
			answer = map[string]any{"state": hook.Completed, "message": "all data moved", "remaining": 0}
		}
		_ = json.NewEncoder(w).Encode(answer)
	}
}

func (a *hookApp) setCompleted() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.completed = true
}

func (a *hookApp) isCompleted() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.completed
}

// callsSince lists the calls made by agent at or after since.
func (a *hookApp) callsSince(agent string, since time.Time) []hookCall {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []hookCall
	for _, c := range a.calls {
		if strings.Contains(c.agent, agent) && !c.at.Before(since) {
			out = append(out, c)
		}
	}
	return out
}

// serveHook runs app on the pod's IP until the test ends.
func serveHook(t *testing.T, pod *corev1.Pod, app http.Handler) {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(pod.Status.PodIP, fmt.Sprint(hookPort)))
	if err != nil {
		t.Fatalf("listening on pod %s's IP: %v", pod.Name, err)
	}
	srv := &http.Server{Handler: app, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// TestFrozenLeaderIsFenced runs two controllers with leader election and
// freezes the leader (SIGSTOP) while its HTTP hooks are in progress, until
// the standby has taken the Lease over and calls the hooks itself; then it
// continues the old leader. From the moment the new leader took the Lease,
// the old one sends no request that changes anything (audit log, by user
// agent) and calls no hook (the apps' own record), and it exits. The new
// leader finishes the drain.
func TestFrozenLeaderIsFenced(t *testing.T) {
	e := newEnv(t)
	hooks := e.hookedWorkload(t, "frozen-leader")
	const leaseID = "frozen-leader"
	lease := []string{"--leader-election-lease-duration", "6s", "--leader-election-renew-deadline", "4s", "--leader-election-retry-period", "1s"}
	a := startController(t, e.c, "a", true, leaseID, append(lease, "--identity", "replica-a")...)
	b := startController(t, e.c, "b", true, leaseID, append(lease, "--identity", "replica-b")...)
	var leader, standby *proc
	var oldID, newID string
	testutil.Eventually(t, time.Minute, "a leader", testutil.Holds(func() bool {
		switch {
		case a.leads():
			leader, standby, oldID, newID = a, b, "replica-a", "replica-b"
		case b.leads():
			leader, standby, oldID, newID = b, a, "replica-b", "replica-a"
		}
		return leader != nil
	}))
	e.drain(t, hooks.node)
	hooks.waitInProgress(t, e)

	t.Logf("freezing the leader %s (SIGSTOP) while it polls the hooks", oldID)
	if err := leader.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	continued := false
	defer func() {
		if !continued {
			_ = leader.cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	testutil.Eventually(t, 2*time.Minute, "the standby to take the Lease", testutil.Holds(standby.leads))
	takeover := e.takeover(t, leaseID, newID)
	t.Logf("%s took the Lease at %s", newID, takeover.Format(time.StampMicro))
	testutil.Eventually(t, time.Minute, "the new leader to call the hooks", testutil.Holds(func() bool {
		return len(hooks.app.callsSince(newID, takeover)) > 0
	}))
	t.Logf("continuing the old leader %s (SIGCONT)", oldID)
	continued = true
	if err := leader.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, "the old leader to exit", testutil.Holds(leader.exited))
	t.Logf("the old leader exited: %v", leader.cmd.ProcessState)

	hooks.complete()
	nd := e.waitDrain(t, hooks.node, "Drained", afterKill, drained)
	t.Logf("drained by the new leader: %s evicted", nd.Status.Progress)

	for _, c := range hooks.app.callsSince(oldID, takeover) {
		t.Errorf("the old leader called a hook (%s) at %s, after the new leader took the Lease", c.method, c.at.Format(time.StampMicro))
	}
	e.checkNoActionAfter(t, oldID, leaseID, takeover)
	hooks.checkNoEarlyEviction(t)
	e.checkOneEvictionPerPod(t, hooks.ns, int(nd.Status.Total))
	hooks.guard.Check(t)
}

// takeover is when the API server recorded that identity took the Lease:
// its first successful write of the Lease.
func (e *env) takeover(t *testing.T, leaseID, identity string) time.Time {
	t.Helper()
	var at time.Time
	testutil.Eventually(t, time.Minute, "the takeover in the audit log", testutil.Holds(func() bool {
		events, err := devcluster.ReadAudit(e.c.AuditLog)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range events {
			if ev.ObjectRef != nil && ev.ObjectRef.Resource == "leases" && ev.ObjectRef.Name == leaseID &&
				strings.Contains(ev.UserAgent, identity) && ev.Succeeded() {
				at = ev.Received
				return true
			}
		}
		return false
	}))
	return at
}

// checkNoActionAfter fails the test for every request that changes
// something (the audit log records no reads) sent by the replica named
// identity and received at or after since, but its own attempts on the
// Lease, which is how it learns that it lost.
func (e *env) checkNoActionAfter(t *testing.T, identity, leaseID string, since time.Time) {
	t.Helper()
	events, err := devcluster.ReadAudit(e.c.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range events {
		if !strings.Contains(ev.UserAgent, identity) || ev.Received.Before(since) {
			continue
		}
		if ev.ObjectRef != nil && ev.ObjectRef.Resource == "leases" && ev.ObjectRef.Name == leaseID {
			continue
		}
		code := 0
		if ev.ResponseStatus != nil {
			code = ev.ResponseStatus.Code
		}
		t.Errorf("the old leader sent %s %s (answered %d) at %s, after the new leader took the Lease",
			ev.Verb, ev.RequestURI, code, ev.Received.Format(time.StampMicro))
		n++
	}
	t.Logf("audit log: %d requests that change something from the old leader after the takeover", n)
}
