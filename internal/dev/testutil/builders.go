// Package testutil builds Kubernetes objects for tests, fluently:
//
//	testutil.Pod("web-1").OnNode("n1").OwnedBy("ReplicaSet", "web-abc").Labels("app", "web").Obj()
package testutil

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// PodBuilder builds a pod.
type PodBuilder struct{ p *corev1.Pod }

// Pod starts a running pod in namespace "default".
func Pod(name string) *PodBuilder {
	return &PodBuilder{p: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}}
}

// Namespace sets the namespace.
func (b *PodBuilder) Namespace(ns string) *PodBuilder { b.p.Namespace = ns; return b }

// OnNode binds the pod to node.
func (b *PodBuilder) OnNode(node string) *PodBuilder { b.p.Spec.NodeName = node; return b }

// OwnedBy sets a controller owner reference.
func (b *PodBuilder) OwnedBy(kind, name string) *PodBuilder {
	b.p.OwnerReferences = append(b.p.OwnerReferences, metav1.OwnerReference{
		APIVersion: "apps/v1", Kind: kind, Name: name, UID: types.UID("uid-" + name), Controller: ptr.To(true),
	})
	return b
}

// OwnedByDrain adds a non-controller owner reference to the NodeDrain
// name, as a surge replacement has until its ReplicaSet adopts it.
func (b *PodBuilder) OwnedByDrain(name string) *PodBuilder {
	b.p.OwnerReferences = append(b.p.OwnerReferences, metav1.OwnerReference{
		APIVersion: "vacate.dev/v1alpha1", Kind: "NodeDrain", Name: name, UID: types.UID("uid-" + name),
	})
	return b
}

// Created sets the creation time.
func (b *PodBuilder) Created(t time.Time) *PodBuilder {
	b.p.CreationTimestamp = metav1.NewTime(t)
	return b
}

// Labels adds label key/value pairs.
func (b *PodBuilder) Labels(kv ...string) *PodBuilder {
	if b.p.Labels == nil {
		b.p.Labels = map[string]string{}
	}
	for i := 0; i+1 < len(kv); i += 2 {
		b.p.Labels[kv[i]] = kv[i+1]
	}
	return b
}

// Annotate adds an annotation.
func (b *PodBuilder) Annotate(k, v string) *PodBuilder {
	if b.p.Annotations == nil {
		b.p.Annotations = map[string]string{}
	}
	b.p.Annotations[k] = v
	return b
}

// EmptyDir adds an emptyDir volume.
func (b *PodBuilder) EmptyDir(name string) *PodBuilder {
	b.p.Spec.Volumes = append(b.p.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	return b
}

// Phase sets the pod's phase.
func (b *PodBuilder) Phase(p corev1.PodPhase) *PodBuilder { b.p.Status.Phase = p; return b }

// Terminating marks the pod deleted at t.
func (b *PodBuilder) Terminating(t time.Time) *PodBuilder {
	b.p.DeletionTimestamp = &metav1.Time{Time: t}
	return b
}

// Obj returns the pod.
func (b *PodBuilder) Obj() *corev1.Pod { return b.p }

// PDB returns a PodDisruptionBudget over pods labelled app=app in ns, with
// its status saying how many disruptions it allows now.
func PDB(ns, name, app string, maxUnavailable, allowed int32) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: policyv1.PodDisruptionBudgetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
			MaxUnavailable: ptr.To(intstr.FromInt32(maxUnavailable)),
		},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed},
	}
}

// NodeDrain returns a NodeDrain for node (named after it) requested by the
// given requesters, with the DrainPolicy policyName ("" for the default).
func NodeDrain(node, policyName string, requesters ...string) *v1alpha1.NodeDrain {
	nd := &v1alpha1.NodeDrain{
		ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec:       v1alpha1.NodeDrainSpec{NodeName: node, PolicyName: policyName},
	}
	for _, r := range requesters {
		nd.Spec.Requesters = append(nd.Spec.Requesters, v1alpha1.Requester{Name: r})
	}
	return nd
}
