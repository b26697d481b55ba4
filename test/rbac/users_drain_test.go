package rbac

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	agentconfig "github.com/vacate-dev/vacate/config/agent"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/operator"
	"github.com/vacate-dev/vacate/internal/requests"
)

// Issue 40, section 3: a vacate-user changes only their own part of a
// drain. Each test runs people bound to vacate-user (and the verbs a
// cluster admin would grant them) against the admission policy
// vacate-nodedrains on the real API server; what they must not do is sent
// as a server-side dry run, so that every refusal is checked on the same
// drain.

// policies creates DrainPolicies of these names without a nodeSelector
// (governing no node by selection: for drains that name them), deleted
// when the test ends.
func policies(t *testing.T, cl client.Client, names ...string) {
	t.Helper()
	for _, name := range names {
		dp := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := cl.Create(testenv.Context(t), dp); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Delete(context.Background(), dp) })
	}
}

// verbsOn creates a ClusterRole granting verbs on drainpolicies (on the
// named ones, or all when names is empty) and binds it to user.
func verbsOn(t *testing.T, c *devcluster.Cluster, cl client.Client, user string, verbs []string, names ...string) {
	t.Helper()
	role := "rbac-test-" + user + "-" + strings.Join(verbs, "-") + "-on-" + strings.Join(append([]string{"all"}, names...), "-")
	clusterRole(t, cl, role, rbacv1.PolicyRule{APIGroups: []string{"vacate.dev"}, Resources: []string{"drainpolicies"},
		ResourceNames: names, Verbs: verbs})
	bindUser(t, c, user, role)
}

