package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/config/rbac"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// The shared cluster serves the EvictionRequest API: uninstall releases
// vacate's finalizer on Evictions (TestUninstallReleasesHookedEvictions).
func TestMain(m *testing.M) { os.Exit(testenv.Main(m, testenv.EvictionRequestAPI)) }

// admin is the user of the dev cluster's kubeconfig.
const admin = "cli:vacate-admin"

// user runs the CLI in process with one kubeconfig.
type user struct {
	t          *testing.T
	kubeconfig string
}

// vacate runs the CLI and returns its exit code, stdout and stderr.
func (u user) vacate(args ...string) (int, string, string) {
	u.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	code := Run(ctx, append(args, "--kubeconfig", u.kubeconfig), Streams{In: strings.NewReader(""), Out: &out, Err: &errOut}, clock.RealClock{})
	u.t.Logf("$ vacate %s  → exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
	return code, out.String(), errOut.String()
}

// must runs the CLI and fails the test unless it exits with want.
func (u user) must(want int, args ...string) string {
	u.t.Helper()
	code, out, errOut := u.vacate(args...)
	if code != want {
		u.t.Fatalf("vacate %s exited %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, want, out, errOut)
	}
	return out
}

func newUser(t *testing.T, c *devcluster.Cluster, name string, groups ...string) user {
	t.Helper()
	kc, err := c.KubeconfigFor(name, groups...)
	if err != nil {
		t.Fatal(err)
	}
	return user{t: t, kubeconfig: kc}
}

// shop makes nodes and a workload on them: Deployment web (6, its PDB's
// maxUnavailable as given), StatefulSet db (3), DaemonSet agent.
func shop(t *testing.T, c *devcluster.Cluster, prefix string, nodes int, webMaxUnavailable string) (string, []string) {
	t.Helper()
	names := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: prefix, Count: nodes, Labels: map[string]string{"pool": prefix}})
	ns := testenv.Namespace(t, c)
	ctx := testenv.Context(t)
	if err := devcluster.WaitForServiceAccount(ctx, c.Client, ns, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := devcluster.CreateWorkload(ctx, c.Client, devcluster.Workload{Namespace: ns, DeploymentReplicas: 6, StatefulSetReplicas: 3,
		PDBMaxUnavailable: webMaxUnavailable, NodeSelector: map[string]string{"pool": prefix}}); err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.WaitForPodsReady(ctx, c.Client, ns, labels.Everything(), 6+3+nodes, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.WaitForPDB(ctx, c.Client, ns, "web", 6, time.Minute); err != nil {
		t.Fatal(err)
	}
	return ns, names
}

// busiest is the node that runs the most pods of app: the scheduler may
// leave a node without any.
func busiest(t *testing.T, c *devcluster.Cluster, nodes []string, app string) string {
	t.Helper()
	best, most := "", 0
	for _, n := range nodes {
		count := 0
		for _, p := range testenv.PodsOnNode(t, c, n) {
			if p.Labels[devcluster.AppLabel] == app {
				count++
			}
		}
		if count > most {
			best, most = n, count
		}
	}
	if best == "" {
		t.Fatalf("no %s pod on any of %v", app, nodes)
	}
	return best
}

// mustLeave counts the pods on the node that a drain evicts by default:
// all but DaemonSet pods.
func mustLeave(t *testing.T, c *devcluster.Cluster, node string) int {
	n := 0
	for _, p := range testenv.PodsOnNode(t, c, node) {
		if len(p.OwnerReferences) == 0 || p.OwnerReferences[0].Kind != "DaemonSet" {
			n++
		}
	}
	return n
}

func getNode(t *testing.T, c *devcluster.Cluster, name string) *corev1.Node {
	t.Helper()
	n, err := c.Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDrainWaitJoinAndCancel: drain --wait exits 0 with the summary; a
// second person joins; the first cancel leaves the drain going; the last
// restores the node.
func TestDrainWaitJoinAndCancel(t *testing.T) {
	c := testenv.Start(t)
	cl := testenv.Controller(t, c)
	_, nodes := shop(t, c, "cli-wait", 3, "1")
	target := nodes[0]
	leave := mustLeave(t, c, target)
	alice := user{t: t, kubeconfig: c.Kubeconfig}

	policy := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "gentle"}}
	if err := cl.Create(context.Background(), policy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), policy) })

	out := alice.must(ExitOK, "drain", target, "--wait", "--reason", "CHG-1", "--mode", "Decommission", "--policy", "gentle")
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^nodedrain/` + target + ` requested by ` + admin + `, mode Decommission$`),
		regexp.MustCompile(fmt.Sprintf(`(?m)^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ %s Drained %d/%d "in \d+s"$`, target, leave, leave)),
		regexp.MustCompile(`(?m)^NODE\s+RESULT\s+EVICTED\s+TOOK\s+BLOCKERS MET$`),
		regexp.MustCompile(fmt.Sprintf(`(?m)^%s\s+Drained\s+%d/%d\s+\d+s\s+`, target, leave, leave)),
	} {
		if !want.MatchString(out) {
			t.Errorf("drain --wait output lacks %s", want)
		}
	}
	if left := mustLeave(t, c, target); left != 0 {
		t.Errorf("%d pods that must leave are still on %s", left, target)
	}
	nd := getDrain(t, cl, target)
	if r := nd.Spec.Requesters; len(r) != 1 || r[0].Name != admin || r[0].Reason != "CHG-1" || r[0].Batch == nil || r[0].Batch.Size != 1 {
		t.Errorf("requesters = %+v, want only %s with reason CHG-1, in a batch of 1", nd.Spec.Requesters, admin)
	}
	if !ownsRequester(nd, "vacate-"+admin, admin) {
		t.Errorf("field manager vacate-%s does not own its requester entry: %+v", admin, nd.ManagedFields)
	}

	checkStatusShowsDrained(t, alice, target, leave)

	// Following the drain again keeps what the first request set.
	alice.must(ExitOK, "drain", target, "--wait")
	nd = getDrain(t, cl, target)
	if nd.Spec.Mode != v1alpha1.ModeDecommission || nd.Spec.PolicyName != "gentle" || nd.Spec.Requesters[0].Reason != "CHG-1" {
		t.Errorf("after a second drain: mode %s, policy %q, reason %q; want Decommission, gentle, CHG-1", nd.Spec.Mode, nd.Spec.PolicyName, nd.Spec.Requesters[0].Reason)
	}

	bob := newUser(t, c, "bob", "system:masters")
	code, _, errOut := bob.vacate("drain", target, "--mode", "Maintenance")
	oneError(t, code, errOut, ExitError, "already being drained in mode Decommission for "+admin, "drop --mode to join it")
	code, _, errOut = bob.vacate("drain", target, "--policy", "missing")
	oneError(t, code, errOut, ExitError, `DrainPolicy "missing" not found`)
	out = bob.must(ExitOK, "drain", target)
	if !strings.Contains(out, "nodedrain/"+target+" joined as cli:bob (also requested by "+admin+"), mode Decommission") {
		t.Errorf("bob's drain does not say it joined")
	}
	out = alice.must(ExitOK, "cancel", target)
	if !strings.Contains(out, "request of "+admin+" withdrawn; the drain goes on for cli:bob") {
		t.Errorf("alice's cancel does not say the drain goes on for bob")
	}
	if !getNode(t, c, target).Spec.Unschedulable {
		t.Fatal("the node was uncordoned while bob still requests the drain")
	}
	// alice's withdrawal leaves the drain's settings to bob.
	if nd = getDrain(t, cl, target); nd.Spec.Mode != v1alpha1.ModeDecommission || nd.Spec.PolicyName != "gentle" {
		t.Errorf("after alice's cancel: mode %s, policy %q; want them kept for bob", nd.Spec.Mode, nd.Spec.PolicyName)
	}
	out = bob.must(ExitOK, "cancel", target)
	for _, want := range []string{"it was the last: restoring the node", "node/" + target + ": restored: schedulable again"} {
		if !strings.Contains(out, want) {
			t.Errorf("bob's cancel output lacks %q", want)
		}
	}
	if n := getNode(t, c, target); n.Spec.Unschedulable || n.Annotations["vacate.dev/cordoned-by"] != "" {
		t.Errorf("node after cancel: unschedulable=%t annotations=%v", n.Spec.Unschedulable, n.Annotations)
	}
	if err := cl.Get(context.Background(), types.NamespacedName{Name: target}, &v1alpha1.NodeDrain{}); !apierrors.IsNotFound(err) {
		t.Errorf("NodeDrain after the last cancel: %v, want not found", err)
	}
	out = bob.must(ExitOK, "cancel", target)
	if !strings.Contains(out, "no drain requested; nothing to cancel") {
		t.Errorf("a second cancel does not say there is nothing to cancel")
	}

	// A drain left with no requester (an interrupted cancel) is cleaned up by
	// anyone's cancel.
	orphan := testutil.NodeDrain(nodes[1], "")
	if err := cl.Create(context.Background(), orphan); err != nil {
		t.Fatal(err)
	}
	out = bob.must(ExitOK, "cancel", nodes[1])
	if !strings.Contains(out, "no requester is left; deleting it") || !strings.Contains(out, "node/"+nodes[1]+": restored") {
		t.Errorf("cancel of a drain without requesters did not remove it")
	}
}

// getDrain reads the node's NodeDrain.
func getDrain(t *testing.T, cl client.Client, node string) *v1alpha1.NodeDrain {
	t.Helper()
	nd := &v1alpha1.NodeDrain{}
	if err := cl.Get(context.Background(), types.NamespacedName{Name: node}, nd); err != nil {
		t.Fatal(err)
	}
	return nd
}

// checkStatusShowsDrained checks that status lists the node Drained, all
// leave pods evicted, for the admin, and that status -o json prints its
// NodeDrain, Drained.
func checkStatusShowsDrained(t *testing.T, u user, node string, leave int) {
	t.Helper()
	out := u.must(ExitOK, "status")
	if !regexp.MustCompile(fmt.Sprintf(`(?m)^%s\s+Drained\s+%d/%d\s+0\s+%s\s+\d+s$`, node, leave, leave, admin)).MatchString(out) {
		t.Errorf("status lacks the drained row")
	}
	out = u.must(ExitOK, "status", node, "-o", "json")
	var got v1alpha1.NodeDrain
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Kind != "NodeDrain" || got.Status.Phase != v1alpha1.PhaseDrained {
		t.Errorf("status -o json: %v, kind %q phase %q", err, got.Kind, got.Status.Phase)
	}
}

func ownsRequester(nd *v1alpha1.NodeDrain, manager, requester string) bool {
	key := fmt.Sprintf(`k:{"name":%q}`, requester)
	for _, mf := range nd.ManagedFields {
		if mf.Manager != manager || mf.FieldsV1 == nil {
			continue
		}
		var fields struct {
			Spec struct {
				Requesters map[string]any `json:"f:requesters"`
			} `json:"f:spec"`
		}
		if err := json.Unmarshal(mf.FieldsV1.GetRawBytes(), &fields); err == nil && fields.Spec.Requesters[key] != nil {
			return true
		}
	}
	return false
}

// TestDrainTimeoutExplainAndCancel: a PDB that allows nothing holds the
// drain; --wait-timeout exits 3 with the drain still running; explain names the
// PDB and what to do; cancel restores the node.
func TestDrainTimeoutExplainAndCancel(t *testing.T) {
	c := testenv.Start(t)
	cl := testenv.Controller(t, c)
	ns, nodes := shop(t, c, "cli-stuck", 2, "0")
	target := busiest(t, c, nodes, "web")
	alice := user{t: t, kubeconfig: c.Kubeconfig}

	code, out, errOut := alice.vacate("drain", target, "--wait-timeout", "4s")
	if code != ExitTimeout {
		t.Fatalf("drain --wait-timeout exited %d, want %d", code, ExitTimeout)
	}
	if !strings.HasPrefix(errOut, "error: timed out after 4s with 1 drain(s) still running") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("stderr = %q, want one line saying it timed out", errOut)
	}
	if !regexp.MustCompile(`(?m) ` + target + ` Blocked ` + ns + `/web-\S+ PodDisruptionBudget "PodDisruptionBudget ` + ns + `/web" `).MatchString(out) {
		t.Errorf("drain output lacks a Blocked line naming the PDB")
	}
	if !regexp.MustCompile(`(?m)^` + target + `\s+Running \(Evicting\)\s+`).MatchString(out) {
		t.Errorf("summary does not show the drain still running")
	}
	nd := &v1alpha1.NodeDrain{}
	if err := cl.Get(context.Background(), types.NamespacedName{Name: target}, nd); err != nil {
		t.Fatal(err)
	}
	if nd.Status.Phase != v1alpha1.PhaseEvicting || nd.Status.Blocked == 0 {
		t.Errorf("after the timeout the drain is %s with %d blocked, want Evicting and blocked", nd.Status.Phase, nd.Status.Blocked)
	}

	out = alice.must(ExitOK, "status", "-o", "wide")
	if !strings.Contains(out, "held by PodDisruptionBudget "+ns+"/web") {
		t.Errorf("status -o wide does not say what holds the drain")
	}
	out = alice.must(ExitOK, "explain", target)
	for _, want := range []string{
		"drain of node " + target + ": Evicting",
		"why:  PDB " + ns + "/web allows 0 disruptions even with all 6 of its pods healthy: maxUnavailable 0 never allows an eviction",
		"do:   relax the PDB (kubectl edit pdb -n " + ns + " web; now maxUnavailable 0), or scale the workload up",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("explain lacks %q", want)
		}
	}

	// Under the built-in policy one node drains at a time: a second drain
	// queues behind the stuck one, and status and explain say so.
	other := nodes[0]
	if other == target {
		other = nodes[1]
	}
	alice.must(ExitOK, "drain", other)
	queued := regexp.MustCompile(`(?m)^` + other + `\s+Queued #1 WaitingForSlot\s`)
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, out, _ := alice.vacate("status")
		return queued.MatchString(out), nil
	})
	if err != nil {
		t.Errorf("status never showed %s queued behind the running drain", other)
	}
	out = alice.must(ExitOK, "explain", other)
	for _, want := range []string{"not admitted: queued at position 1: 1 of 1 drains run at once (maxParallelNodes)",
		"it starts when a running drain of the same policy ends"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain of the queued drain lacks %q", want)
		}
	}

	out = alice.must(ExitOK, "cancel", target, other)
	if !strings.Contains(out, "node/"+target+": restored: schedulable again") {
		t.Errorf("cancel does not show the restore")
	}
	for _, n := range []string{target, other} {
		if getNode(t, c, n).Spec.Unschedulable {
			t.Errorf("node %s still cordoned after cancel", n)
		}
	}
}

