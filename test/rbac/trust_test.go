package rbac

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/requests"
)

// Issue 23, items 2 and 3: forcing is a right, and each provider completes
// only its own Evacuations.

// clusterRole creates a ClusterRole of these rules, deleted when the test ends.
func clusterRole(t *testing.T, cl client.Client, name string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
	if err := cl.Create(testenv.Context(t), role); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), role) })
}

// TestDeadlinesNeedTheRightToForce: a person bound to vacate-user requests
// a drain, but may not set a deadline on their requester (nor move one):
// a deadline puts the drain first in the queue and, under ForceDelete,
// deletes pods past their PDBs. The refusal says who may. With the verb
// force on drainpolicies they may; vacate's own managers (the verb manage
// on nodedrains: the agent, the triggers) always may.
func TestDeadlinesNeedTheRightToForce(t *testing.T) {
	c := testenv.Start(t)
	cl := install(t, c)
	ctx := testenv.Context(t)
	node := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "rbac-force", Count: 1})[0]
	bindUser(t, c, "dora", "vacate-user")
	dora := client.NewDryRunClient(userClient(t, c, "dora"))
	soon := &metav1.Time{Time: time.Now().Add(10 * time.Minute).Truncate(time.Second)}
	testutil.Eventually(t, patience, "vacate-user taking effect for dora", func() error {
		return requests.Apply(ctx, dora, node, v1alpha1.Requester{Name: "cli:dora", Reason: "kernel"}, "", "")
	})
	const refusal = "may not set the deadline of requester cli:dora"
	check(t, "dora setting a deadline without the verb force", func() error {
		err := requests.Apply(ctx, dora, node, v1alpha1.Requester{Name: "cli:dora", Deadline: soon}, "", "")
		if err := refused(err, refusal); err != nil {
			return err
		}
		if !strings.Contains(err.Error(), "verb force on the DrainPolicy") || !strings.Contains(err.Error(), "vacate-agent") {
			return fmt.Errorf("the refusal does not say who may: %w", err)
		}
		return nil
	})

	t.Log("a deadline already there, set by someone who may, is dora's to keep or drop, not to move")
	if err := requests.Apply(ctx, cl, node, v1alpha1.Requester{Name: "cli:dora", Deadline: soon}, "", ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cl.Delete(context.Background(), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: node}})
	})
	if err := requests.Apply(ctx, dora, node, v1alpha1.Requester{Name: "cli:dora", Reason: "same deadline", Deadline: soon}, "", ""); err != nil {
		t.Errorf("dora restating the deadline she has: %v", err)
	}
	if err := requests.Apply(ctx, dora, node, v1alpha1.Requester{Name: "cli:dora"}, "", ""); err != nil {
		t.Errorf("dora dropping her deadline: %v", err)
	}
	moved := &metav1.Time{Time: soon.Add(-5 * time.Minute)}
	if err := refused(requests.Apply(ctx, dora, node, v1alpha1.Requester{Name: "cli:dora", Deadline: moved}, "", ""), refusal); err != nil {
		t.Errorf("dora moving her deadline: %v", err)
	}

	t.Log("with the verb force on drainpolicies, dora may")
	clusterRole(t, cl, "rbac-test-force", rbacv1.PolicyRule{APIGroups: []string{"vacate.dev"}, Resources: []string{"drainpolicies"}, Verbs: []string{"force"}})
	bindUser(t, c, "dora", "rbac-test-force")
	check(t, "dora setting a deadline with the verb force", func() error {
		return requests.Apply(ctx, dora, node, v1alpha1.Requester{Name: "cli:dora", Deadline: moved}, "", "")
	})

	t.Log("vacate's agent (the verb manage on nodedrains) may, without force")
	clusterRole(t, cl, "rbac-test-manage", rbacv1.PolicyRule{APIGroups: []string{"vacate.dev"}, Resources: []string{"nodedrains"},
		Verbs: []string{"get", "list", "create", "patch", "update", "manage"}})
	bindUser(t, c, "agent-x", "rbac-test-manage")
	agent := client.NewDryRunClient(userClient(t, c, "agent-x"))
	check(t, "a manager setting a deadline", func() error {
		return requests.Apply(ctx, agent, node, v1alpha1.Requester{Name: "agent:aws-spot", Deadline: moved}, "", "")
	})
}

