package nodedrain_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/hook"
	"github.com/vacate-dev/vacate/internal/operator"
	"github.com/vacate-dev/vacate/internal/requests"
)

// call is one request a hook app received.
type call struct {
	method, local, drain, run string
	bodyRun                   string
}

// runApp is a hook app that records every call; get answers GETs.
type runApp struct {
	mu    sync.Mutex
	calls []call
	get   func(c call, first []call) (int, string)
}

func (a *runApp) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := call{method: r.Method, drain: r.URL.Query().Get("drain"), run: r.URL.Query().Get("run")}
	if addr, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		c.local, _, _ = net.SplitHostPort(addr.String())
	}
	if r.Method == http.MethodPost {
		body := map[string]string{}
		_ = json.NewDecoder(r.Body).Decode(&body)
		c.bodyRun = body["run"]
	}
	a.mu.Lock()
	a.calls = append(a.calls, c)
	calls := a.calls
	a.mu.Unlock()
	switch r.Method {
	case http.MethodPost:
		w.WriteHeader(http.StatusAccepted)
	case http.MethodDelete:
		w.WriteHeader(http.StatusOK)
	default:
		code, body := a.get(c, calls)
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}
}

func (a *runApp) called(method string) []call {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []call
	for _, c := range a.calls {
		if method == "" || c.method == method {
			out = append(out, c)
		}
	}
	return out
}

// hookedDeployment runs replicas pods with the hook annotations on node and
// returns them once ready.
func hookedDeployment(t *testing.T, e *env, ns, name, node string, replicas int32, port int, tune func(*corev1.PodSpec)) []corev1.Pod {
	t.Helper()
	ctx := testenv.Context(t)
	d := devcluster.Deployment(ns, name, replicas)
	d.Spec.Template.Spec.NodeSelector = map[string]string{devcluster.HostnameLabel: node}
	d.Spec.Template.Annotations = map[string]string{hook.AnnotationPort: fmt.Sprint(port)}
	if tune != nil {
		tune(&d.Spec.Template.Spec)
	}
	if _, err := e.c.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready, err := devcluster.WaitForPodsReady(ctx, e.c.Client, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: name}), int(replicas), 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return ready
}

// hookedBarePods creates n pods without a controller, bound to node, with
// an HTTP hook on port, and waits until they are ready.
func hookedBarePods(t *testing.T, e *env, ns, name, node string, n, port int) []corev1.Pod {
	t.Helper()
	ctx := testenv.Context(t)
	errs := make(chan error, n)
	slots := make(chan struct{}, 16) // creates in flight
	for i := range n {
		slots <- struct{}{}
		go func() {
			defer func() { <-slots }()
			p := devcluster.BarePod(ns, fmt.Sprintf("%s-%04d", name, i), node)
			p.Labels[devcluster.AppLabel] = name
			p.Annotations = map[string]string{hook.AnnotationPort: fmt.Sprint(port)}
			_, err := e.c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	ready, err := devcluster.WaitForPodsReady(ctx, e.c.Client, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: name}), n, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return ready
}

func hookPolicy(t *testing.T, e *env, name string, tune func(*v1alpha1.DrainPolicySpec)) {
	t.Helper()
	spec := v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": name}},
		HTTPHooks:    v1alpha1.HTTPHooks{Enabled: true},
	}
	if tune != nil {
		tune(&spec)
	}
	create(t, e, &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec})
}

// blockedBy reports whether the drain shows a blocker for pod with reason
// and a detail that says each of words.
func blockedBy(pod, reason string, words ...string) func(*v1alpha1.NodeDrain) bool {
	return func(nd *v1alpha1.NodeDrain) bool {
		for _, b := range nd.Status.Blockers {
			if b.Pod != pod || b.Reason != reason {
				continue
			}
			all := true
			for _, w := range words {
				all = all && strings.Contains(b.Detail, w)
			}
			if all {
				return true
			}
		}
		return false
	}
}

