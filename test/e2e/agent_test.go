package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/config/admission"
	agentconfig "github.com/vacate-dev/vacate/config/agent"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/doubles/awstest"
	"github.com/vacate-dev/vacate/internal/dev/doubles/logindtest"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/explain"
	"github.com/vacate-dev/vacate/internal/requests"
	"github.com/vacate-dev/vacate/pkg/evacuation"
)

// agentUser is the agent's service account, as the API server names it.
const agentUser = "system:serviceaccount:vacate-system:vacate-agent"

// nodeNameExtra is the extra the API server sets from a service account
// token bound to a pod on a node.
const nodeNameExtra = "authentication.kubernetes.io/node-name"

// installAgentRights applies what config/agent grants and forbids the
// agent (its ClusterRole and binding, the policy vacate-agent) and the
// people's policies, which the agent must get through.
func installAgentRights(t *testing.T, e *env) {
	t.Helper()
	ctx := testenv.Context(t)
	y, err := agentconfig.YAML("example.com/vacate-agent:test")
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(y+"\n---\n"+admission.YAML(), "\n---\n")
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vacate-system"}}
	if err := client.IgnoreAlreadyExists(e.cl.Create(ctx, ns)); err != nil {
		t.Fatal(err)
	}
	applied, kinds := 0, map[string]bool{}
	for _, doc := range docs {
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
			t.Fatal(err)
		}
		if obj.GetKind() == "" {
			continue // comments only
		}
		opts := []client.ApplyOption{client.FieldOwner("e2e"), client.ForceOwnership}
		if obj.GetKind() == "DaemonSet" {
			// Validated by the API server, not run: the tests run the
			// agent as a process, and its pods would land on every
			// simulated node of the package's cluster.
			opts = append(opts, client.DryRunAll)
		}
		if err := e.cl.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), opts...); err != nil {
			t.Fatalf("applying %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		if strings.HasPrefix(obj.GetKind(), "ValidatingAdmissionPolicy") {
			// The package's other tests run the controller as a user of its
			// own, not as the service account the policies name: some
			// policies (vacate-surge-replacements) would hold it as they
			// hold tenants. They go with the test.
			t.Cleanup(func() { _ = e.cl.Delete(context.Background(), obj) })
		}
		applied++
		kinds[obj.GetKind()] = true
	}
	if !kinds["DaemonSet"] || !kinds["ServiceAccount"] || !kinds["ClusterRole"] || !kinds["ValidatingAdmissionPolicy"] {
		t.Fatalf("config/agent lacks a part: applied %v", kinds)
	}
	if applied < 8 {
		t.Fatalf("applied %d objects from config/agent and config/admission, want the role, binding and policies", applied)
	}
	// The policy takes effect when the API server has loaded it: until an
	// agent's request for another node's drain is refused.
	cfg, err := clientcmd.BuildConfigFromFlags("", agentKubeconfig(t, e.c, "probe-node"))
	if err != nil {
		t.Fatal(err)
	}
	probe, err := client.New(cfg, client.Options{Scheme: e.cl.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		nd := testutil.NodeDrain("probe-other-node", "", "agent:probe")
		err := probe.Create(ctx, nd, client.DryRunAll)
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy 'vacate-agent'"), nil
	})
	if err != nil {
		t.Fatalf("the policy vacate-agent never took effect: %v", err)
	}
}