// TestEvacuationStatusOnlyByItsReporter: the status of an Evacuation whose
// provider names a reporter (spec.reporter, copied by vacate) may be
// written by that identity only, or by a subject with the verb report on
// the provider: another storage system's service account, which RBAC lets
// write evacuations/status, cannot complete it. An Evacuation without a
// reporter stays writable by anyone RBAC allows.
func TestEvacuationStatusOnlyByItsReporter(t *testing.T) {
	c := testenv.Start(t)
	cl := install(t, c)
	ctx := testenv.Context(t)
	const volumes, broker, auditor = "system:serviceaccount:storage:volumes", "system:serviceaccount:queues:broker", "auditor"
	clusterRole(t, cl, "rbac-test-provider", rbacv1.PolicyRule{APIGroups: []string{"vacate.dev"}, Resources: []string{"evacuations", "evacuations/status"},
		Verbs: []string{"get", "list", "watch", "patch", "update"}})
	for _, u := range []string{volumes, broker, auditor} {
		bindUser(t, c, u, "rbac-test-provider")
	}
	guarded := evacuation(t, cl, "rbac-guarded", volumes)
	open := evacuation(t, cl, "rbac-open", "")
	complete := func(user string, ev *v1alpha1.Evacuation) error {
		patch := fmt.Sprintf(`{"status":{"phase":"Completed","message":"by %s","observedGeneration":%d,"heartbeatTime":%q}}`,
			user, ev.Generation, time.Now().UTC().Format(time.RFC3339))
		return userClient(t, c, user).Status().Patch(ctx, ev.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(patch)), client.DryRunAll)
	}
	check(t, "RBAC taking effect for the volumes provider", func() error { return complete(volumes, guarded) })
	check(t, "the broker completing the volumes provider's Evacuation", func() error {
		err := complete(broker, guarded)
		if err := refused(err, "may not write the status of Evacuation rbac-guarded"); err != nil {
			return err
		}
		if !strings.Contains(err.Error(), volumes) {
			return fmt.Errorf("the refusal does not name the reporter: %w", err)
		}
		return nil
	})
	if err := complete(broker, open); err != nil {
		t.Errorf("the broker writing an Evacuation whose provider names no reporter: %v", err)
	}
	if err := refused(complete(auditor, guarded), "may not write the status"); err != nil {
		t.Errorf("the auditor without the verb report: %v", err)
	}
	clusterRole(t, cl, "rbac-test-report", rbacv1.PolicyRule{APIGroups: []string{"vacate.dev"}, Resources: []string{"evacuationproviders"},
		ResourceNames: []string{guarded.Spec.Provider}, Verbs: []string{"report"}})
	bindUser(t, c, auditor, "rbac-test-report")
	check(t, "the auditor with the verb report on the provider", func() error { return complete(auditor, guarded) })
}

// evacuation creates an Evacuation of a provider named after it, with this
// reporter, as vacate-controller would.
func evacuation(t *testing.T, cl client.Client, name, reporter string) *v1alpha1.Evacuation {
	t.Helper()
	ev := &v1alpha1.Evacuation{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.EvacuationSpec{
		NodeName: "rbac-nowhere", Provider: name + "-provider", Mode: v1alpha1.ModeMaintenance, Desired: v1alpha1.DesiredEvacuate,
		DrainUID: "rbac-uid", Reporter: reporter}}
	if err := cl.Create(testenv.Context(t), ev); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), ev) })
	return ev
}