// deleteDrainAfter deletes the node's NodeDrain, and its finalizers, when
// the test ends (no controller runs to release them).
func deleteDrainAfter(t *testing.T, cl client.Client, node string) {
	t.Helper()
	t.Cleanup(func() {
		ctx := context.Background()
		nd := &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: node}}
		_ = cl.Patch(ctx, nd, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null,"ownerReferences":null}}`)))
		_ = cl.Delete(ctx, nd)
	})
}

// clientFor is a client of vacate's kinds and Kubernetes' own for cfg.
func clientFor(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	scheme, err := operator.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// mergePatch sends a JSON merge patch of the node's NodeDrain as a
// server-side dry run.
func mergePatch(ctx context.Context, cl client.Client, node, patch string) error {
	nd := &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: node}}
	return cl.Patch(ctx, nd, client.RawPatch(types.MergePatchType, []byte(patch)), client.DryRunAll)
}

// waitForUser waits until RBAC lets user read NodeDrains.
func waitForUser(t *testing.T, cl client.Client, user string) {
	t.Helper()
	testutil.Eventually(t, patience, "vacate-user taking effect for "+user, func() error {
		return cl.List(testenv.Context(t), &v1alpha1.NodeDrainList{})
	})
}

// TestChangingAPolicyNeedsUseOnIt (item 1): a drain's spec.policyName is
// changed or cleared only by someone with the verb use on the policy it
// names now, as naming it needed: clearing it (the node's own policy then
// applies, which may not call the pods' hooks) or moving the drain to
// another policy one may use is refused without use on the old one. With
// use on both it goes through; the requester who named it may clear it.
func TestChangingAPolicyNeedsUseOnIt(t *testing.T) {
	c := testenv.Start(t)
	cl := install(t, c)
	ctx := testenv.Context(t)
	node := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "rbac-clear", Count: 1})[0]
	const named, other = "rbac-clear-hooks", "rbac-clear-other"
	policies(t, cl, named, other)
	bindUser(t, c, "mallory", "vacate-user")
	bindUser(t, c, "victor", "vacate-user")
	mallory := userClient(t, c, "mallory")
	waitForUser(t, mallory, "mallory")

	t.Log("victor's drain names the policy that calls his pods' hooks")
	if err := requests.Apply(ctx, cl, node, v1alpha1.Requester{Name: "cli:victor", Reason: "kernel"}, "", named); err != nil {
		t.Fatal(err)
	}
	deleteDrainAfter(t, cl, node)

	const refusal = "may not change or clear the DrainPolicy " + named
	check(t, "mallory clearing victor's policy", func() error {
		err := mergePatch(ctx, mallory, node, `{"spec":{"policyName":null}}`)
		if err := refused(err, refusal); err != nil {
			return err
		}
		if !strings.Contains(err.Error(), "verb use on "+named) {
			return fmt.Errorf("the refusal does not name the verb and the policy: %w", err)
		}
		return nil
	})
	verbsOn(t, c, cl, "mallory", []string{"use"}, other)
	check(t, "mallory moving the drain to a policy she may use", func() error {
		return refused(mergePatch(ctx, mallory, node, `{"spec":{"policyName":"`+other+`"}}`), refusal)
	})

	t.Log("with use on the policy the drain names, she may change or clear it")
	verbsOn(t, c, cl, "mallory", []string{"use"}, named)
	check(t, "mallory moving the drain with use on both", func() error {
		return mergePatch(ctx, mallory, node, `{"spec":{"policyName":"`+other+`"}}`)
	})
	if err := mergePatch(ctx, mallory, node, `{"spec":{"policyName":null}}`); err != nil {
		t.Errorf("mallory clearing the policy with use on it: %v", err)
	}
	t.Log("joining and leaving the drain restate its policy: no right needed")
	if err := requests.Apply(ctx, client.NewDryRunClient(userClient(t, c, "victor")), node, v1alpha1.Requester{Name: "cli:victor"}, "", named); err != nil {
		t.Errorf("victor restating the policy without use: %v", err)
	}
}

// errorLine is nil when the CLI's output, besides warnings, is one line
// "error: ..." holding every want.
func errorLine(out string, wants ...string) error {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(l, "Warning: ") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "error: ") {
		return fmt.Errorf("want one error line, got %q", out)
	}
	for _, w := range wants {
		if !strings.Contains(lines[0], w) {
			return fmt.Errorf("the error line lacks %q: %s", w, lines[0])
		}
	}
	return nil
}

// agentRole applies the ClusterRole vacate-agent as config/agent ships it,
// and binds it to user: a subject with the agent's rights, which the
// policy vacate-agent (for its service account only) does not match.
func agentRole(t *testing.T, c *devcluster.Cluster, cl client.Client, user string) {
	t.Helper()
	y, err := agentconfig.YAML("registry.example/vacate-agent:v0")
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range testenv.Objects(t, y) {
		if obj.GetKind() == "ClusterRole" {
			if err := cl.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner("rbac-test"), client.ForceOwnership); err != nil {
				t.Fatal(err)
			}
		}
	}
	bindUser(t, c, user, "vacate-agent")
}

// TestDecommissionNeedsItsVerb (item 2): a Decommission drain cannot be
// lowered and has providers move data off the node for good. A person
// bound to vacate-user may not request one (vacate drain --mode
// Decommission: one line saying which verb is missing and who grants it)
// nor raise a Maintenance drain to it; joining or leaving a drain already
// in Decommission needs nothing. The verb decommission on drainpolicies
// lets them; vacate-agent's ClusterRole and vacate-controller's service
// account (its delete trigger) have what it takes, by the verb manage.
func TestDecommissionNeedsItsVerb(t *testing.T) {
	c := testenv.Start(t)
	cl := install(t, c)
	ctx := testenv.Context(t)
	nodes := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "rbac-decommission", Count: 2})
	kc := bindUser(t, c, "dan", "vacate-user")
	dan := client.NewDryRunClient(userClient(t, c, "dan"))
	waitForUser(t, dan, "dan")

	deleteDrainAfter(t, cl, nodes[0])
	// A server dry run until the policy is seen to refuse, then the
	// command itself: nothing is stored either way.
	check(t, "dan's vacate drain --mode Decommission (server dry run)", func() error {
		if code, out := vacate(t, kc, "drain", nodes[0], "--mode", "Decommission", "--dry-run=server"); code == 0 {
			return fmt.Errorf("exit 0, want refused: %s", out)
		}
		return nil
	})
	code, out := vacate(t, kc, "drain", nodes[0], "--mode", "Decommission")
	if code == 0 {
		t.Errorf("dan's vacate drain --mode Decommission: exit 0, want refused")
	}
	if err := errorLine(out, "may not request Decommission", "verb decommission", "cluster admin"); err != nil {
		t.Errorf("dan's vacate drain --mode Decommission: %v", err)
	}

	t.Log("dan's Maintenance drain may not be raised by him")
	if err := requests.Apply(ctx, cl, nodes[1], v1alpha1.Requester{Name: "cli:dan"}, v1alpha1.ModeMaintenance, ""); err != nil {
		t.Fatal(err)
	}
	deleteDrainAfter(t, cl, nodes[1])
	if err := refused(requests.Apply(ctx, dan, nodes[1], v1alpha1.Requester{Name: "cli:dan"}, v1alpha1.ModeDecommission, ""), "may not request Decommission"); err != nil {
		t.Errorf("dan raising his drain to Decommission: %v", err)
	}

	t.Log("vacate's triggers (the controller's service account) and the agent's role raise it")
	sa := client.NewDryRunClient(clientFor(t, asServiceAccount(c)))
	nd := &v1alpha1.NodeDrain{}
	if err := cl.Get(ctx, types.NamespacedName{Name: nodes[1]}, nd); err != nil {
		t.Fatal(err)
	}
	if err := requests.Raise(ctx, sa, nodes[1], v1alpha1.Requester{Name: v1alpha1.RequesterDelete}, nd); err != nil {
		t.Errorf("the delete trigger raising the drain to Decommission: %v", err)
	}
	agentRole(t, c, cl, "agent-d")
	agent := client.NewDryRunClient(userClient(t, c, "agent-d"))
	check(t, "a subject with vacate-agent's role raising the drain", func() error {
		return requests.Raise(ctx, agent, nodes[1], v1alpha1.Requester{Name: "agent:aws-spot"}, nd)
	})

	t.Log("in Decommission, dan restates its mode to stay or leave: nothing is raised")
	if err := requests.Raise(ctx, cl, nodes[1], v1alpha1.Requester{Name: v1alpha1.RequesterDelete}, nd); err != nil {
		t.Fatal(err)
	}
	if err := requests.Apply(ctx, dan, nodes[1], v1alpha1.Requester{Name: "cli:dan", Reason: "still"}, v1alpha1.ModeDecommission, ""); err != nil {
		t.Errorf("dan restating Decommission on a drain in Decommission: %v", err)
	}
	if code, out := vacate(t, kc, "cancel", nodes[1], "--dry-run=server"); code != 0 {
		t.Errorf("dan leaving a drain in Decommission: exit %d: %s", code, out)
	}

	t.Log("with the verb decommission, dan may")
	verbsOn(t, c, cl, "dan", []string{"decommission"})
	check(t, "dan's Decommission drain with the verb", func() error {
		return requests.Apply(ctx, dan, nodes[0], v1alpha1.Requester{Name: "cli:dan"}, v1alpha1.ModeDecommission, "")
	})
}

// TestFinalizersAndOwnersAreVacates (item 3): a drain's finalizers and
// owner references are vacate's. A person bound to vacate-user, even a
// requester of the drain, may not remove vacate.dev/restore (the undo
// would be skipped: the node left cordoned, evacuations not cancelled),
// add a finalizer of their own (the drain could never go, nor the node be
// drained again), or set an owner reference (garbage collection would
// delete a drain that others still want); nor create a drain with either.
// Labels and annotations stay theirs to write. vacate-controller's service
// account removes the finalizer.
func TestFinalizersAndOwnersAreVacates(t *testing.T) {
	c := testenv.Start(t)
	cl := install(t, c)
	ctx := testenv.Context(t)
	nodes := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "rbac-finalizer", Count: 2})
	node := nodes[0]
	bindUser(t, c, "fay", "vacate-user")
	fay := userClient(t, c, "fay")
	waitForUser(t, fay, "fay")
	nd := &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: node, Finalizers: []string{v1alpha1.FinalizerRestore}},
		Spec: v1alpha1.NodeDrainSpec{NodeName: node, Requesters: []v1alpha1.Requester{{Name: "cli:fay"}, {Name: "cli:gus"}}}}
	if err := cl.Create(ctx, nd); err != nil {
		t.Fatal(err)
	}
	deleteDrainAfter(t, cl, node)

	const refusal = "may not add a finalizer or an owner reference to NodeDrain"
	removeRestore := client.RawPatch(types.JSONPatchType, []byte(`[{"op":"test","path":"/metadata/finalizers/0","value":"`+v1alpha1.FinalizerRestore+`"},{"op":"remove","path":"/metadata/finalizers/0"}]`))
	check(t, "fay removing vacate.dev/restore", func() error {
		return refused(fay.Patch(ctx, nd.DeepCopy(), removeRestore, client.DryRunAll), refusal)
	})
	owner := fmt.Sprintf(`{"metadata":{"ownerReferences":[{"apiVersion":"vacate.dev/v1alpha1","kind":"NodeDrain","name":%q,"uid":"0d6c1b1e-0000-4000-8000-000000000001"}]}}`, nodes[1])
	for _, p := range []struct{ what, patch string }{
		{"adding a finalizer of her own", `{"metadata":{"finalizers":["` + v1alpha1.FinalizerRestore + `","example.com/keep"]}}`},
		{"setting an owner reference", owner},
	} {
		if err := refused(mergePatch(ctx, fay, node, p.patch), refusal); err != nil {
			t.Errorf("fay %s: %v", p.what, err)
		}
	}
	mine := &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: nodes[1], Finalizers: []string{"example.com/keep"}},
		Spec: v1alpha1.NodeDrainSpec{NodeName: nodes[1], Requesters: []v1alpha1.Requester{{Name: "cli:fay"}}}}
	if err := refused(fay.Create(ctx, mine, client.DryRunAll), refusal); err != nil {
		t.Errorf("fay creating a drain with a finalizer: %v", err)
	}
	if err := mergePatch(ctx, fay, node, `{"metadata":{"labels":{"team":"storage"},"annotations":{"example.com/ticket":"CHG-7"}}}`); err != nil {
		t.Errorf("fay labelling the drain: %v", err)
	}

	t.Log("vacate-controller's service account releases its finalizer")
	sa := clientFor(t, asServiceAccount(c))
	if err := sa.Patch(ctx, nd.DeepCopy(), removeRestore, client.DryRunAll); err != nil {
		t.Errorf("the controller removing vacate.dev/restore: %v", err)
	}
}

// TestPolicyChangeRechecksTheDrain (item 4): overrides, deadlines and the
// mode are checked when a requester sets them, against the policy the
// drain names then. When the drain's policy changes, every one of them is
// checked again, against the new policy, for the user making the change:
// pat, who may force and delete unmanaged pods under one policy, may not
// move a drain that carries them to a policy where he may not (nor clear
// its policy, which checks them on drainpolicies at large); the refusal
// lists each. With the verbs on the new policy he may.
func TestPolicyChangeRechecksTheDrain(t *testing.T) {
	c := testenv.Start(t)
	cl := install(t, c)
	ctx := testenv.Context(t)
	node := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "rbac-recheck", Count: 1})[0]
	const from, to = "rbac-recheck-from", "rbac-recheck-to"
	policies(t, cl, from, to)
	bindUser(t, c, "pat", "vacate-user")
	verbsOn(t, c, cl, "pat", []string{"use"}, from, to)
	verbsOn(t, c, cl, "pat", []string{"force", "delete-unmanaged", "decommission"}, from)
	pat := userClient(t, c, "pat")
	waitForUser(t, pat, "pat")

	t.Log("the drain, under " + from + ": olga's --force, dora's deadline, in Decommission")
	soon := &metav1.Time{Time: time.Now().Add(time.Hour).Truncate(time.Second)}
	if err := requests.Apply(ctx, cl, node, v1alpha1.Requester{Name: "cli:olga", Overrides: &v1alpha1.PodOverrides{DeleteUnmanaged: true}}, v1alpha1.ModeDecommission, from); err != nil {
		t.Fatal(err)
	}
	deleteDrainAfter(t, cl, node)
	if err := requests.Apply(ctx, cl, node, v1alpha1.Requester{Name: "cli:dora", Deadline: soon}, v1alpha1.ModeDecommission, from); err != nil {
		t.Fatal(err)
	}
	move := `{"spec":{"policyName":"` + to + `"}}`
	check(t, "pat moving the drain to "+to, func() error {
		err := mergePatch(ctx, pat, node, move)
		if err := refused(err, "may not move NodeDrain "+node+" to DrainPolicy "+to); err != nil {
			return err
		}
		for _, want := range []string{"the deadline of cli:dora (verb force)", "--force of cli:olga (verb delete-unmanaged)", "the mode Decommission (verb decommission)"} {
			if !strings.Contains(err.Error(), want) {
				return fmt.Errorf("the refusal does not list %q: %w", want, err)
			}
		}
		return nil
	})
	if err := refused(mergePatch(ctx, pat, node, `{"spec":{"policyName":null}}`), "the deadline of cli:dora (verb force)"); err != nil {
		t.Errorf("pat clearing the drain's policy: %v", err)
	}

	t.Log("with the verbs on " + to + ", pat may move it")
	verbsOn(t, c, cl, "pat", []string{"force", "delete-unmanaged", "decommission"}, to)
	check(t, "pat moving the drain with the verbs on "+to, func() error { return mergePatch(ctx, pat, node, move) })
}