// TestPlanWritesNothingAndPredictsTheDrain: plan, run by its own user, makes
// no mutating request (the API server's audit log shows none from that user,
// and does show the same user's drain afterwards); the pods it says are
// blocked are the ones the real drain then reports as blockers.
func TestPlanWritesNothingAndPredictsTheDrain(t *testing.T) {
	c := testenv.Start(t)
	cl := testenv.Controller(t, c)
	ns, nodes := shop(t, c, "cli-plan", 2, "0")
	target := busiest(t, c, nodes, "web")
	ctx := testenv.Context(t)
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, devcluster.BarePod(ns, "loner", target), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.WaitForPodsReady(ctx, c.Client, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: "loner"}), 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	planner := newUser(t, c, "planner", "system:masters")
	start := time.Now()

	text := planner.must(ExitOK, "plan", target)
	for _, want := range []string{
		"Node " + target,
		"policy: built-in defaults",
		"cordon: vacate cordons it",
		ns + "/loner",
		"Block (blocked)",
		"BLOCKS NOW: allows no disruption",
		"would not finish now",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("plan output lacks %q", want)
		}
	}
	var plans []NodePlan
	if err := json.Unmarshal([]byte(planner.must(ExitOK, "plan", target, "-o", "json")), &plans); err != nil || len(plans) != 1 {
		t.Fatalf("plan -o json: %v (%d plans)", err, len(plans))
	}
	predicted := plans[0].Blocked
	sort.Strings(predicted)
	if len(predicted) < 2 || !slices.Contains(predicted, ns+"/loner") || plans[0].Estimate.Finishes {
		t.Fatalf("plan predicts blocked %v (finishes=%t), want the bare pod and the web pods", predicted, plans[0].Estimate.Finishes)
	}

	if writes := mutations(t, c, "planner", start); len(writes) != 0 {
		t.Fatalf("plan made %d mutating request(s): %+v", len(writes), writes)
	}
	// The same user's drain does show: the check above can see this user.
	planner.must(ExitOK, "drain", target)
	var writes []devcluster.AuditEvent
	deadline := time.Now().Add(10 * time.Second)
	for len(writes) == 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		writes = mutations(t, c, "planner", start)
	}
	if len(writes) == 0 {
		t.Fatal("the audit log shows no request of the planner's drain: it cannot prove plan wrote nothing")
	}

	// The real drain reports the blockers plan predicted, once it evicted
	// what it could.
	nd := testenv.WaitForDrain(t, cl, target, "left with only its blocked pods", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Remaining > 0 && nd.Status.Blocked == nd.Status.Remaining
	}, func(nd *v1alpha1.NodeDrain) string { return fmt.Sprintf("%+v", nd.Status) })
	var reported []string
	for _, b := range nd.Status.Blockers {
		reported = append(reported, b.Pod)
	}
	sort.Strings(reported)
	if strings.Join(reported, " ") != strings.Join(predicted, " ") {
		t.Errorf("the drain reports blocked %v, plan predicted %v", reported, predicted)
	}
	planner.must(ExitOK, "cancel", target)
}

