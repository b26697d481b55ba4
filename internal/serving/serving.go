// Package serving is endpoint-aware eviction's pod side: the readiness
// gate vacate.dev/serving, the pod condition vacate sets for it, and what
// EndpointSlices say of a pod. A gated pod is Ready only while its
// condition is True; vacate sets it True as soon as it sees the pod, and
// False before it evicts the pod, so that the pod leaves its Services'
// endpoints (and the data planes that follow them) while it still serves.
//
// The condition is the state: a pod whose condition is False with reason
// Draining is out of service for a drain, since the condition's
// lastTransitionTime. A controller that restarts reads it back from the
// pod.
package serving

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// Condition is the readiness gate's condition type.
const Condition corev1.PodConditionType = v1alpha1.ConditionServing

// Reasons of the condition.
const (
	// ReasonServing: vacate saw the gated pod and let it serve.
	ReasonServing = "Serving"
	// ReasonDraining: a drain took the pod out of service to evict it.
	ReasonDraining = v1alpha1.ReasonServingDraining
	// ReasonRestored: the pod is back in service: its drain ended or was
	// cancelled, or its eviction was refused after all.
	ReasonRestored = "Restored"
)

// Gated reports whether the pod has the readiness gate.
func Gated(p *corev1.Pod) bool { return v1alpha1.ServingGated(p) }

// Get returns the pod's condition, or nil when it has none.
func Get(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == Condition {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// OutOfService reports whether a drain took the pod out of service, and
// since when.
func OutOfService(p *corev1.Pod) (time.Time, bool) { return v1alpha1.OutOfService(p) }

// NeedsServing reports whether a gated pod waits for vacate to let it
// serve: it runs (it has its IP: its sandbox is up, its containers start
// after) and has no condition yet. Waiting for the IP costs no readiness:
// the containers start after the sandbox. It also leaves the pod's first
// status writes (the IP, the scheduler's and the kubelet's conditions) to
// their owners; on the dev cluster kwok gave a pod whose status vacate
// wrote first a second IP.
func NeedsServing(p *corev1.Pod) bool {
	return Gated(p) && Get(p) == nil && p.DeletionTimestamp.IsZero() && p.Status.PodIP != ""
}

// Set writes the pod's condition with a strategic-merge patch of
// pods/status (conditions merge by type), on the pod with this UID only.
func Set(ctx context.Context, c client.Client, p *corev1.Pod, status corev1.ConditionStatus, reason, message string, now time.Time) error {
	patch := map[string]any{
		"metadata": map[string]any{"uid": p.UID},
		"status": map[string]any{"conditions": []corev1.PodCondition{{
			Type:               Condition,
			Status:             status,
			Reason:             reason,
			Message:            message,
			LastTransitionTime: metav1.NewTime(now),
		}}},
	}
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	target := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}}
	if err := c.Status().Patch(ctx, target, client.RawPatch(types.StrategicMergePatchType, data)); err != nil {
		return fmt.Errorf("setting %s %s on pod %s/%s: %w", Condition, status, p.Namespace, p.Name, err)
	}
	return nil
}

// Listed is what the EndpointSlices that list a pod say of it.
type Listed struct {
	// Ready are the slices (namespace/name) that still show the pod ready.
	Ready []string
	// Slices is how many slices list the pod.
	Slices int
}

// Updated reports whether no slice shows the pod ready any more.
func (l Listed) Updated() bool { return len(l.Ready) == 0 }

// Endpoints reads what slices say of the pod with this UID. An endpoint
// without conditions.ready counts as ready, as the API defines it.
func Endpoints(slices []discoveryv1.EndpointSlice, uid types.UID) Listed {
	var out Listed
	for i := range slices {
		s := &slices[i]
		listed, ready := false, false
		for _, ep := range s.Endpoints {
			if ep.TargetRef == nil || ep.TargetRef.UID != uid {
				continue
			}
			listed = true
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				ready = true
			}
		}
		if listed {
			out.Slices++
		}
		if ready {
			out.Ready = append(out.Ready, s.Namespace+"/"+s.Name)
		}
	}
	return out
}