// agentKubeconfig is a kubeconfig that acts as the agent of node: the
// admin impersonating the agent's service account with a token bound to
// that node (the node-name extra), so RBAC and the admission policies
// judge every request as they would the agent in its pod.
func agentKubeconfig(t *testing.T, c *devcluster.Cluster, node string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range cfg.AuthInfos {
		ai.Impersonate = agentUser
		ai.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:vacate-system", "system:authenticated"}
		ai.ImpersonateUserExtra = map[string][]string{nodeNameExtra: {node}}
	}
	path := filepath.Join(t.TempDir(), "agent-"+node+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// agentProc is a running vacate-agent.
type agentProc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
	at   time.Time // when it exited
}

func startAgent(t *testing.T, c *devcluster.Cluster, node string, args ...string) *agentProc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "agent.log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	args = append([]string{"--kubeconfig", agentKubeconfig(t, c, node), "--node", node, "--metrics-bind-address", "0"}, args...)
	cmd := exec.Command(goBinary(t, "vacate-agent"), args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &agentProc{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		p.at = time.Now()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		b, _ := os.ReadFile(logPath)
		if strings.Contains(strings.ToLower(string(b)), "forbidden") {
			t.Errorf("the agent was refused (RBAC or the policy vacate-agent):\n%s", tailLines(string(b), 20))
		} else if t.Failed() {
			t.Logf("agent log:\n%s", tailLines(string(b), 40))
		}
	})
	return p
}

func (p *agentProc) wait(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		b, _ := os.ReadFile(p.log)
		t.Fatalf("vacate-agent did not exit within %s; log:\n%s", timeout, tailLines(string(b), 30))
	}
}

func (e *env) waitAgentCondition(t *testing.T, node, reason string) {
	t.Helper()
	ctx := context.Background()
	var last string
	testutil.Eventually(t, time.Minute, fmt.Sprintf("the VacateAgent condition %s on %s", reason, node), testutil.Seen(func() (bool, string) {
		n, err := e.c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, last
		}
		for _, c := range n.Status.Conditions {
			if c.Type == "VacateAgent" {
				last = fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
				return c.Reason == reason, last
			}
		}
		return false, last
	}))
}

// TestAgentSignalMode: vacate-agent --on-sigterm, as the systemd unit runs
// it, with the agent's own rights: SIGTERM requests the drain (requester
// agent:sigterm, Maintenance, with the deadline), the agent exits only once
// the node is Drained, and the agent started again on the node (back from
// its reboot) withdraws its requester: the node is schedulable again.
func TestAgentSignalMode(t *testing.T) {
	e := newEnv(t)
	installAgentRights(t, e)
	startController(t, e.c, "controller", false, "vacate-agent-e2e")
	ns, node := e.workload(t, "agent-sig", 2, 6, "1")
	guard := testenv.WatchPDBs(t, e.c, ns)

	agent := startAgent(t, e.c, node, "--on-sigterm", "--deadline", "2m", "--cloud", "none")
	e.waitAgentCondition(t, node, "Watching")
	sent := time.Now()
	if err := agent.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	agent.wait(t, 2*time.Minute)
	if agent.err != nil {
		t.Fatalf("vacate-agent exited with %v, want 0", agent.err)
	}
	nd := &v1alpha1.NodeDrain{}
	if err := e.cl.Get(testenv.Context(t), types.NamespacedName{Name: node}, nd); err != nil {
		t.Fatal(err)
	}
	i := requests.Index(nd, "agent:sigterm")
	if nd.Status.Phase != v1alpha1.PhaseDrained || i < 0 || nd.Spec.Mode != v1alpha1.ModeMaintenance {
		t.Fatalf("after the agent exited: phase %s, mode %s, requesters %+v; want Drained in Maintenance for agent:sigterm",
			nd.Status.Phase, nd.Spec.Mode, nd.Spec.Requesters)
	}
	if d := nd.Spec.Requesters[i].Deadline; d == nil || d.Time.Before(sent.Add(2*time.Minute-2*time.Second)) || d.Time.After(time.Now().Add(2*time.Minute)) {
		t.Errorf("deadline %v, want about 2m after SIGTERM at %s", d, sent)
	}
	if nd.Status.CompletionTime == nil || agent.at.Before(nd.Status.CompletionTime.Time) {
		t.Errorf("the agent exited at %s, before the drain completed at %v", agent.at, nd.Status.CompletionTime)
	}
	guard.Check(t)

	// Back from the reboot: the agent gives the node back.
	again := startAgent(t, e.c, node, "--on-sigterm", "--deadline", "2m", "--cloud", "none")
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := e.cl.Get(ctx, types.NamespacedName{Name: node}, &v1alpha1.NodeDrain{})
		n, nerr := e.c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		return apierrors.IsNotFound(err) && nerr == nil && !n.Spec.Unschedulable, nil
	})
	if err != nil {
		t.Fatalf("the node was not given back after the agent started again: %v", err)
	}
	if err := again.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	again.wait(t, 30*time.Second)
}

