package replicatedvolume_test

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
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/config/admission"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
)

// Issue 23: the volumes keep every replica through a Failed Maintenance
// drain whose node is then deleted, and through another system trying to
// complete the Mover's Evacuation.

// TestVolumesFailedDrainThenNodeDeleted: a person's Maintenance drain of a
// node whose pods use its volumes Fails (timeouts.drain) while the Mover is
// held mid-way. The node is then deleted: the Failed drain is raised to
// Decommission and runs again, the Mover is asked for Decommission, the
// pods stay until their volumes are copied, and only then is the node
// released. No replica is lost.
func TestVolumesFailedDrainThenNodeDeleted(t *testing.T) {
	s := startSafety(t, "rvfail", 4)
	s.nodeDeletePolicy(t)
	s.drainTimeout(t, 3*time.Second)
	hot := s.nodes[0]
	data := s.volumes(t, hot, 8)
	want := s.replicaCounts(t, data)
	s.app(t, s.prefix, hot, names(data))
	inUse := watchInUse(t, s.env)
	guard := guardPods(t, s.c, s.ns, s.movedFirst)

	t.Log("a Maintenance drain, the Mover held mid-way: it Fails by timeouts.drain")
	s.maintenance(t, hot)
	s.pauseMidway(t, hot)
	s.waitDrain(t, guard, hot, "Failed in Maintenance", func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == v1alpha1.PhaseFailed && nd.Status.Mode == v1alpha1.ModeMaintenance
	})
	s.drainTimeout(t, 10*time.Minute)

	t.Log("the node is deleted: the Failed drain runs again, in Decommission")
	s.deleteNode(t, hot)
	s.heldForDecommission(t, guard, hot)
	s.finishDecommission(t, guard, inUse, hot)
	s.checkLayout(t, data, want, hot)
}

// TestVolumesOnlyTheirReporterCompletes: the Mover's EvacuationProvider
// names its reporter. While it is held mid-way, another storage system's
// service account, which may write evacuations/status, writes Completed on
// the Mover's Evacuation: the API server refuses it (the admission policies
// vacate ships), the app's pods stay, and they leave only once the Mover
// itself completes. No replica is lost.
func TestVolumesOnlyTheirReporterCompletes(t *testing.T) {
	s := startSafety(t, "rvrep", 3)
	const mover, impostor = "system:serviceaccount:storage:rv-mover", "system:serviceaccount:queues:broker"
	s.installAdmissionPolicies(t)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := &v1alpha1.EvacuationProvider{}
		if err := s.cl.Get(testenv.Context(t), types.NamespacedName{Name: s.moverP}, p); err != nil {
			return err
		}
		p.Spec.Reporter = &v1alpha1.ProviderReporter{User: mover}
		return s.cl.Update(testenv.Context(t), p)
	})
	if err != nil {
		t.Fatal(err)
	}
	other := s.statusWriter(t, impostor)
	hot := s.nodes[0]
	data := s.volumes(t, hot, 8)
	want := s.replicaCounts(t, data)
	s.app(t, s.prefix, hot, names(data))
	guard := guardPods(t, s.c, s.ns, s.movedFirst)

	s.maintenance(t, hot)
	s.pauseMidway(t, hot)
	ev, err := s.evacuation(t, hot, s.moverP)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Spec.Reporter != mover {
		t.Errorf("Evacuation %s: spec.reporter %q, want the provider's, %q", ev.Name, ev.Spec.Reporter, mover)
	}

	t.Log("another system's service account writes Completed on the Mover's Evacuation")
	complete := func(ev *v1alpha1.Evacuation, opts ...client.SubResourcePatchOption) error {
		patch := fmt.Sprintf(`{"status":{"phase":"Completed","message":"done, says the broker","observedGeneration":%d,"heartbeatTime":%q}}`,
			ev.Generation, time.Now().UTC().Format(time.RFC3339))
		return other.Status().Patch(testenv.Context(t), ev.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(patch)), opts...)
	}
	// The API server enforces a new policy once its informers see it: wait
	// for a dry run to be refused first (for at most a minute: without the
	// policy none ever is), then try for real.
	_ = wait.PollUntilContextTimeout(testenv.Context(t), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return apierrors.IsForbidden(complete(ev, client.DryRunAll)), nil
	})
	err = complete(ev)
	if err == nil || !strings.Contains(err.Error(), "may not write the status of Evacuation") {
		t.Errorf("the impostor's Completed: %v, want refused", err)
	}
	s.waitHeartbeats(t, guard, ev.Name, 2)
	s.checkAppStays(t, guard, hot, 2, "after the impostor's Completed")

	t.Log("the Mover itself finishes: the pods leave")
	s.mover.resume()
	s.waitDrain(t, nil, hot, "Drained", func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
	guard.check(t, 2)
	s.checkLayout(t, data, want, hot)
}

// drainTimeout sets timeouts.drain of the test's policy.
func (s *safety) drainTimeout(t *testing.T, d time.Duration) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		dp := &v1alpha1.DrainPolicy{}
		if err := s.cl.Get(testenv.Context(t), types.NamespacedName{Name: s.prefix}, dp); err != nil {
			return err
		}
		dp.Spec.Timeouts.Drain = &metav1.Duration{Duration: d}
		return s.cl.Update(testenv.Context(t), dp)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// installAdmissionPolicies applies the ValidatingAdmissionPolicies that
// 'vacate manifests admission' prints, for the test's duration.
func (s *safety) installAdmissionPolicies(t *testing.T) {
	t.Helper()
	for _, obj := range testenv.Objects(t, admission.YAML()) {
		if err := s.cl.Create(testenv.Context(t), obj); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		t.Cleanup(func() { _ = s.cl.Delete(context.Background(), obj) })
	}
}

// statusWriter is a client acting as user, whom RBAC lets read Evacuations
// and write their status, as any provider needs.
func (s *safety) statusWriter(t *testing.T, user string) client.Client {
	t.Helper()
	ctx := testenv.Context(t)
	name := "rv-test-status-writer"
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"evacuations", "evacuations/status"},
		Verbs: []string{"get", "list", "watch", "patch", "update"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}
	for _, obj := range []client.Object{role, binding} {
		if err := s.cl.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.cl.Delete(context.Background(), obj) })
	}
	cl := testenv.ClientAs(t, s.c, user)
	// RBAC takes effect when the API server's informers see it.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return cl.List(ctx, &v1alpha1.EvacuationList{}) == nil, nil
	})
	if err != nil {
		t.Fatalf("RBAC never let %s read Evacuations", user)
	}
	return cl
}
