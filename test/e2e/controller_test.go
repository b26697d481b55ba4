// Package e2e runs vacate-controller as a real process against the dev
// cluster and kills it, to show that drains resume and leadership moves.
// The tests run one after another: a controller acts on every NodeDrain of
// the cluster, so two tests' controllers must never run at once.
package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/config/rbac"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	leaderpkg "github.com/vacate-dev/vacate/internal/leader"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

const testLabel = "vacate.dev/test"

// goBinary builds cmd/<name> once for the package and returns its path.
func goBinary(t *testing.T, name string) string {
	t.Helper()
	return testutil.Program(t, "github.com/vacate-dev/vacate/cmd/"+name)
}

// controllerBinary builds vacate-controller once for the package.
func controllerBinary(t *testing.T) string { return goBinary(t, "vacate-controller") }

// proc is a running vacate-controller.
type proc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when the process has exited

	mu sync.Mutex
	// forbiddenUntil: refusals logged before it are not RBAC's fault (a
	// restarted API server refuses everyone while its authorizer loads).
	forbiddenUntil time.Time
}

// controllerUser is who vacate-controller runs as in these tests: a user
// bound to the generated ClusterRole and nothing else, so the tests also show
// that config/rbac grants what the controller needs.
const controllerUser = "vacate:controller"

// controllerKubeconfig binds controllerUser to the ClusterRole
// vacate-controller, to the Role vacate-controller for the Lease named
// lease in kube-system (where these tests hold it) and to the Role
// vacate-controller in vacate-system (its hook tokens), and returns a
// kubeconfig for it.
func controllerKubeconfig(t *testing.T, c *devcluster.Cluster, lease string) string {
	t.Helper()
	ctx := testenv.Context(t)
	role, err := rbac.ControllerRole()
	if err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: controllerUser}},
	}
	leaseRole, err := rbac.LeaderElectionRole("kube-system", lease)
	if err != nil {
		t.Fatal(err)
	}
	leaseRole.Name = "vacate-controller-" + lease
	leaseBinding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: leaseRole.Namespace, Name: leaseRole.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: leaseRole.Name},
		Subjects:   binding.Subjects,
	}
	// The Role vacate-controller as shipped, in vacate-system: it lets the
	// controller request its service account's tokens for HTTP hooks.
	ownRole, err := rbac.LeaderElectionRole(rbac.Namespace, rbac.LeaseName)
	if err != nil {
		t.Fatal(err)
	}
	ownBinding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ownRole.Namespace, Name: ownRole.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: ownRole.Name},
		Subjects:   binding.Subjects,
	}
	if err := devcluster.InstallControllerIdentity(ctx, c.RESTConfig); err != nil {
		t.Fatal(err)
	}
	for _, obj := range []client.Object{role, binding, leaseRole, leaseBinding, ownRole, ownBinding} {
		err := client.IgnoreAlreadyExists(testenv.DrainClient(t, c).Create(ctx, obj))
		if err != nil {
			t.Fatal(err)
		}
	}
	path, err := c.KubeconfigFor(controllerUser)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func startController(t *testing.T, c *devcluster.Cluster, name string, leaderElect bool, leaseID string, extra ...string) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--kubeconfig", controllerKubeconfig(t, c, leaseID),
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0",
		fmt.Sprintf("--leader-elect=%t", leaderElect), "--leader-election-id", leaseID,
		"--leader-election-namespace", "kube-system",
		"--leader-election-lease-duration", "4s", "--leader-election-renew-deadline", "3s",
		"--leader-election-retry-period", "500ms",
		"--allow-loopback-hooks"} // the dev cluster's pods live on 127.0.0.0/8
	cmd := exec.Command(controllerBinary(t), append(args, extra...)...) // later flags win
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if line := p.forbidden(); line != "" {
			t.Errorf("controller %s was refused by RBAC (see its log): config/rbac lacks a permission:\n%s", name, line)
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("log of %s:\n%s", name, tailLines(string(b), 40))
		}
	})
	return p
}

// kill sends SIGKILL: no cleanup, no lease release, as a crash would.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// tolerateForbiddenUntil accepts refusals logged before until.
func (p *proc) tolerateForbiddenUntil(until time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.forbiddenUntil = until
}

