package rbac

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
)

// TestControllerCannotTaintNodesEmpty: vacate-controller's only taint is
// vacate.dev/draining with effect NoSchedule (it keeps DaemonSet pods off
// a draining node). A stolen controller token must not be able to put a
// NoExecute taint on nodes, which would make Kubernetes' taint manager
// delete every pod that does not tolerate it, past every
// PodDisruptionBudget; nor set the trigger taint vacate.dev/drain, which
// is people's to set and would drain any node.
func TestControllerCannotTaintNodesEmpty(t *testing.T) {
	c := testenv.Start(t)
	install(t, c)
	ctx := testenv.Context(t)
	node := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "rbac-taint", Count: 1})[0]
	sa := clientset(t, asServiceAccount(c)).CoreV1().Nodes()
	// withTaint adds one taint to the node's current ones, as the
	// controller would (a JSON patch tested against the resourceVersion:
	// the node lifecycle controller changes the list on its own).
	withTaint := func(taint corev1.Taint) error {
		var last error
		_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				last = err
				return false, nil
			}
			taints := append(n.Spec.Taints, taint)
			patch, _ := json.Marshal([]map[string]any{
				{"op": "test", "path": "/metadata/resourceVersion", "value": n.ResourceVersion},
				{"op": "replace", "path": "/spec/taints", "value": taints},
			})
			if n.Spec.Taints == nil {
				patch, _ = json.Marshal([]map[string]any{
					{"op": "test", "path": "/metadata/resourceVersion", "value": n.ResourceVersion},
					{"op": "add", "path": "/spec/taints", "value": taints},
				})
			}
			_, last = sa.Patch(ctx, node, types.JSONPatchType, patch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
			return last == nil || !isConflictOrTestFailed(last), nil
		})
		return last
	}
	const effects = "vacate-controller may add or change only its taint vacate.dev/draining, with effect NoSchedule"
	check(t, "the policy refusing a NoExecute taint", func() error {
		return refused(withTaint(corev1.Taint{Key: "vacate.dev/draining", Value: "x", Effect: corev1.TaintEffectNoExecute}), effects)
	})
	for _, tc := range []struct {
		what    string
		taint   corev1.Taint
		refusal string
	}{
		{"its taint with effect PreferNoSchedule", corev1.Taint{Key: "vacate.dev/draining", Value: "x", Effect: corev1.TaintEffectPreferNoSchedule}, effects},
		{"the trigger taint vacate.dev/drain (NoSchedule)", corev1.Taint{Key: "vacate.dev/drain", Effect: corev1.TaintEffectNoSchedule}, effects},
		{"the trigger taint vacate.dev/drain (NoExecute)", corev1.Taint{Key: "vacate.dev/drain", Effect: corev1.TaintEffectNoExecute}, effects},
		{"its taint, NoSchedule", corev1.Taint{Key: "vacate.dev/draining", Value: "x", Effect: corev1.TaintEffectNoSchedule}, ""},
	} {
		err := withTaint(tc.taint)
		if tc.refusal != "" {
			err = refused(err, tc.refusal)
		}
		if err != nil {
			t.Errorf("adding %s: %v", tc.what, err)
		}
	}
}

// isConflictOrTestFailed: the node changed since it was read (the patch's
// test operation failed: 422), so the patch is built again. The policy
// refuses with 403.
func isConflictOrTestFailed(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsConflict(err)
}

// TestControllerSetsOnlyTheDrainConditionsOnNodes: through nodes/status
// vacate-controller sets the node conditions Kubernetes defines for drains,
// DrainInProgress and Drained, and nothing else: a stolen controller token
// cannot mark a node NotReady (which would have its pods evicted by the
// node lifecycle controller), nor change its capacity or addresses.
func TestControllerSetsOnlyTheDrainConditionsOnNodes(t *testing.T) {
	c := testenv.Start(t)
	install(t, c)
	ctx := testenv.Context(t)
	node := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "rbac-status", Count: 1})[0]
	sa := clientset(t, asServiceAccount(c)).CoreV1().Nodes()
	try := func(patch, refusal string) error {
		_, err := sa.Patch(ctx, node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}, "status")
		if refusal == "" {
			return err
		}
		return refused(err, refusal)
	}
	const (
		conditions = "vacate-controller may set only the node conditions DrainInProgress and Drained"
		status     = "vacate-controller may change nothing of a Node's status but its drain conditions"
	)
	check(t, "the policy refusing a Ready condition", func() error {
		return try(`{"status":{"conditions":[{"type":"Ready","status":"False","reason":"Forged","message":"x"}]}}`, conditions)
	})
	for _, p := range []struct{ what, patch, refusal string }{
		{"mark the node under memory pressure", `{"status":{"conditions":[{"type":"MemoryPressure","status":"True","reason":"Forged"}]}}`, conditions},
		{"set MaintenancePlanned (people's, a trigger)", `{"status":{"conditions":[{"type":"MaintenancePlanned","status":"True","reason":"Forged"}]}}`, conditions},
		{"change its capacity", `{"status":{"capacity":{"pods":"1"}}}`, status},
		{"change its addresses", `{"status":{"addresses":[{"type":"InternalIP","address":"10.0.0.9"}]}}`, status},
		{"set DrainInProgress", `{"status":{"conditions":[{"type":"DrainInProgress","status":"True","reason":"Evicting","message":"vacate NodeDrain x: Evicting"}]}}`, ""},
		{"set Drained", `{"status":{"conditions":[{"type":"Drained","status":"True","reason":"Drained","message":"vacate NodeDrain x: drained"}]}}`, ""},
	} {
		if err := try(p.patch, p.refusal); err != nil {
			t.Errorf("%s: %v", p.what, err)
		}
	}
}