// TestHookNeverCallsHostNetworkPods: a hostNetwork pod's IP is the node's;
// its hook is never called, and the pod is held with a blocker that says
// why and the way out, not evicted as if its data had moved.
func TestHookNeverCallsHostNetworkPods(t *testing.T) {
	e := startEnv(t)
	ctx := testenv.Context(t)
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "hostnet", Count: 1, Labels: map[string]string{"pool": "hostnet"}})
	ns := testenv.Namespace(t, e.c)
	hookPolicy(t, e, "hostnet", nil)
	const port = 18391
	pods := hookedDeployment(t, e, ns, "node-agent", nodes[0], 1, port, func(s *corev1.PodSpec) { s.HostNetwork = true })
	pod := pods[0]
	app := &runApp{get: func(call, []call) (int, string) { return 200, `{"state":"Completed"}` }}
	if ip := net.ParseIP(pod.Status.PodIP); ip != nil && ip.IsLoopback() {
		serveHook(t, &pod, port, app)
		t.Logf("the hostNetwork pod has IP %s; a hook server listens there", pod.Status.PodIP)
	}
	requestAll(t, e, nodes)
	nd := e.waitDrain(t, nodes[0], "holding the hostNetwork pod", 2*time.Minute,
		blockedBy(ns+"/"+pod.Name, "HTTPHookRefused", "hostNetwork", "timeouts.evacuation"))
	t.Logf("blockers: %+v", nd.Status.Blockers)
	time.Sleep(2 * time.Second) // passes in which a wrong controller would call or evict
	if calls := app.called(""); len(calls) > 0 {
		t.Errorf("the hook of a hostNetwork pod was called: %+v", calls)
	}
	if p, err := e.c.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Errorf("the hostNetwork pod was evicted without its hook (%v)", err)
	}
}

// TestHookLoopbackNeedsTheFlag: without --allow-loopback-hooks a pod on a
// loopback IP is never called: it is held (HTTPHookRefused) until
// timeouts.evacuation ends the drain Failed, with the pod in place.
func TestHookLoopbackNeedsTheFlag(t *testing.T) {
	c := testenv.Start(t)
	e := &env{c: c, cl: testenv.Controller(t, c, func(o *operator.Options) { o.Controllers.AllowLoopbackHooks = false })}
	ctx := testenv.Context(t)
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "noloop", Count: 1, Labels: map[string]string{"pool": "noloop"}})
	ns := testenv.Namespace(t, e.c)
	hookPolicy(t, e, "noloop", func(s *v1alpha1.DrainPolicySpec) {
		s.Timeouts.Evacuation = &metav1.Duration{Duration: 20 * time.Second}
	})
	const port = 18392
	pod := hookedDeployment(t, e, ns, "loop-app", nodes[0], 1, port, nil)[0]
	app := &runApp{get: func(call, []call) (int, string) { return 200, `{"state":"Completed"}` }}
	serveHook(t, &pod, port, app)
	requestAll(t, e, nodes)
	e.waitDrain(t, nodes[0], "holding the pod on a loopback IP", 2*time.Minute,
		blockedBy(ns+"/"+pod.Name, "HTTPHookRefused", "loopback", "--allow-loopback-hooks"))
	e.waitDrain(t, nodes[0], "Failed at timeouts.evacuation", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == v1alpha1.PhaseFailed
	})
	if calls := app.called(""); len(calls) > 0 {
		t.Errorf("a loopback hook was called without --allow-loopback-hooks: %+v", calls)
	}
	if p, err := e.c.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Errorf("the pod was evicted without its hook (%v)", err)
	}
}