// forbidden returns the first log line where the API server refused the
// controller, but those before forbiddenUntil; "" if none.
func (p *proc) forbidden() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, _ := os.ReadFile(p.log)
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(strings.ToLower(line), "forbidden") {
			continue
		}
		var entry struct {
			TS time.Time `json:"ts"`
		}
		if json.Unmarshal([]byte(line), &entry) == nil && !entry.TS.IsZero() && !entry.TS.After(p.forbiddenUntil) {
			continue
		}
		return tailLines(line, 1)
	}
	return ""
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) leads() bool {
	b, _ := os.ReadFile(p.log)
	return bytes.Contains(bytes.ToLower(b), []byte("successfully acquired lease"))
}

type env struct {
	c  *devcluster.Cluster
	cl client.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	c := testenv.Start(t)
	return &env{c: c, cl: testenv.DrainClient(t, c)}
}

// workload creates a Deployment of n pods on the test's nodes behind a PDB
// and returns the node with the most of them.
func (e *env) workload(t *testing.T, prefix string, nodes, pods int32, maxUnavailable string) (string, string) {
	t.Helper()
	return e.annotatedWorkload(t, prefix, nodes, pods, maxUnavailable, nil)
}

// annotatedWorkload is workload with annotations on the pods.
func (e *env) annotatedWorkload(t *testing.T, prefix string, nodes, pods int32, maxUnavailable string, annotations map[string]string) (string, string) {
	t.Helper()
	ctx := testenv.Context(t)
	sel := map[string]string{testLabel: prefix}
	names := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: prefix, Count: int(nodes), Labels: sel})
	ns := testenv.Namespace(t, e.c)
	dep := devcluster.Deployment(ns, "web", pods)
	dep.Spec.Template.Spec.NodeSelector = sel
	dep.Spec.Template.Annotations = annotations
	if _, err := e.c.Client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, devcluster.PDB(ns, "web", "web", "", maxUnavailable), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.WaitForPodsReady(ctx, e.c.Client, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: "web"}), int(pods), 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.WaitForPDB(ctx, e.c.Client, ns, "web", pods, time.Minute); err != nil {
		t.Fatal(err)
	}
	best, most := "", -1
	for _, n := range names {
		list, err := e.c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) > most {
			best, most = n, len(list.Items)
		}
	}
	t.Logf("%d pods on %s, the node to drain", most, best)
	return ns, best
}

func (e *env) drain(t *testing.T, node string) { e.drainUnder(t, node, "") }

// drainUnder requests a drain of node under the DrainPolicy policyName
// ("": the one that selects the node).
func (e *env) drainUnder(t *testing.T, node, policyName string) {
	t.Helper()
	nd := testutil.NodeDrain(node, policyName, "cli:e2e")
	if err := e.cl.Create(testenv.Context(t), nd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The controller may be dead: drop the finalizer so the object goes.
		ctx := context.Background()
		_ = e.cl.Delete(ctx, nd)
		_ = e.cl.Patch(ctx, nd, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})
}

func (e *env) waitDrain(t *testing.T, name, what string, timeout time.Duration, cond func(*v1alpha1.NodeDrain) bool) *v1alpha1.NodeDrain {
	t.Helper()
	return testenv.WaitForDrain(t, e.cl, name, what, timeout, cond, func(nd *v1alpha1.NodeDrain) string {
		return fmt.Sprintf("phase %s progress %s", nd.Status.Phase, nd.Status.Progress)
	})
}