// mutations are the mutating requests of user since start, from the audit log.
func mutations(t *testing.T, c *devcluster.Cluster, user string, since time.Time) []devcluster.AuditEvent {
	t.Helper()
	events, err := devcluster.ReadAudit(c.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	var out []devcluster.AuditEvent
	for _, e := range events {
		if e.User.Username == user && !e.Received.Before(since.Add(-time.Second)) {
			out = append(out, e)
		}
	}
	return out
}

// oneError checks the CLI failed with code and a single error line that
// contains each of wants.
func oneError(t *testing.T, code int, errOut string, wantCode int, wants ...string) {
	t.Helper()
	if code != wantCode {
		t.Errorf("exit %d, want %d (stderr %q)", code, wantCode, errOut)
	}
	if !strings.HasPrefix(errOut, "error: ") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("want one error line, got %q", errOut)
	}
	for _, w := range wants {
		if !strings.Contains(errOut, w) {
			t.Errorf("error %q lacks %q", errOut, w)
		}
	}
}

// TestBadInputGetsOneClearLine: unknown nodes, an unreachable cluster, no
// kubeconfig, missing permissions and bad flags each get one line that says
// what is wrong and what to do. The ClusterRole vacate-user is enough for
// every command.
func TestBadInputGetsOneClearLine(t *testing.T) {
	c := testenv.Start(t)
	testenv.Controller(t, c)
	nodes := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "cli-bad", Count: 1})
	alice := user{t: t, kubeconfig: c.Kubeconfig}

	for _, args := range [][]string{{"drain", "nope"}, {"cancel", "nope"}, {"plan", "nope"}, {"explain", "nope"}, {"status", "nope"}} {
		code, _, errOut := alice.vacate(args...)
		oneError(t, code, errOut, ExitError, `node "nope" not found in the cluster at https://`, "see 'kubectl get nodes'")
	}
	code, _, errOut := alice.vacate("drain", "--selector", "pool=none")
	oneError(t, code, errOut, ExitError, `no node in the cluster at`, `matches --selector "pool=none"`)

	// Unreachable: the same kubeconfig, pointing at a closed port.
	cfg, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range cfg.Clusters {
		cl.Server = "https://127.0.0.1:1"
	}
	unreachable := t.TempDir() + "/unreachable.kubeconfig"
	if err := clientcmd.WriteToFile(*cfg, unreachable); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = user{t: t, kubeconfig: unreachable}.vacate("status")
	oneError(t, code, errOut, ExitError, "cannot reach the cluster at https://127.0.0.1:1", "connection refused", "is the cluster running?")
	code, _, errOut = user{t: t, kubeconfig: t.TempDir() + "/missing"}.vacate("drain", nodes[0])
	oneError(t, code, errOut, ExitError, "no cluster to talk to", "set KUBECONFIG or pass --kubeconfig")

	// No RBAC: a user with no role may not read the node.
	nobody := newUser(t, c, "nobody")
	code, _, errOut = nobody.vacate("drain", nodes[0])
	oneError(t, code, errOut, ExitError, `permission denied while reading node `+nodes[0]+`: User "nobody" cannot get resource "nodes"`,
		"bind the ClusterRole vacate-user")
	code, _, errOut = nobody.vacate("status")
	oneError(t, code, errOut, ExitError, `permission denied while listing NodeDrains`, "vacate-user")

	// With vacate-user bound, every command works.
	bindUserRole(t, c, "nobody")
	nobody.must(ExitOK, "plan", nodes[0])
	byLabel := devcluster.HostnameLabel + "=" + nodes[0]
	out := nobody.must(ExitOK, "drain", "--selector", byLabel, "--wait", "--timeout", "1m")
	if !strings.Contains(out, "nodedrain/"+nodes[0]+" requested by cli:nobody") {
		t.Errorf("drain --selector %s did not request %s", byLabel, nodes[0])
	}
	nobody.must(ExitOK, "status", "-o", "wide", "-n", "kube-system") // kubectl's -n, typed by habit
	nobody.must(ExitOK, "status", "--no-headers", "--sort-by", ".metadata.creationTimestamp")
	nobody.must(ExitOK, "explain", nodes[0])
	out = nobody.must(ExitOK, "cancel", "--selector", byLabel)
	if !strings.Contains(out, "restored: schedulable again") {
		t.Errorf("cancel under vacate-user did not restore the node")
	}

	// Usage errors exit 2 with one line.
	for _, args := range [][]string{
		{"drain"},
		{"drain", "a", "--selector", "x=y"},
		{"drain", "a", "--mode", "Sometimes"},
		{"drain", "a", "--requester", "bad name"},
		{"drain", "a", "--timeout", "soon"},
		{"cancel"},
		{"status", "-o", "table"},
		{"plan", "a", "-o", "table"},
		{"explain"},
		{"explain", "a", "-l", "x=y"},
		{"status", "a", "-l", "x=y"},
		{"status", "-o", "jsonpath="},
		{"status", "-o", "custom-columns=NODE"},
		{"status", "--sort-by", "{.status.evicted", "-n", "default"},
		{"manifests"},
		{"manifests", "everything"},
		{"frobnicate"},
	} {
		code, _, errOut := alice.vacate(args...)
		oneError(t, code, errOut, ExitUsage)
	}
}