// TestHookRunIdentity: every call names the run beside the drain; an undo
// DELETEs with the run that was called; the drain requested again is a new
// run, and an app still answering Completed for the earlier run is not
// believed.
func TestHookRunIdentity(t *testing.T) {
	e := startEnv(t)
	ctx := testenv.Context(t)
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "runid", Count: 1, Labels: map[string]string{"pool": "runid"}})
	ns := testenv.Namespace(t, e.c)
	hookPolicy(t, e, "runid", nil)
	const port = 18393
	pod := hookedDeployment(t, e, ns, "stale-app", nodes[0], 1, port, nil)[0]
	// The PDB keeps the pod on the node once its hook Completed.
	if _, err := e.c.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, devcluster.PDB(ns, "stale-app", "stale-app", "1", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The app remembers only the first run it was asked for, and keeps
	// answering Completed for it.
	app := &runApp{get: func(_ call, calls []call) (int, string) {
		for _, c := range calls {
			if c.method == http.MethodPost {
				return 200, fmt.Sprintf(`{"state":"Completed","run":%q}`, c.bodyRun)
			}
		}
		return 404, ""
	}}
	serveHook(t, &pod, port, app)
	name := ns + "/" + pod.Name
	requestAll(t, e, nodes)
	nd := e.waitDrain(t, nodes[0], "hook Completed, the pod waiting on its PDB", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.RunID != "" && len(nd.Status.Hooks) == 1 && nd.Status.Hooks[0].Phase == string(v1alpha1.EvacuationCompleted) &&
			blockedBy(name, "PodDisruptionBudget")(nd)
	})
	run1 := nd.Status.RunID
	for _, c := range app.called("") {
		if c.run != run1 || c.drain != string(nd.UID) || (c.method == http.MethodPost && c.bodyRun != run1) {
			t.Fatalf("call %+v: want drain %s and run %s on every call (query and POST body)", c, nd.UID, run1)
		}
	}

	t.Log("the requester leaves: the undo DELETEs the run it called")
	if _, err := requests.Withdraw(ctx, e.cl, nd, "cli:test"); err != nil {
		t.Fatal(err)
	}
	e.waitDrain(t, nodes[0], "undone", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == v1alpha1.PhasePending && len(nd.Spec.Requesters) == 0
	})
	deletes := app.called(http.MethodDelete)
	if len(deletes) == 0 || deletes[0].run != run1 {
		t.Fatalf("DELETEs %+v: want one for run %s", deletes, run1)
	}

	t.Log("requested again: a new run; the app's Completed for the earlier run is not taken")
	requestAll(t, e, nodes)
	nd = e.waitDrain(t, nodes[0], "a new run, held by the stale answer", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.RunID != "" && nd.Status.RunID != run1 &&
			blockedBy(name, "HTTPHook", "the answer is about run \""+run1+"\"")(nd)
	})
	if h := nd.Status.Hooks; len(h) != 1 || h[0].Phase == string(v1alpha1.EvacuationCompleted) {
		t.Errorf("hooks %+v: the earlier run's Completed was taken for the new run", h)
	}
	if p, err := e.c.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Errorf("the pod was evicted on an earlier run's Completed (%v)", err)
	}
}

// serveAll answers the hook protocol on port for every loopback address
// (one listener on all addresses, the pods told apart by the local
// address of each connection).
func serveAll(t *testing.T, port int, app http.Handler) {
	t.Helper()
	ln, err := net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", port))
	if err != nil {
		t.Fatalf("listening on port %d: %v", port, err)
	}
	srv := &http.Server{Handler: app, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// TestHookCancelAfterRestart: 60 pods whose hooks accepted a POST (more
// than status.hooks lists); the controller restarts, then the drain is
// cancelled: every one of them gets a DELETE from the new controller.
func TestHookCancelAfterRestart(t *testing.T) {
	c := testenv.Start(t)
	e := &env{c: c, cl: testenv.DrainClient(t, c)}
	ctx := testenv.Context(t)
	opts := operator.InProcessOptions()
	opts.Controllers.AllowLoopbackHooks = true
	stop, err := operator.Start(context.Background(), c.RESTConfig, opts)
	if err != nil {
		t.Fatal(err)
	}
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "restart", Count: 1, Labels: map[string]string{"pool": "restart"}})
	ns := testenv.Namespace(t, e.c)
	hookPolicy(t, e, "restart", nil)
	const port, n = 18394, 60
	addrs := logAddresses(t, e, ns)
	pods := hookedDeployment(t, e, ns, "slow-app", nodes[0], n, port, nil)
	app := &runApp{get: func(call, []call) (int, string) { return 200, `{"state":"InProgress","message":"moving"}` }}
	serveAll(t, port, app)
	requestAll(t, e, nodes)
	e.waitDrain(t, nodes[0], "every hook in progress", 3*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		in := 0
		for _, h := range nd.Status.Hooks {
			if h.Phase == string(v1alpha1.EvacuationInProgress) {
				in++
			}
		}
		return in+int(nd.Status.HooksOmitted) == n && in > 0 && nd.Status.Phase == v1alpha1.PhaseEvacuating
	})
	waitCalls(t, app, addrs, http.MethodPost, pods, "a POST")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	t.Log("controller stopped; a new one starts and the drain is cancelled")
	stop2, err := operator.Start(context.Background(), c.RESTConfig, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stop2() })
	nd := &v1alpha1.NodeDrain{}
	if err := e.cl.Get(ctx, types.NamespacedName{Name: nodes[0]}, nd); err != nil {
		t.Fatal(err)
	}
	if _, err := requests.Withdraw(ctx, e.cl, nd, "cli:test"); err != nil {
		t.Fatal(err)
	}
	e.waitDrain(t, nodes[0], "undone", 3*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == v1alpha1.PhasePending && len(nd.Spec.Requesters) == 0
	})
	waitCalls(t, app, addrs, http.MethodDelete, pods, "a DELETE")
	for _, p := range pods {
		if got, err := e.c.Client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{}); err != nil || got.DeletionTimestamp != nil {
			t.Errorf("pod %s was evicted (%v)", p.Name, err)
		}
	}
}