// checkOneEvictionPerPod reads the API server's audit log: no pod of ns was
// evicted successfully more than once, only the controller evicted, and it
// made eviction calls for at least atLeast pods.
func (e *env) checkOneEvictionPerPod(t *testing.T, ns string, atLeast int) {
	t.Helper()
	events, err := devcluster.ReadAudit(e.c.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	// A pod counts as asked to leave when the controller made an eviction
	// call for it, whatever the answer: a call cut off by a SIGKILL is
	// recorded with 504 (the client went away), although the API server
	// may have evicted the pod before it noticed.
	asked := map[string]bool{}
	for _, ev := range events {
		if ev.ObjectRef == nil || ev.ObjectRef.Subresource != "eviction" || ev.ObjectRef.Namespace != ns {
			continue
		}
		if ev.Succeeded() && ev.User.Username != controllerUser {
			t.Errorf("pod %s evicted by %q, want %q", ev.ObjectRef.Name, ev.User.Username, controllerUser)
		}
		if ev.User.Username == controllerUser {
			asked[ev.ObjectRef.Name] = true
		}
	}
	evicted := 0
	for pod, n := range devcluster.SuccessfulEvictions(events) {
		if !strings.HasPrefix(pod, ns+"/") {
			continue
		}
		evicted++
		if n > 1 {
			t.Errorf("pod %s was evicted successfully %d times", pod, n)
		}
	}
	t.Logf("audit log: %d pods of %s evicted, each once; %d asked to leave", evicted, ns, len(asked))
	if len(asked) < atLeast {
		t.Errorf("the audit log shows eviction calls for %d pods, want at least %d", len(asked), atLeast)
	}
}

func drained(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained }

// afterKill bounds the wait for a drain to finish after its controller was
// killed. A SIGKILL can cut an eviction request after the API server has
// counted the disruption in the PDB's status.disruptedPods but before it
// deleted the pod; the PDB then allows one disruption less until that entry
// expires, two minutes later (seen here: 504s in the audit log at the kill,
// then 429s until the expiry). vacate cannot shorten that; the drain resumes.
// The tests that fault a drain part way (faultMidDrain, TestLeaderFailover)
// hold the evictions first (holdEvictions), so their fault lands between two
// eviction calls and they do not wait those two minutes.
const afterKill = 4 * time.Minute

// holdEvictions makes the workload's PDB (web in ns, maxUnavailable 1) allow
// no eviction and waits until none can be half done: the disruption
// controller has seen the change, allows nothing, and counts no pod in
// disruptedPods (an eviction accepted before the change has deleted its
// pod). A controller killed, or an API server frozen or restarted, after
// that cannot cut an eviction short between the PDB's update and the pod's
// deletion. The returned func lets evictions go on (maxUnavailable 1 again).
func (e *env) holdEvictions(t *testing.T, ns string) (release func()) {
	t.Helper()
	e.setMaxUnavailable(t, ns, 0)
	testutil.Eventually(t, time.Minute, "the PDB to allow nothing, with no eviction half done", func() error {
		pdb, err := e.c.Client.PolicyV1().PodDisruptionBudgets(ns).Get(testenv.Context(t), "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if s := pdb.Status; s.ObservedGeneration != pdb.Generation || s.DisruptionsAllowed != 0 || len(s.DisruptedPods) != 0 {
			return fmt.Errorf("generation %d observed %d, %d allowed, disrupted %v", pdb.Generation, s.ObservedGeneration, s.DisruptionsAllowed, s.DisruptedPods)
		}
		return nil
	})
	t.Log("the PDB holds the evictions; none is under way")
	return func() {
		t.Log("the PDB lets evictions go on")
		e.setMaxUnavailable(t, ns, 1)
	}
}

// setMaxUnavailable sets the maxUnavailable of the workload's PDB.
func (e *env) setMaxUnavailable(t *testing.T, ns string, n int) {
	t.Helper()
	patch := []byte(fmt.Sprintf(`{"spec":{"maxUnavailable":%d}}`, n))
	if _, err := e.c.Client.PolicyV1().PodDisruptionBudgets(ns).Patch(testenv.Context(t), "web", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// slowEvictions slows a controller's evictions so that a test can act while
// a drain is part way: on kwok a PDB of maxUnavailable 1 lets a node of 8 pods
// drain in under a second at the default rate.
var slowEvictions = []string{"--eviction-qps", "2", "--eviction-burst", "1"}

// TestResumeAfterKillBetweenCordonAndFirstEviction kills the controller
// while a PDB holds every eviction back, relaxes the PDB while no controller
// runs, and starts a new one: it finishes the drain.
func TestResumeAfterKillBetweenCordonAndFirstEviction(t *testing.T) {
	e := newEnv(t)
	ns, node := e.workload(t, "resume-a", 2, 6, "0")
	guard := testenv.WatchPDBs(t, e.c, ns)
	first := startController(t, e.c, "first", false, "resume-a")
	e.drain(t, node)
	e.waitDrain(t, node, "cordoned and blocked", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionBlocked)
		return c != nil && c.Status == metav1.ConditionTrue && nd.Status.Evicted == 0
	})
	t.Log("killing the controller (SIGKILL) after cordon, before any eviction")
	first.kill()
	e.setMaxUnavailable(t, ns, 1)
	t.Log("starting a new controller")
	startController(t, e.c, "second", false, "resume-a")
	nd := e.waitDrain(t, node, "Drained", 2*time.Minute, drained)
	t.Logf("drained: %s evicted", nd.Status.Progress)
	e.checkOneEvictionPerPod(t, ns, int(nd.Status.Total))
	guard.Check(t)
}

// TestResumeAfterKillMidEvictions kills the controller after some pods were
// evicted; a new one finishes without evicting any pod twice.
func TestResumeAfterKillMidEvictions(t *testing.T) {
	newEnv(t).faultMidDrain(t, "resume-b", func(e *env, first *proc) {
		t.Log("killing the controller (SIGKILL) in the middle of the evictions")
		first.kill()
		startController(t, e.c, "second", false, "resume-b")
	})
}

// faultMidDrain drains the node of a fresh workload (16 pods, a PDB of
// maxUnavailable 1) with one controller, calls fault once some pods are
// evicted (between two eviction calls: holdEvictions), and checks that the
// drain finishes, every pod evicted at most once, and no PDB dipped.
func (e *env) faultMidDrain(t *testing.T, name string, fault func(e *env, ctrl *proc)) {
	t.Helper()
	ns, node := e.workload(t, name, 2, 16, "1")
	guard := testenv.WatchPDBs(t, e.c, ns)
	ctrl := startController(t, e.c, name, false, name, slowEvictions...)
	e.drain(t, node)
	e.waitDrain(t, node, "part way", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Evicted >= 2 && nd.Status.Remaining > 0
	})
	release := e.holdEvictions(t, ns)
	fault(e, ctrl)
	release()
	nd := e.waitDrain(t, node, "Drained", afterKill, drained)
	t.Logf("drained: %s evicted", nd.Status.Progress)
	e.checkOneEvictionPerPod(t, ns, int(nd.Status.Total))
	guard.Check(t)
}

