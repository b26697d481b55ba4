// Package requests adds and withdraws one requester's entry on a NodeDrain,
// the way every requester does it (the CLI, the trigger controller):
// server-side apply under a field manager of the requester's own, so each
// owns its entry and never touches the others'; a drain left with no
// requester is deleted, only if nobody joined meanwhile. The mode only goes
// up: Raise, for a node's deletion, takes a drain to Decommission, and a
// requester that withdraws later restates the mode the drain has then.
package requests

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
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
	spec := applySpec(node, r, mode, policyName)
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(drain(node, "", spec)), client.FieldOwner(FieldManager(r.Name)))
}

// Raise puts the requester's entry on the node's NodeDrain in mode
// Decommission: it creates the drain in that mode when there is none (seen
// is nil), and raises a Maintenance drain to Decommission. Modes only go up,
// so when another manager owns spec.mode (a person's Maintenance request),
// Raise takes spec.mode over, and nothing else: it forces ownership only
// when spec.mode is the one field in conflict, and only on the version of
// the drain it was given (seen's resourceVersion). Any other conflict, or a
// drain changed since seen, is returned; the caller reads again. The
// requester's manager then owns spec.mode, so the others keep Decommission
// when they withdraw (see Withdraw).
func Raise(ctx context.Context, c client.Client, node string, r v1alpha1.Requester, seen *v1alpha1.NodeDrain) error {
	policyName := ""
	if seen != nil {
		policyName = seen.Spec.PolicyName
	}
	err := Apply(ctx, c, node, r, v1alpha1.ModeDecommission, policyName)
	if seen == nil || !onlyModeConflicts(err) {
		return err
	}
	spec := applySpec(node, r, v1alpha1.ModeDecommission, policyName)
	obj := drain(node, string(seen.UID), spec)
	obj.SetResourceVersion(seen.ResourceVersion)
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(FieldManager(r.Name)), client.ForceOwnership)
}

// modeField is spec.mode as server-side apply names it in conflicts.
const modeField = ".spec.mode"

// onlyModeConflicts reports whether err is a server-side apply conflict
// over spec.mode and no other field.
func onlyModeConflicts(err error) bool {
	var status apierrors.APIStatus
	if !apierrors.IsConflict(err) || !errors.As(err, &status) {
		return false
	}
	details := status.Status().Details
	if details == nil || len(details.Causes) == 0 {
		return false
	}
	for _, cause := range details.Causes {
		if cause.Type != metav1.CauseTypeFieldManagerConflict || cause.Field != modeField {
			return false
		}
	}
	return true
}