// addressLog records every address each pod of a namespace had. kwok can
// give a pod a second address when it plays its ready stage twice (its
// informer still showing the pod without one), and the drain calls the
// hook at the address its cache shows then: a hook's call counts when it
// reached any address its pod had.
type addressLog struct {
	mu    sync.Mutex
	addrs map[string]map[string]bool // pod name -> addresses
}

// logAddresses follows the pods of ns from now until the test ends: start
// it before the pods are created.
func logAddresses(t *testing.T, e *env, ns string) *addressLog {
	t.Helper()
	ctx, cancel := context.WithCancel(testenv.Context(t))
	// An informer, not a bare watch: the API server may end a watch (a
	// timeout, a restart, a slow client under load), and every address a
	// pod gets after that must still be logged; the informer watches again
	// from where it was, or lists again.
	lw := cache.NewListWatchFromClient(e.c.Client.CoreV1().RESTClient(), "pods", ns, fields.Everything())
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	l := &addressLog{addrs: map[string]map[string]bool{}}
	log := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			l.add(p.Name, p.Status.PodIP)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: log, UpdateFunc: func(_, obj any) { log(obj) }}); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		inf.RunWithContext(ctx)
	}()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		cancel()
		t.Fatal("the pods' informer did not sync")
	}
	t.Cleanup(func() { cancel(); <-done })
	return l
}

func (l *addressLog) add(pod, addr string) {
	if addr == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.addrs[pod] == nil {
		l.addrs[pod] = map[string]bool{}
	}
	l.addrs[pod][addr] = true
}

// of is every address the pod had: the one the test read, and any other
// the log saw.
func (l *addressLog) of(p corev1.Pod) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := []string{p.Status.PodIP}
	for a := range l.addrs[p.Name] {
		if a != p.Status.PodIP {
			out = append(out, a)
		}
	}
	return out
}

// moved counts the pods that had more than one address.
func (l *addressLog) moved() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, a := range l.addrs {
		if len(a) > 1 {
			n++
		}
	}
	return n
}