// TestLeaderFailover runs two controllers with leader election; killing the
// leader mid-drain, the other takes over within the lease duration and
// finishes the drain.
func TestLeaderFailover(t *testing.T) {
	e := newEnv(t)
	ns, node := e.workload(t, "leader", 2, 16, "1")
	guard := testenv.WatchPDBs(t, e.c, ns)
	a := startController(t, e.c, "a", true, "failover", slowEvictions...)
	b := startController(t, e.c, "b", true, "failover", slowEvictions...)
	var leader, standby *proc
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		switch {
		case a.leads():
			leader, standby = a, b
		case b.leads():
			leader, standby = b, a
		}
		return leader != nil, nil
	})
	if err != nil {
		t.Fatal("no controller became leader")
	}
	e.drain(t, node)
	e.waitDrain(t, node, "part way", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Evicted >= 2 && nd.Status.Remaining > 0
	})
	if standby.leads() {
		t.Fatal("both controllers say they lead")
	}
	release := e.holdEvictions(t, ns)
	t.Log("killing the leader (SIGKILL)")
	killed := time.Now()
	leader.kill()
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return standby.leads(), nil
	})
	if err != nil {
		t.Fatal("the standby never took the lease")
	}
	release()
	took := time.Since(killed)
	t.Logf("the standby took over %s after the leader died (lease duration 4s)", took.Round(100*time.Millisecond))
	lease, err := e.c.Client.CoordinationV1().Leases("kube-system").Get(testenv.Context(t), "failover", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lease holder now %s, transitions %d", ptrString(lease.Spec.HolderIdentity), ptrInt(lease.Spec.LeaseTransitions))
	// The leader says on its Lease which build it is, for `vacate version`.
	if got := lease.Labels[leaderpkg.LabelVersion]; got != testutil.ProgramVersion || lease.Labels[leaderpkg.LabelName] != leaderpkg.ControllerName {
		t.Errorf("the leader's Lease is labelled %v, want %s=%s and %s=%s", lease.Labels,
			leaderpkg.LabelName, leaderpkg.ControllerName, leaderpkg.LabelVersion, testutil.ProgramVersion)
	}
	// And whether it coordinates EvictionRequests: the suite's cluster does
	// not serve the API.
	if got := lease.Labels[leaderpkg.LabelEvictionRequests]; got != leaderpkg.EvictionRequestsNotServed {
		t.Errorf("the leader's Lease says %s=%q, want %q", leaderpkg.LabelEvictionRequests, got, leaderpkg.EvictionRequestsNotServed)
	}
	nd := e.waitDrain(t, node, "Drained", afterKill, drained)
	t.Logf("drained by the new leader: %s evicted", nd.Status.Progress)
	e.checkOneEvictionPerPod(t, ns, int(nd.Status.Total))
	guard.Check(t)
	var pods corev1.PodList
	if err := e.cl.List(testenv.Context(t), &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName == node && p.DeletionTimestamp == nil {
			t.Errorf("pod %s still on the drained node", p.Name)
		}
	}
}

