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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/hook"
)

// hookApp is an app's evacuation hook served on its simulated pod's own
// loopback IP. Its GET answers follow what the test sets.
type hookApp struct {
	mu        sync.Mutex
	answer    func(w http.ResponseWriter)
	completed bool // it has answered Completed
	posts     []map[string]string
	deletes   int
}

func (a *hookApp) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch r.Method {
	case http.MethodPost:
		body := map[string]string{}
		_ = json.NewDecoder(r.Body).Decode(&body)
		body["query"] = r.URL.Query().Get("drain")
		a.posts = append(a.posts, body)
		w.WriteHeader(http.StatusAccepted)
	case http.MethodDelete:
		a.deletes++
		w.WriteHeader(http.StatusOK)
	default:
		rec := &recorder{ResponseWriter: w}
		a.answer(rec)
		if strings.Contains(rec.body, `"Completed"`) {
			a.completed = true
		}
	}
}

func (a *hookApp) set(answer func(w http.ResponseWriter)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.answer = answer
}

type recorder struct {
	http.ResponseWriter
	body string
}

func (r *recorder) Write(b []byte) (int, error) {
	r.body += string(b)
	return r.ResponseWriter.Write(b)
}

func answer(code int, body string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}
}

// serveHook runs app on the pod's IP and port until the test ends.
func serveHook(t *testing.T, pod *corev1.Pod, port int, app http.Handler) {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(pod.Status.PodIP, fmt.Sprint(port)))
	if err != nil {
		t.Fatalf("listening on the pod's IP: %v", err)
	}
	srv := &http.Server{Handler: app, ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// TestHTTPHookHoldsThePodUntilCompleted: a broker's pod annotated with the
// hook is evicted only after its hook answers Completed; a server error and
// a garbage answer on the way are reported on the drain and not taken as
// done. A drain cancelled mid-evacuation sends DELETE before the node is
// given back.
func TestHTTPHookHoldsThePodUntilCompleted(t *testing.T) {
	e := startEnv(t)
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "hook", Count: 2, Labels: map[string]string{"pool": "hook"}})
	ns := testenv.Namespace(t, e.c)
	create(t, e, &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "hook"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "hook"}},
		Concurrency:  v1alpha1.Concurrency{MaxParallelNodes: ptr.To(intstr.FromInt32(2))},
		HTTPHooks:    v1alpha1.HTTPHooks{Enabled: true},
	}})
	const port = 18080
	apps, pods := startBrokers(t, e, ns, nodes, port)
	target, other := nodes[0], nodes[1]

	// The guard: the broker's pod must not be evicted before its hook said Completed.
	evictedEarly := watchEvictedEarly(t, e, ns, pods[target], apps[target])

	requestAll(t, e, []string{target})
	held := func(detail string) func(*v1alpha1.NodeDrain) bool {
		return func(nd *v1alpha1.NodeDrain) bool {
			for _, b := range nd.Status.Blockers {
				if b.Reason == v1alpha1.BlockerHTTPHook && b.Pod == ns+"/"+pods[target].Name && strings.Contains(b.Detail, detail) {
					return true
				}
			}
			return false
		}
	}
	url := fmt.Sprintf("http://%s:%d/v1/evacuate", pods[target].Status.PodIP, port)
	nd := e.waitDrain(t, target, "held by the hook in progress", time.Minute, held("HTTP hook "+url+": InProgress: forwarding stored messages (120 remaining)"))
	t.Logf("hooks: %+v", nd.Status.Hooks)
	for _, fault := range []struct {
		answer func(http.ResponseWriter)
		shows  string
	}{
		{answer(500, "queue store unavailable"), `HTTP 500: "queue store unavailable"`},
		{answer(200, "not json"), "malformed answer"},
	} {
		apps[target].set(fault.answer)
		e.waitDrain(t, target, "showing "+fault.shows, time.Minute, held(fault.shows))
	}
	apps[target].set(answer(200, `{"state":"Completed","message":"all 120 forwarded","remaining":0}`))
	e.waitDrain(t, target, "Drained", time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
	select {
	case msg := <-evictedEarly:
		t.Error(msg)
	default:
	}
	checkHookPosts(t, apps[target], target)

	t.Log("a drain cancelled mid-evacuation sends DELETE before the node is given back")
	cancelMidEvacuation(t, e, ns, other, apps[other], pods[other])
}

// startBrokers runs on each node a broker: a Deployment of one pod there,
// annotated with its HTTP hook on port, whose hook (served on the pod's IP)
// answers InProgress until the test sets another answer.
func startBrokers(t *testing.T, e *env, ns string, nodes []string, port int) (map[string]*hookApp, map[string]*corev1.Pod) {
	t.Helper()
	ctx := testenv.Context(t)
	apps := map[string]*hookApp{}
	pods := map[string]*corev1.Pod{}
	for _, n := range nodes {
		d := devcluster.Deployment(ns, "broker-"+n, 1)
		d.Spec.Template.Spec.NodeSelector = map[string]string{devcluster.HostnameLabel: n}
		d.Spec.Template.Annotations = map[string]string{hook.AnnotationPort: fmt.Sprint(port), hook.AnnotationPath: "/v1/evacuate"}
		if _, err := e.c.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		ready, err := devcluster.WaitForPodsReady(ctx, e.c.Client, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: "broker-" + n}), 1, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		pods[n] = &ready[0]
		apps[n] = &hookApp{answer: answer(200, `{"state":"InProgress","message":"forwarding stored messages","remaining":120}`)}
		serveHook(t, pods[n], port, apps[n])
		t.Logf("broker on %s serves its hook at %s:%d", n, pods[n].Status.PodIP, port)
	}
	return apps, pods
}