// applySpec is the spec a requester applies: its entry, and the mode and
// policy when set.
func applySpec(node string, r v1alpha1.Requester, mode v1alpha1.DrainMode, policyName string) map[string]any {
	entry := map[string]any{"name": r.Name}
	if r.Reason != "" {
		entry["reason"] = r.Reason
	}
	if r.Deadline != nil {
		entry["deadline"] = r.Deadline.UTC().Format(time.RFC3339)
	}
	if o := r.Overrides; o != nil {
		overrides := map[string]any{}
		if o.DeleteEmptyDirData {
			overrides["deleteEmptyDirData"] = true
		}
		if o.DeleteUnmanaged {
			overrides["deleteUnmanaged"] = true
		}
		if o.GracePeriodSeconds != nil {
			overrides["gracePeriodSeconds"] = *o.GracePeriodSeconds
		}
		if o.PodSelector != "" {
			overrides["podSelector"] = o.PodSelector
		}
		if len(overrides) > 0 {
			entry["overrides"] = overrides
		}
	}
	if r.Batch != nil {
		entry["batch"] = map[string]any{"id": r.Batch.ID, "size": int64(r.Batch.Size)}
	}
	spec := map[string]any{"nodeName": node, "requesters": []any{entry}}
	if mode != "" {
		spec["mode"] = string(mode)
	}
	if policyName != "" {
		spec["policyName"] = policyName
	}
	return spec
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
// policy are restated, so the others keep them; see restate), else, for an
// entry written another way, by a JSON patch that first tests the entry is
// the one it removes. It never creates a drain: the apply names nd's UID.
// A drain that is gone is a NotFound error (apierrors.IsNotFound): there is
// nothing to withdraw from.
//
// What it reads after a write is the API server's answer to that write, not
// c's cache: a controller's client reads an informer's copy, which can lag
// the write by a moment, and a stale copy would make every guarded patch
// fail its test. When a patch is refused all the same (someone else moved the
// entries), it reads c again after a pause that lets such a copy catch up.
func Withdraw(ctx context.Context, c client.Client, nd *v1alpha1.NodeDrain, requester string) (*v1alpha1.NodeDrain, error) {
	if err := restate(ctx, c, nd, requester); err != nil {
		return nil, err
	}
	pause := withdrawPause
	for attempt := range withdrawAttempts {
		if attempt > 0 {
			if err := sleep(ctx, pause); err != nil {
				return nil, err
			}
			pause *= 2
			if err := c.Get(ctx, types.NamespacedName{Name: nd.Name}, nd); err != nil {
				return nil, err
			}
		}
		i := Index(nd, requester)
		if i < 0 {
			return nd, nil
		}
		err := c.Patch(ctx, nd, WithdrawPatch(i, requester))
		if err == nil {
			return nd, nil // nd is the server's answer: the entry is gone
		}
		if !apierrors.IsInvalid(err) && !apierrors.IsConflict(err) {
			return nil, err
		}
		// The test failed (422) or the object moved: read it again.
	}
	return nil, fmt.Errorf("NodeDrain %s kept changing while withdrawing %s", nd.Name, requester)
}

// withdrawAttempts and withdrawPause bound Withdraw's guarded patches: the
// pauses between them add up to about 2.5 s, far longer than an informer's
// copy lags.
const (
	withdrawAttempts = 8
	withdrawPause    = 20 * time.Millisecond
)

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// WithdrawPatch is the JSON patch that removes requester, the i-th entry of
// spec.requesters, and fails (422) if that entry is another's by then.
func WithdrawPatch(i int, requester string) client.Patch {
	ops, _ := json.Marshal([]map[string]any{ // of strings and ints: cannot fail
		{"op": "test", "path": fmt.Sprintf("/spec/requesters/%d/name", i), "value": requester},
		{"op": "remove", "path": fmt.Sprintf("/spec/requesters/%d", i)},
	})
	return client.RawPatch(types.JSONPatchType, ops)
}

// restateAttempts bounds how often restate reads the drain again.
const restateAttempts = 5

// restate applies nd without the requester's entry under the requester's
// manager, restating the drain's mode and policy. The mode restated must be
// the drain's current one: when nd is older than a raise (node deletion
// raises Maintenance to Decommission, and the raiser's manager owns the
// mode), restating Maintenance is refused, as a conflict with the raiser or
// by the API's rule that the mode never goes down; restate then reads the
// drain again and restates what it finds, so the requester leaves the drain
// in Decommission. A drain replaced under the same name (another UID) is
// not touched: the error is returned.
func restate(ctx context.Context, c client.Client, nd *v1alpha1.NodeDrain, requester string) error {
	for attempt := 1; ; attempt++ {
		spec := map[string]any{"nodeName": nd.Spec.NodeName}
		if nd.Spec.Mode != "" {
			spec["mode"] = string(nd.Spec.Mode)
		}
		if nd.Spec.PolicyName != "" {
			spec["policyName"] = nd.Spec.PolicyName
		}
		applied := drain(nd.Name, string(nd.UID), spec)
		err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(applied), client.FieldOwner(FieldManager(requester)))
		if err == nil {
			// The answer is the whole drain as stored after the apply.
			stored := &v1alpha1.NodeDrain{}
			if cerr := runtime.DefaultUnstructuredConverter.FromUnstructured(applied.Object, stored); cerr != nil {
				return fmt.Errorf("reading the API server's answer for NodeDrain %s: %w", nd.Name, cerr)
			}
			*nd = *stored
			return nil
		}
		if attempt == restateAttempts || (!apierrors.IsConflict(err) && !apierrors.IsInvalid(err)) {
			return err
		}
		uid := nd.UID
		if gerr := c.Get(ctx, types.NamespacedName{Name: nd.Name}, nd); apierrors.IsNotFound(gerr) {
			return gerr // gone: the refusal was the apply's UID precondition
		} else if gerr != nil {
			return errors.Join(err, gerr)
		}
		if nd.UID != uid {
			return err
		}
	}
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

// ManagedBy reports whether a requester that is picks out has a field
// manager among nd's managed fields: it applied to the drain, and owns some
// of its fields still (a requester that withdrew keeps the drain's nodeName,
// mode and policy it restated). nd must be read from the API server: an
// informer's copy may have its managed fields stripped. A manager whose name
// was shortened with a hash (FieldManager) is judged by the requester name's
// first part.
func ManagedBy(nd *v1alpha1.NodeDrain, is func(requester string) bool) bool {
	for _, m := range nd.ManagedFields {
		if name, ok := strings.CutPrefix(m.Manager, "vacate-"); ok && is(name) {
			return true
		}
	}
	return false
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