func ptrString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func ptrInt(i *int32) int32 {
	if i == nil {
		return 0
	}
	return *i
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestMetricsAndProbes scrapes /metrics after a drain and calls the probes.
func TestMetricsAndProbes(t *testing.T) {
	e := newEnv(t)
	ns, node := e.workload(t, "metrics", 2, 4, "0")
	guard := testenv.WatchPDBs(t, e.c, ns)
	metricsAddr, probeAddr := testutil.FreeAddr(t), testutil.FreeAddr(t)
	startController(t, e.c, "metrics", false, "metrics",
		"--metrics-bind-address", metricsAddr, "--health-probe-bind-address", probeAddr)
	// Under a DrainPolicy of its own: the drain metrics carry its name.
	pol := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "metrics-pool"}}
	if err := e.cl.Create(testenv.Context(t), pol); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cl.Delete(context.Background(), pol) })
	e.drainUnder(t, node, pol.Name)
	blocked := e.waitDrain(t, node, "blocked by the PDB", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Blocked > 0 && nd.Status.Blocked == nd.Status.Remaining
	})
	wantBlocked := fmt.Sprintf(`vacate_pods_blocked{reason="PodDisruptionBudget"} %d`, blocked.Status.Blocked)
	waitMetric(t, metricsAddr, wantBlocked)
	patch := []byte(`{"spec":{"maxUnavailable":1}}`)
	if _, err := e.c.Client.PolicyV1().PodDisruptionBudgets(ns).Patch(testenv.Context(t), "web", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	nd := e.waitDrain(t, node, "Drained", time.Minute, drained)
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, _ := get(t, "http://"+probeAddr+path); code != 200 {
			t.Errorf("%s answered %d", path, code)
		}
	}
	// The controller counts a transition right after writing it, so a
	// client can see Drained a moment before the counter moves.
	// The drain's DrainPolicy is a label of the drain metrics.
	if nd.Status.Policy != pol.Name {
		t.Errorf("status.policy %q, want %s", nd.Status.Policy, pol.Name)
	}
	waitMetric(t, metricsAddr, fmt.Sprintf(`vacate_drains_total{policy=%q,result="Drained"} 1`, nd.Status.Policy))
	code, body := get(t, "http://"+metricsAddr+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics answered %d", code)
	}
	want := []string{
		`vacate_drain_admissions_total 1`,
		fmt.Sprintf(`vacate_drains_total{policy=%q,result="Drained"} 1`, nd.Status.Policy),
		fmt.Sprintf(`vacate_evictions_total{result="Evicted"} %d`, nd.Status.Evicted),
		fmt.Sprintf(`vacate_drain_duration_seconds_count{policy=%q} 1`, nd.Status.Policy),
		// The build the tests link (testutil.ProgramVersion).
		`program="vacate-controller",version="` + testutil.ProgramVersion + `"} 1`,
	}
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("/metrics lacks %q", w)
		}
	}
	if strings.Contains(body, "vacate_pods_blocked{") {
		t.Errorf("/metrics still reports blocked pods after the drain finished")
	}
	// The queue gauge is set by admission's passes, from its cache: it may
	// lag the drain's own status by a pass, never stay behind.
	var queued []string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, body := get(t, "http://"+metricsAddr+"/metrics")
		queued = nil
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, "vacate_drains_queued{") {
				queued = append(queued, line)
			}
		}
		return len(queued) == 0, nil
	})
	if err != nil {
		t.Errorf("/metrics still reports a queued drain 30s after the drain was admitted: %v", queued)
	}
	guard.Check(t)
}

