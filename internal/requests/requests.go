// Package requests adds and withdraws one requester's entry on a NodeDrain,
// the way every requester does it (the CLI, the trigger controller):
// server-side apply under a field manager of the requester's own, so each
// owns its entry and never touches the others'; a drain left with no
// requester is deleted, only if nobody joined meanwhile.
package requests

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// FieldManager is the server-side apply manager of a requester.
func FieldManager(requester string) string {
	m := "vacate-" + requester
	if len(m) > 128 { // the API's limit: keep it unique with a hash of the whole
		sum := sha256.Sum256([]byte(requester))
		m = m[:128-17] + "-" + hex.EncodeToString(sum[:8])
	}
	return m
}

// Apply puts the requester's entry on the node's NodeDrain, creating the
// drain if there is none. mode and policyName are applied when set; callers
// joining a drain restate its own so this manager shares them.
func Apply(ctx context.Context, c client.Client, node string, r v1alpha1.Requester, mode v1alpha1.DrainMode, policyName string) error {
	entry := map[string]any{"name": r.Name}
	if r.Reason != "" {
		entry["reason"] = r.Reason
	}
	spec := map[string]any{"nodeName": node, "requesters": []any{entry}}
	if mode != "" {
		spec["mode"] = string(mode)
	}
	if policyName != "" {
		spec["policyName"] = policyName
	}
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(drain(node, "", spec)), client.FieldOwner(FieldManager(r.Name)))
}

func drain(name, uid string, spec map[string]any) *unstructured.Unstructured {
	meta := map[string]any{"name": name}
	if uid != "" {
		meta["uid"] = uid
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(),
		"kind":       "NodeDrain",
		"metadata":   meta,
		"spec":       spec,
	}}
}

// Withdraw removes the requester's entry from nd and returns the drain as it
// is after: by applying the drain without the entry under the requester's
// manager (which owns the entry when Apply added it; the drain's mode and
// policy are restated, so the others keep them), else, for an entry written
// another way, by a JSON patch that first tests the entry is the one it
// removes. It never creates a drain: the apply names nd's UID.
func Withdraw(ctx context.Context, c client.Client, nd *v1alpha1.NodeDrain, requester string) (*v1alpha1.NodeDrain, error) {
	spec := map[string]any{"nodeName": nd.Spec.NodeName}
	if nd.Spec.Mode != "" {
		spec["mode"] = string(nd.Spec.Mode)
	}
	if nd.Spec.PolicyName != "" {
		spec["policyName"] = nd.Spec.PolicyName
	}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(drain(nd.Name, string(nd.UID), spec)), client.FieldOwner(FieldManager(requester))); err != nil {
		return nil, err
	}
	for range 10 {
		if err := c.Get(ctx, types.NamespacedName{Name: nd.Name}, nd); err != nil {
			return nil, err
		}
		i := Index(nd, requester)
		if i < 0 {
			return nd, nil
		}
		ops, err := json.Marshal([]map[string]any{
			{"op": "test", "path": fmt.Sprintf("/spec/requesters/%d/name", i), "value": requester},
			{"op": "remove", "path": fmt.Sprintf("/spec/requesters/%d", i)},
		})
		if err != nil {
			return nil, err
		}
		err = c.Patch(ctx, nd, client.RawPatch(types.JSONPatchType, ops))
		if err != nil && !apierrors.IsInvalid(err) && !apierrors.IsConflict(err) {
			return nil, err
		}
		// Done, or the test failed (422) or the object moved: read it again.
	}
	return nil, fmt.Errorf("NodeDrain %s kept changing while withdrawing %s", nd.Name, requester)
}

// DeleteIfIdle deletes a NodeDrain that has no requester left, so the
// controller undoes the drain and releases it. The preconditions make sure
// nobody joined the drain in between; if someone did, it stays and
// DeleteIfIdle returns false.
func DeleteIfIdle(ctx context.Context, c client.Client, nd *v1alpha1.NodeDrain) (bool, error) {
	for range 10 {
		if len(nd.Spec.Requesters) > 0 {
			return false, nil
		}
		uid, rv := nd.UID, nd.ResourceVersion
		err := c.Delete(ctx, nd, client.Preconditions{UID: &uid, ResourceVersion: &rv})
		switch {
		case err == nil, apierrors.IsNotFound(err):
			return true, nil
		case !apierrors.IsConflict(err):
			return false, err
		}
		err = c.Get(ctx, types.NamespacedName{Name: nd.Name}, nd)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
	}
	return false, fmt.Errorf("NodeDrain %s kept changing", nd.Name)
}

// Index is the position of the requester's entry, or -1.
func Index(nd *v1alpha1.NodeDrain, requester string) int {
	for i, r := range nd.Spec.Requesters {
		if r.Name == requester {
			return i
		}
	}
	return -1
}