// waitCalls waits until every pod got a call of method at an address it
// had.
func waitCalls(t *testing.T, app *runApp, addrs *addressLog, method string, pods []corev1.Pod, what string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		got := map[string]bool{}
		for _, c := range app.called(method) {
			got[c.local] = true
		}
		var missing []string
		for _, p := range pods {
			called := false
			for _, a := range addrs.of(p) {
				called = called || got[a]
			}
			if !called {
				missing = append(missing, p.Name)
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d hooks never got %s: %v; %s", len(missing), len(pods), what, missing[:min(5, len(missing))], seenAt(app, addrs, pods, got))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// seenAt says, for the first pods none of whose addresses got a call of
// the kind waited for, what their addresses got instead (another method:
// the conversation went wrong; nothing: the calls went to another address
// than the pod ever had), and how many addresses the test's pods share.
func seenAt(app *runApp, addrs *addressLog, pods []corev1.Pod, got map[string]bool) string {
	byAddr := map[string][]string{}
	for _, c := range app.called("") {
		byAddr[c.local] = append(byAddr[c.local], c.method)
	}
	var b strings.Builder
	shown, ips := 0, map[string]int{}
	for _, p := range pods {
		ips[p.Status.PodIP]++
		called := false
		for _, a := range addrs.of(p) {
			called = called || got[a]
		}
		if called || shown == 5 {
			continue
		}
		shown++
		fmt.Fprintf(&b, "%s at %v got", p.Name, addrs.of(p))
		for _, a := range addrs.of(p) {
			fmt.Fprintf(&b, " %v", byAddr[a])
		}
		b.WriteString("; ")
	}
	fmt.Fprintf(&b, "%d pods on %d addresses, %d addresses called in all", len(pods), len(ips), len(byAddr))
	return b.String()
}

// TestThousandHookedPods drains one node with 1,000 pods that each have an
// HTTP hook: the NodeDrain's status stays under 256 KiB at every version
// seen, no write of it is refused (the audit log shows nothing but 409
// Conflicts among the failed ones), and the drain reaches Drained.
func TestThousandHookedPods(t *testing.T) {
	e := startEnv(t)
	ctx := testenv.Context(t)
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "thousand", Count: 1, Pods: 1100, Labels: map[string]string{"pool": "thousand"}})
	ns := testenv.Namespace(t, e.c)
	// Bare pods, bound to the node: no ReplicaSet, scheduler or replacement
	// pods, which cost the control plane more than the drain itself.
	hookPolicy(t, e, "thousand", func(spec *v1alpha1.DrainPolicySpec) { spec.Pods.Unmanaged = "Delete" })
	const port, n = 18395, 1000
	app := &runApp{get: func(call, []call) (int, string) { return 200, `{"state":"Completed","message":"moved"}` }}
	serveAll(t, port, app)
	addrs := logAddresses(t, e, ns)
	pods := hookedBarePods(t, e, ns, "many", nodes[0], n, port)
	t.Logf("%d hooked pods ready on %s", len(pods), nodes[0])

	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	w, err := e.cl.(client.WithWatch).Watch(wctx, &v1alpha1.NodeDrainList{}, client.MatchingFields{"metadata.name": nodes[0]})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	largest, versions, maxHooks := 0, 0, 0
	go func() {
		for ev := range w.ResultChan() {
			nd, ok := ev.Object.(*v1alpha1.NodeDrain)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			b, _ := json.Marshal(nd.Status)
			mu.Lock()
			largest, versions, maxHooks = max(largest, len(b)), versions+1, max(maxHooks, len(nd.Status.Hooks))
			mu.Unlock()
		}
	}()
	requestAll(t, e, nodes)
	nd := e.waitDrain(t, nodes[0], "Drained", 15*time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
	stopWatch()
	mu.Lock()
	t.Logf("%d status versions seen, the largest %d bytes; at most %d entries in status.hooks; evicted %d", versions, largest, maxHooks, nd.Status.Evicted)
	if largest >= 256<<10 {
		t.Errorf("status reached %d bytes, want under 256 KiB", largest)
	}
	mu.Unlock()
	if nd.Status.Evicted != n {
		t.Errorf("evicted %d, want %d", nd.Status.Evicted, n)
	}
	waitCalls(t, app, addrs, http.MethodPost, pods, "a POST")
	t.Logf("%d of %d pods had more than one address (kwok)", addrs.moved(), n)

	events, err := devcluster.ReadAudit(e.c.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	writes, conflicts := 0, 0
	for _, ev := range events {
		ref := ev.ObjectRef
		if ref == nil || ref.Resource != "nodedrains" || ref.Subresource != "status" || ref.Name != nodes[0] || (ev.Verb != "patch" && ev.Verb != "update") {
			continue
		}
		switch {
		case ev.Succeeded():
			writes++
		case ev.ResponseStatus != nil && ev.ResponseStatus.Code == http.StatusConflict:
			conflicts++
		default:
			code := 0
			if ev.ResponseStatus != nil {
				code = ev.ResponseStatus.Code
			}
			t.Errorf("a status write of NodeDrain %s was refused: %s %s -> %d", nodes[0], ev.Verb, ev.RequestURI, code)
		}
	}
	t.Logf("audit: %d status writes succeeded, %d conflicts", writes, conflicts)
}