func bindUserRole(t *testing.T, c *devcluster.Cluster, username string) {
	t.Helper()
	ctx := testenv.Context(t)
	role, err := rbac.UserRole()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "vacate-user-" + username},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: username}},
	}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
	// RBAC takes effect once the API server's informer sees the binding.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if code, _, _ := (user{t: t, kubeconfig: mustKubeconfig(t, c, username)}).vacate("status"); code == ExitOK {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatal("vacate-user did not take effect")
}

func mustKubeconfig(t *testing.T, c *devcluster.Cluster, username string) string {
	kc, err := c.KubeconfigFor(username)
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

// TestCompletion: the shells' completion scripts are generated, and node
// names complete from the cluster.
func TestCompletion(t *testing.T) {
	c := testenv.Start(t)
	testenv.DrainClient(t, c)
	nodes := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "cli-complete", Count: 2})
	u := user{t: t, kubeconfig: c.Kubeconfig}
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		if out := u.must(ExitOK, "completion", shell); !strings.Contains(out, "vacate") || len(out) < 500 {
			t.Errorf("completion %s printed %d bytes", shell, len(out))
		}
	}
	// The word being completed is the last: the kubeconfig goes first.
	complete := func(args ...string) string {
		var out bytes.Buffer
		code := Run(context.Background(), append([]string{"__complete", "--kubeconfig", c.Kubeconfig}, args...),
			Streams{In: strings.NewReader(""), Out: &out, Err: io.Discard}, clock.RealClock{})
		if code != ExitOK {
			t.Fatalf("__complete %v exited %d", args, code)
		}
		return out.String()
	}
	out := complete("drain", nodes[0], "cli-complete")
	if strings.Contains(out, nodes[0]+"\n") || !strings.Contains(out, nodes[1]+"\n") || !strings.Contains(out, ":4\n") {
		t.Errorf("completing a second node after %s:\n%s", nodes[0], out)
	}
	if out := complete("plan", "nothing-like-this"); strings.Contains(out, "cli-complete") {
		t.Errorf("completion offers nodes that do not match the prefix:\n%s", out)
	}
	out = complete("status", "-o", "")
	for _, f := range outputFormats {
		if !strings.Contains(out, f+"\n") {
			t.Errorf("-o completion lacks %s:\n%s", f, out)
		}
	}
}