// TestAgentKeptToItsOwnNode: with the agent's rights (RBAC and the policy
// vacate-agent), an agent may add and withdraw its own requesters on its
// own node's drain and set its taint and condition, and nothing else: not
// another node's drain, not another requester, not another taint.
func TestAgentKeptToItsOwnNode(t *testing.T) {
	e := newEnv(t)
	installAgentRights(t, e)
	ctx := testenv.Context(t)
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "agent-own", Count: 2})
	mine, other := nodes[0], nodes[1]
	scheme, err := evacuation.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", agentKubeconfig(t, e.c, mine))
	if err != nil {
		t.Fatal(err)
	}
	as, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	allowed := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v, want it allowed", what, err)
		}
	}
	refused := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
			t.Errorf("%s: %v, want it refused", what, err)
		}
	}
	spot := v1alpha1.Requester{Name: "agent:aws-spot", Reason: "test", Deadline: &metav1.Time{Time: time.Now().Add(time.Hour).Truncate(time.Second)}}
	// No controller runs here: the drain it leaves would wait in the queue
	// of the next test's controller.
	t.Cleanup(func() {
		_ = e.cl.Delete(context.Background(), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: mine}})
	})
	allowed("request its own node's drain", requests.Apply(ctx, as, mine, spot, v1alpha1.ModeDecommission, ""))
	refused("request another node's drain", requests.Apply(ctx, as, other, spot, v1alpha1.ModeDecommission, ""))
	refused("add a requester not its own", requests.Apply(ctx, as, mine, v1alpha1.Requester{Name: "cli:mallory"}, v1alpha1.ModeDecommission, ""))
	// A person's requester on its drain: the agent may not remove it, nor
	// delete the drain under it.
	if err := requests.Apply(ctx, e.cl, mine, v1alpha1.Requester{Name: "cli:alice"}, v1alpha1.ModeDecommission, ""); err != nil {
		t.Fatal(err)
	}
	nd := &v1alpha1.NodeDrain{}
	if err := e.cl.Get(ctx, types.NamespacedName{Name: mine}, nd); err != nil {
		t.Fatal(err)
	}
	refused("delete a drain someone else wants", as.Delete(ctx, nd.DeepCopy()))
	_, err = requests.Withdraw(ctx, as, nd.DeepCopy(), "cli:alice")
	refused("withdraw someone else's requester", err)
	after, err := requests.Withdraw(ctx, as, nd.DeepCopy(), spot.Name)
	allowed("withdraw its own requester", err)
	if after != nil && requests.Index(after, "cli:alice") < 0 {
		t.Errorf("withdrawing its own requester took cli:alice too: %+v", after.Spec.Requesters)
	}

	// The patch carries the resourceVersion (a taint list is replaced
	// whole), and kwok's heartbeats move it on: a conflict is tried again,
	// so what is judged is the admission's answer.
	taint := func(node, key string, effect corev1.TaintEffect) error {
		return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			n, err := e.c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return err
			}
			base := n.DeepCopy()
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Value: "aws-spot", Effect: effect})
			return as.Patch(ctx, n, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
		})
	}
	allowed("taint its node vacate.dev/notice", taint(mine, v1alpha1.TaintNotice, corev1.TaintEffectNoSchedule))
	refused("taint another node", taint(other, v1alpha1.TaintNotice, corev1.TaintEffectNoSchedule))
	refused("set another taint on its node", taint(mine, "example.com/other", corev1.TaintEffectNoSchedule))
	refused("make its taint NoExecute", taint(mine, v1alpha1.TaintNotice, corev1.TaintEffectNoExecute))
	label := func(status bool) error {
		n, err := e.c.Client.CoreV1().Nodes().Get(ctx, mine, metav1.GetOptions{})
		if err != nil {
			return err
		}
		base := n.DeepCopy()
		n.Annotations = map[string]string{v1alpha1.AnnotationCordonedBy: "forged/uid"}
		if status {
			return as.Status().Patch(ctx, n, client.MergeFrom(base))
		}
		return as.Patch(ctx, n, client.MergeFrom(base))
	}
	refused("annotate its node", label(false))
	refused("annotate its node through its status", label(true))
	owned := &v1alpha1.NodeDrain{}
	if err := e.cl.Get(ctx, types.NamespacedName{Name: mine}, owned); err != nil {
		t.Fatal(err)
	}
	base := owned.DeepCopy()
	owned.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: other, UID: "x"}}
	refused("give its drain an owner", as.Patch(ctx, owned, client.MergeFrom(base)))
	condition := func(node string, typ corev1.NodeConditionType) error {
		n, err := e.c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		base := n.DeepCopy()
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: typ, Status: corev1.ConditionTrue, Reason: "Test",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()})
		return as.Status().Patch(ctx, n, client.StrategicMergeFrom(base))
	}
	allowed("set its VacateAgent condition", condition(mine, "VacateAgent"))
	refused("set another condition", condition(mine, "ExampleCondition"))
	refused("set the condition on another node", condition(other, "VacateAgent"))

	// A token not bound to a node is refused outright.
	unbound := rest.CopyConfig(cfg)
	unbound.Impersonate.Extra = nil
	uc, err := client.New(unbound, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	err = requests.Apply(ctx, uc, mine, spot, v1alpha1.ModeDecommission, "")
	refused("request a drain with a token bound to no node", err)
	if err != nil && !strings.Contains(err.Error(), "names no node") {
		t.Errorf("refusal %q does not say the token names no node", err)
	}
}