// TestOverridesNeedTheirVerbs: kubectl drain's flags, as a requester's
// overrides, each need their verb on the drain's DrainPolicy: a person
// bound to vacate-user is refused each, with a message naming the flag and
// the verb; with delete-emptydir-data on the policy the drain names, that
// override goes through and the others are still refused; dropping it
// needs no right; vacate's managers need none.
func TestOverridesNeedTheirVerbs(t *testing.T) {
	c := testenv.Start(t)
	cl := install(t, c)
	ctx := testenv.Context(t)
	node := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "rbac-overrides", Count: 1})[0]
	pol := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "rbac-overrides"}}
	if err := cl.Create(ctx, pol); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), pol) })
	clusterRole(t, cl, "rbac-test-use-overrides", rbacv1.PolicyRule{APIGroups: []string{"vacate.dev"}, Resources: []string{"drainpolicies"},
		ResourceNames: []string{pol.Name}, Verbs: []string{"use"}})
	bindUser(t, c, "olga", "vacate-user")
	bindUser(t, c, "olga", "rbac-test-use-overrides")
	olga := client.NewDryRunClient(userClient(t, c, "olga"))
	apply := func(o *v1alpha1.PodOverrides) error {
		return requests.Apply(ctx, olga, node, v1alpha1.Requester{Name: "cli:olga", Overrides: o}, "", pol.Name)
	}
	testutil.Eventually(t, patience, "vacate-user taking effect for olga", func() error { return apply(nil) })
	grace := int64(5)
	cases := []struct {
		flag, verb string
		o          *v1alpha1.PodOverrides
	}{
		{"--delete-emptydir-data", "delete-emptydir-data", &v1alpha1.PodOverrides{DeleteEmptyDirData: true}},
		{"--force", "delete-unmanaged", &v1alpha1.PodOverrides{DeleteUnmanaged: true}},
		{"--grace-period", "grace-period", &v1alpha1.PodOverrides{GracePeriodSeconds: &grace}},
		{"--pod-selector", "pod-selector", &v1alpha1.PodOverrides{PodSelector: "app=web"}},
	}
	for _, tc := range cases {
		check(t, "olga overriding with "+tc.flag+" without the verb", func() error {
			want := "may not override the pod rules with " + tc.flag
			if err := refused(apply(tc.o), want); err != nil {
				return err
			}
			if err := apply(tc.o); !strings.Contains(err.Error(), "verb "+tc.verb+" on DrainPolicy "+pol.Name) {
				return fmt.Errorf("the refusal does not name the verb and the policy: %w", err)
			}
			return nil
		})
	}

	t.Log("with delete-emptydir-data on the policy, that override goes through, and only that one")
	clusterRole(t, cl, "rbac-test-emptydir", rbacv1.PolicyRule{APIGroups: []string{"vacate.dev"}, Resources: []string{"drainpolicies"},
		ResourceNames: []string{pol.Name}, Verbs: []string{"delete-emptydir-data"}})
	bindUser(t, c, "olga", "rbac-test-emptydir")
	check(t, "olga with --delete-emptydir-data and its verb", func() error {
		return apply(&v1alpha1.PodOverrides{DeleteEmptyDirData: true})
	})
	if err := refused(apply(&v1alpha1.PodOverrides{DeleteEmptyDirData: true, DeleteUnmanaged: true}), "may not override the pod rules with --force"); err != nil {
		t.Errorf("olga adding --force to it: %v", err)
	}

	t.Log("an override already there is olga's to drop without a right")
	if err := requests.Apply(ctx, cl, node, v1alpha1.Requester{Name: "cli:olga", Overrides: &v1alpha1.PodOverrides{DeleteUnmanaged: true}}, "", pol.Name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cl.Delete(context.Background(), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: node}})
	})
	if err := apply(nil); err != nil {
		t.Errorf("olga dropping her override: %v", err)
	}
	if err := apply(&v1alpha1.PodOverrides{DeleteUnmanaged: true}); err != nil {
		t.Errorf("olga restating the override she has: %v", err)
	}

	t.Log("vacate's managers (the verb manage on nodedrains) need no verb")
	clusterRole(t, cl, "rbac-test-manage-overrides", rbacv1.PolicyRule{APIGroups: []string{"vacate.dev"}, Resources: []string{"nodedrains"},
		Verbs: []string{"get", "list", "create", "patch", "update", "manage"}})
	bindUser(t, c, "agent-y", "rbac-test-manage-overrides")
	agent := client.NewDryRunClient(userClient(t, c, "agent-y"))
	check(t, "a manager overriding", func() error {
		return requests.Apply(ctx, agent, node, v1alpha1.Requester{Name: "agent:test", Overrides: &v1alpha1.PodOverrides{PodSelector: "app=web", GracePeriodSeconds: &grace}}, "", pol.Name)
	})
}