// watchEvictedEarly watches pod until the test ends and sends on the
// channel it returns if the pod is deleted before app's hook answered
// Completed.
func watchEvictedEarly(t *testing.T, e *env, ns string, pod *corev1.Pod, app *hookApp) <-chan string {
	t.Helper()
	wctx, stopWatch := context.WithCancel(context.Background())
	t.Cleanup(stopWatch)
	w, err := e.c.Client.CoreV1().Pods(ns).Watch(wctx, metav1.ListOptions{FieldSelector: "metadata.name=" + pod.Name})
	if err != nil {
		t.Fatal(err)
	}
	evictedEarly := make(chan string, 1)
	go func() {
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && p.DeletionTimestamp != nil {
				app.mu.Lock()
				if !app.completed {
					evictedEarly <- "the broker's pod was evicted before its hook answered Completed"
				}
				app.mu.Unlock()
				return
			}
		}
	}()
	return evictedEarly
}

// checkHookPosts checks that the drain of node started app's evacuation
// with a POST naming the drain (also in ?drain=), the node and the mode.
func checkHookPosts(t *testing.T, app *hookApp, node string) {
	t.Helper()
	app.mu.Lock()
	defer app.mu.Unlock()
	if len(app.posts) == 0 || app.posts[0]["node"] != node || app.posts[0]["mode"] != "Maintenance" || app.posts[0]["drain"] == "" ||
		app.posts[0]["drain"] != app.posts[0]["query"] {
		t.Errorf("POST bodies %v: want drain (also in ?drain=), node %s and mode Maintenance", app.posts, node)
	}
}

// cancelMidEvacuation requests a drain of node, deletes it while the hook
// of the node's broker (app, pod) is in progress, and checks that the hook
// got a DELETE, the node was given back and the broker's pod stayed.
func cancelMidEvacuation(t *testing.T, e *env, ns, node string, app *hookApp, pod *corev1.Pod) {
	t.Helper()
	ctx := testenv.Context(t)
	requestAll(t, e, []string{node})
	e.waitDrain(t, node, "evacuating", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return len(nd.Status.Hooks) == 1 && nd.Status.Hooks[0].Phase == string(v1alpha1.EvacuationInProgress)
	})
	if err := e.cl.Delete(ctx, &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: node}}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(e.cl.Get(ctx, types.NamespacedName{Name: node}, &v1alpha1.NodeDrain{})), nil
	})
	if err != nil {
		t.Fatal("the cancelled drain was not released")
	}
	app.mu.Lock()
	if app.deletes == 0 {
		t.Error("the hook got no DELETE when its drain was cancelled")
	}
	app.mu.Unlock()
	if n, err := e.c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil || n.Spec.Unschedulable {
		t.Errorf("node %s not given back (%v)", node, err)
	}
	if _, err := e.c.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the broker's pod on the cancelled node was evicted: %v", err)
	}
}

// TestHookAndProviderBothComplete: a pod that has the hook annotations and
// is protected by a provider is evicted only when both are Completed.
func TestHookAndProviderBothComplete(t *testing.T) {
	e := startEnv(t)
	ctx := testenv.Context(t)
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "both", Count: 1, Labels: map[string]string{"pool": "both"}})
	ns := testenv.Namespace(t, e.c)
	create(t, e, &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "both"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "both"}},
		HTTPHooks:    v1alpha1.HTTPHooks{Enabled: true},
	}})
	d := devcluster.Deployment(ns, "both-app", 1)
	d.Spec.Template.Spec.NodeSelector = map[string]string{devcluster.HostnameLabel: nodes[0]}
	d.Spec.Template.Annotations = map[string]string{hook.AnnotationPort: "18081"}
	if _, err := e.c.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready, err := devcluster.WaitForPodsReady(ctx, e.c.Client, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: "both-app"}), 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	pod := ready[0]
	app := &hookApp{answer: answer(200, `{"state":"InProgress","message":"flushing","remaining":5}`)}
	serveHook(t, &pod, 18081, app)
	create(t, e, &v1alpha1.EvacuationProvider{ObjectMeta: metav1.ObjectMeta{Name: "both-store"}, Spec: v1alpha1.EvacuationProviderSpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{devcluster.AppLabel: "both-app"}}}})
	store := &slowStore{}
	store.release.Store(true) // the provider finishes at once
	runProvider(t, e.c, "both-store", store)

	requestAll(t, e, nodes)
	e.waitDrain(t, nodes[0], "held by the hook after the provider completed", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		provider, hooked := false, false
		for _, h := range nd.Status.Hooks {
			provider = provider || (h.Name == v1alpha1.EvacuationName(nodes[0], "both-store") && h.Phase == string(v1alpha1.EvacuationCompleted))
			hooked = hooked || (strings.HasPrefix(h.Name, "pod/") && h.Phase == string(v1alpha1.EvacuationInProgress))
		}
		return provider && hooked && len(nd.Status.Blockers) == 1 && nd.Status.Blockers[0].Reason == v1alpha1.BlockerHTTPHook
	})
	time.Sleep(time.Second) // a moment in which a wrong controller would evict it
	if p, err := e.c.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Fatalf("the pod was evicted with its hook still in progress (%v)", err)
	}
	app.set(answer(200, `{"state":"Completed","message":"flushed"}`))
	e.waitDrain(t, nodes[0], "Drained once both completed", time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
}