// TestAgentSpotNotice: the real EC2 metadata mock, IMDSv2 required, gives
// a spot interruption notice with a 2-minute deadline; the agent (its own
// binary, its own rights) requests the drain with that deadline and taints
// the node, the pods' HTTP evacuation hooks complete, and the node is
// Drained with the PDB held and no pod evicted before its evacuation, well
// inside the deadline.
func TestAgentSpotNotice(t *testing.T) {
	e := newEnv(t)
	installAgentRights(t, e)
	startController(t, e.c, "controller", false, "vacate-agent-spot")
	h := e.hookedWorkload(t, "agent-spot")
	deadline := time.Now().Add(2 * time.Minute).UTC().Truncate(time.Second)
	m := awstest.StartMock(t, "spot", "--action", "terminate", "--time", deadline.Format(time.RFC3339),
		"--mock-delay-sec", "0", "--rebalance-delay-sec", "3600")
	start := time.Now()
	metrics := testutil.FreeAddr(t)
	startAgent(t, e.c, h.node, "--logind=false", "--cloud", "aws", "--metadata-endpoint", m.URL(), "--metrics-bind-address", metrics)

	h.waitInProgress(t, e)
	nd := &v1alpha1.NodeDrain{}
	if err := e.cl.Get(testenv.Context(t), types.NamespacedName{Name: h.node}, nd); err != nil {
		t.Fatal(err)
	}
	i := requests.Index(nd, "agent:aws-spot")
	if i < 0 || nd.Spec.Requesters[i].Deadline == nil || !nd.Spec.Requesters[i].Deadline.Time.Equal(deadline) ||
		nd.Spec.Mode != v1alpha1.ModeDecommission {
		t.Fatalf("drain spec %+v, want agent:aws-spot with deadline %s in Decommission", nd.Spec, deadline)
	}
	if nd.Status.Deadline == nil || nd.Status.Deadline.Requester != "agent:aws-spot" {
		t.Errorf("status.deadline %+v, want the spot notice's", nd.Status.Deadline)
	}
	node, err := e.c.Client.CoreV1().Nodes().Get(testenv.Context(t), h.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !hasTaint(node, v1alpha1.TaintNotice, "aws-spot") {
		t.Errorf("taints %+v, want %s=aws-spot", node.Spec.Taints, v1alpha1.TaintNotice)
	}
	h.complete()
	done := e.waitDrain(t, h.node, "Drained", 2*time.Minute, drained)
	t.Logf("spot notice to Drained in %s; deadline was %s after the agent started", done.Status.CompletionTime.Sub(start).Round(100*time.Millisecond),
		deadline.Sub(start).Round(time.Second))
	if done.Status.CompletionTime.After(deadline) {
		t.Errorf("Drained at %s, after the deadline %s", done.Status.CompletionTime, deadline)
	}
	h.checkNoEarlyEviction(t)
	h.guard.Check(t)
	waitMetric(t, metrics, `vacate_agent_notices_total{source="aws-spot"} 1`)
	waitMetric(t, metrics, `vacate_agent_notice_to_drained_seconds_count{source="aws-spot"} 1`)
}

// TestAgentDeadlineCannotBeMet: a spot notice 30 s ahead, and a PDB that
// lets no pod go: status.deadline and explain say the blocked pods will
// not leave in time; past the deadline the drain goes on (onTimeout Fail
// never stops a drain at a deadline), its Blocked condition says the
// deadline passed, and the pods stay where the PDB keeps them.
func TestAgentDeadlineCannotBeMet(t *testing.T) {
	e := newEnv(t)
	installAgentRights(t, e)
	startController(t, e.c, "controller", false, "vacate-agent-late")
	ns, node := e.workload(t, "agent-late", 2, 4, "0")
	deadline := time.Now().Add(30 * time.Second).UTC().Truncate(time.Second)
	m := awstest.StartMock(t, "spot", "--action", "terminate", "--time", deadline.Format(time.RFC3339),
		"--mock-delay-sec", "0", "--rebalance-delay-sec", "3600")
	// The drain goes on past its deadline; it goes with the test, after the
	// agent stops (cleanups run last first) and before its node, or it would
	// wait for the node, NodeNotFound, counted in vacate_drains_queued that
	// TestMetricsAndProbes reads.
	t.Cleanup(func() {
		_ = e.cl.Delete(context.Background(), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: node}})
		_ = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			return apierrors.IsNotFound(e.cl.Get(ctx, types.NamespacedName{Name: node}, &v1alpha1.NodeDrain{})), nil
		})
	})

	startAgent(t, e.c, node, "--logind=false", "--cloud", "aws", "--metadata-endpoint", m.URL())

	blocked := e.waitDrain(t, node, "blocked with the deadline", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Deadline != nil && nd.Status.Blocked > 0
	})
	in, err := explain.Read(testenv.Context(t), e.c.Client, blocked)
	if err != nil {
		t.Fatal(err)
	}
	in.Now = time.Now()
	var said string
	for _, f := range explain.Explain(in).Findings {
		if strings.Contains(f.Cause, "the machine goes at") {
			said = f.Cause
		}
	}
	if !strings.Contains(said, "(the deadline of agent:aws-spot") || !strings.Contains(said, "blocked pod(s) will not leave in time") {
		t.Errorf("explain says %q, want the deadline and the blocked pods that will not make it", said)
	}
	past := e.waitDrain(t, node, "past the deadline", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionBlocked)
		return nd.Status.Phase == v1alpha1.PhaseFailed || (c != nil && strings.Contains(c.Message, "past the deadline of requester agent:aws-spot"))
	})
	// Under onTimeout Fail a deadline never stops a drain: stopping would
	// leave the pods on a machine that goes (issue 23).
	if past.Status.Phase == v1alpha1.PhaseFailed || past.Status.CompletionTime != nil {
		t.Errorf("the drain past its deadline is %s (completed %v), want it draining on", past.Status.Phase, past.Status.CompletionTime)
	}
	pods, err := e.c.Client.CoreV1().Pods(ns).List(testenv.Context(t), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil || len(pods.Items) == 0 {
		t.Errorf("pods on the node after the deadline: %d (%v), want them in place", len(pods.Items), err)
	}
}