// TestDrainMarksItsNodesAsOneBatch: the nodes of one drain command are one
// batch (Requester.Batch: the same ID on every node, their number as the
// size), which admission starts without waiting for the batch window; a
// later command is another batch; --gather requests without one (the
// apply drops the field this requester had set).
func TestDrainMarksItsNodesAsOneBatch(t *testing.T) {
	c := testenv.Start(t)
	cl := testenv.Controller(t, c)
	nodes := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "cli-batch", Count: 3})
	alice := user{t: t, kubeconfig: c.Kubeconfig}
	t.Cleanup(func() { alice.vacate(append([]string{"cancel"}, nodes...)...) })
	batchOf := func(node string) *v1alpha1.RequestBatch {
		nd := getDrain(t, cl, node)
		for _, r := range nd.Spec.Requesters {
			if r.Name == admin {
				return r.Batch
			}
		}
		t.Fatalf("no entry of %s on %s: %+v", admin, node, nd.Spec.Requesters)
		return nil
	}

	alice.must(ExitOK, "drain", nodes[0], nodes[1])
	first, second := batchOf(nodes[0]), batchOf(nodes[1])
	if first == nil || second == nil || *first != *second || first.Size != 2 || first.ID == "" {
		t.Fatalf("batches %+v and %+v, want one batch of 2 on both", first, second)
	}
	alice.must(ExitOK, "drain", nodes[2])
	if b := batchOf(nodes[2]); b == nil || b.Size != 1 || b.ID == first.ID {
		t.Errorf("a second command's batch %+v, want its own batch of 1 (not %s)", b, first.ID)
	}
	alice.must(ExitOK, "drain", nodes[2], "--gather")
	if b := batchOf(nodes[2]); b != nil {
		t.Errorf("after --gather the entry still has batch %+v", b)
	}
}