// waitMetric waits until /metrics holds the line.
func waitMetric(t *testing.T, addr, line string) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, fmt.Sprintf("/metrics to show %q", line), testutil.Holds(func() bool {
		_, body := get(t, "http://"+addr+"/metrics")
		return strings.Contains(body, line)
	}))
}

// get retries until the server answers, for up to 30 seconds.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	return getWith(t, http.DefaultClient, url, "")
}

// getWith is get with an HTTP client of its own and, when set, a bearer
// token.
func getWith(t *testing.T, hc *http.Client, url, bearer string) (int, string) {
	t.Helper()
	var code int
	var body string
	testutil.Eventually(t, 30*time.Second, "an answer to GET "+url, func() error {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		code, body = resp.StatusCode, string(b)
		return nil
	})
	return code, body
}

// TestSecureMetricsServeOnlyReaders runs the controller with
// --metrics-secure, as the chart's metrics.secure does, with the
// ClusterRole vacate-controller-metrics-auth: /metrics answers over HTTPS,
// 401 without a token, 403 to a service account that may not get /metrics,
// and the metrics to one bound to vacate-metrics-reader. The reviews are
// the API server's own (TokenReview, SubjectAccessReview).
func TestSecureMetricsServeOnlyReaders(t *testing.T) {
	e := newEnv(t)
	ctx := testenv.Context(t)
	auth, reader, err := rbac.MetricsAuthRoles()
	if err != nil {
		t.Fatal(err)
	}
	ns := testenv.Namespace(t, e.c)
	bind := func(role *rbacv1.ClusterRole, subject rbacv1.Subject) {
		t.Helper()
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role.Name + "-" + ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{subject},
		}
		for _, obj := range []client.Object{role.DeepCopy(), binding} {
			if err := client.IgnoreAlreadyExists(e.cl.Create(ctx, obj)); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() { _ = e.cl.Delete(context.Background(), binding) })
	}
	bind(auth, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: controllerUser})
	bind(reader, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "prometheus", Namespace: ns})
	token := func(sa string) string {
		t.Helper()
		if _, err := e.c.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := e.c.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	prometheus, nobody := token("prometheus"), token("nobody")

	addr := testutil.FreeAddr(t)
	startController(t, e.c, "secure-metrics", false, "secure-metrics", "--metrics-bind-address", addr, "--metrics-secure")
	// The controller's certificate is self-signed: the client checks the
	// token path, not the certificate.
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a self-signed test server
	scrape := func(bearer string) (int, string) {
		t.Helper()
		return getWith(t, hc, "https://"+addr+"/metrics", bearer)
	}
	if code, body := scrape(""); code != http.StatusUnauthorized {
		t.Errorf("without a token: %d %s, want 401", code, tailLines(body, 3))
	}
	if code, body := scrape(nobody); code != http.StatusForbidden {
		t.Errorf("a service account not bound to vacate-metrics-reader: %d %s, want 403", code, tailLines(body, 3))
	}
	code, body := scrape(prometheus)
	if code != http.StatusOK || !strings.Contains(body, "vacate_build_info{") {
		t.Errorf("the reader: %d, want 200 with vacate_build_info:\n%s", code, tailLines(body, 5))
	}
	// Plain HTTP gets nothing.
	if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && strings.Contains(string(b), "vacate_") {
			t.Errorf("plain HTTP served the metrics")
		}
	}
}