func hasTaint(n *corev1.Node, key, value string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key && t.Value == value {
			return true
		}
	}
	return false
}

// TestAgentHoldsShutdownUntilDrained: the agent against a stand-in logind
// on a real dbus-daemon, with its own rights. It holds a delay lock and
// reports logind's InhibitDelayMaxSec as shorter than it wants; a reboot
// that is cancelled gives the node back and the lock is taken again; a
// reboot that goes on is held (the lock stays) until the node is Drained,
// and released then.
func TestAgentHoldsShutdownUntilDrained(t *testing.T) {
	e := newEnv(t)
	installAgentRights(t, e)
	startController(t, e.c, "controller", false, "vacate-agent-logind")
	ns, node := e.workload(t, "agent-logind", 2, 6, "0")
	ctx := testenv.Context(t)
	bus := logindtest.StartBus(t)
	ld := logindtest.StartConfig(t, bus, logindtest.Config{InhibitDelayMax: time.Minute})
	startAgent(t, e.c, node, "--dbus-address", bus, "--cloud", "none", "--shutdown-delay", "2m")
	e.waitAgentCondition(t, node, "InhibitDelayTooShort")
	if err := ld.WaitHeld(ctx, 1); err != nil {
		t.Fatalf("the agent holds no delay lock: %v", err)
	}

	t.Log("a reboot, cancelled while the PDB holds the drain")
	ld.EmitPrepareForShutdown(true, "reboot")
	nd := e.waitDrain(t, node, "requested by agent:shutdown", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return requests.Index(nd, "agent:shutdown") >= 0 && nd.Status.Blocked > 0
	})
	if nd.Spec.Mode != v1alpha1.ModeMaintenance || nd.Status.Deadline == nil {
		t.Errorf("mode %s, deadline %v: want a Maintenance drain with logind's deadline", nd.Spec.Mode, nd.Status.Deadline)
	}
	if ld.Held() != 1 {
		t.Errorf("%d locks held while the drain runs, want 1", ld.Held())
	}
	ld.EmitPrepareForShutdown(false, "")
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := e.cl.Get(ctx, types.NamespacedName{Name: node}, &v1alpha1.NodeDrain{})
		n, nerr := e.c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		return apierrors.IsNotFound(err) && nerr == nil && !n.Spec.Unschedulable, nil
	})
	if err != nil {
		t.Fatalf("the cancelled reboot did not give the node back: %v", err)
	}
	if err := ld.WaitHeld(ctx, 1); err != nil {
		t.Fatalf("no lock after the cancelled reboot: %v", err)
	}

	t.Log("a reboot that goes on: the lock is held until the node is Drained")
	ld.EmitPrepareForShutdown(true, "reboot")
	e.waitDrain(t, node, "blocked by the PDB", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return requests.Index(nd, "agent:shutdown") >= 0 && nd.Status.Blocked > 0
	})
	if ld.Held() != 1 {
		t.Fatalf("%d locks held while the PDB holds the drain, want 1", ld.Held())
	}
	if _, err := e.c.Client.PolicyV1().PodDisruptionBudgets(ns).Patch(ctx, "web", types.MergePatchType,
		[]byte(`{"spec":{"maxUnavailable":1}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := ld.WaitReleased(ctx); err != nil {
		t.Fatalf("the lock was never released: %v", err)
	}
	released := time.Now()
	done := &v1alpha1.NodeDrain{}
	if err := e.cl.Get(ctx, types.NamespacedName{Name: node}, done); err != nil {
		t.Fatal(err)
	}
	if done.Status.Phase != v1alpha1.PhaseDrained || done.Status.CompletionTime == nil || done.Status.CompletionTime.After(released) {
		t.Errorf("the lock was released at %s with the drain %s (completed %v): want it released only once Drained",
			released, done.Status.Phase, done.Status.CompletionTime)
	}
}
