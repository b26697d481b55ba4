package policy

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/hook"
)

// The decisions in this file are the NodeDrain controller's (which acts on
// them) and `vacate plan`'s (which predicts with them): what a pod's own
// annotations may do under a policy, and whether a drain calls its HTTP
// evacuation hook. They read nothing themselves: the caller passes how to
// read a namespace's labels (NamespaceLabelsFrom, for a controller).

// NamespaceLabels returns a namespace's labels; a namespace that does not
// exist has none (nil, and no error).
type NamespaceLabels func(namespace string) (labels.Set, error)

// NamespaceLabelsFrom reads namespaces' labels with c (a controller's
// cache), for the shared decisions (here, internal/providers).
func NamespaceLabelsFrom(ctx context.Context, c client.Reader) NamespaceLabels {
	return func(name string) (labels.Set, error) {
		ns := &corev1.Namespace{}
		err := c.Get(ctx, types.NamespacedName{Name: name}, ns)
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading namespace %s: %w", name, err)
		}
		return ns.Labels, nil
	}
}

// HoldingAnnotations are the pod annotations with which a pod can hold a
// drain: opt out of it or make it wait (vacate.dev/drain), or make it wait
// for the pod's own HTTP evacuation hook (the port; the path only goes with
// it).
var HoldingAnnotations = []string{drain.PodAnnotation, hook.AnnotationPort, hook.AnnotationPath}

// PresentHolding names the holding annotations the pod carries, as
// key=value.
func PresentHolding(pod *corev1.Pod) []string {
	var present []string
	for _, a := range HoldingAnnotations {
		if v, ok := pod.Annotations[a]; ok {
			present = append(present, a+"="+v)
		}
	}
	return present
}

// HonoursAnnotations reports whether the policy lets pods of the namespace
// hold a drain with their own annotations: its
// pods.annotationNamespaceSelector (unset or empty: every namespace)
// selects the namespace's labels. The labels are read only when the
// selector needs them.
func (p Policy) HonoursAnnotations(namespace string, labelsOf NamespaceLabels) (bool, error) {
	if p.AnnotationNamespaces == nil || p.AnnotationNamespaces.Empty() {
		return true, nil
	}
	l, err := labelsOf(namespace)
	if err != nil {
		return false, err
	}
	return p.AnnotationNamespaces.Matches(l), nil
}

// AsDrained is the pod as a drain under the policy treats it: the pod
// itself, or, when it carries holding annotations its namespace may not use
// (HonoursAnnotations), a copy without them, drained as if it had none;
// ignored names those annotations (PresentHolding). The pod is not changed.
func (p Policy) AsDrained(pod *corev1.Pod, labelsOf NamespaceLabels) (drained *corev1.Pod, ignored []string, err error) {
	present := PresentHolding(pod)
	if len(present) == 0 {
		return pod, nil, nil
	}
	ok, err := p.HonoursAnnotations(pod.Namespace, labelsOf)
	if err != nil || ok {
		return pod, nil, err
	}
	stripped := pod.DeepCopy()
	for _, a := range HoldingAnnotations {
		delete(stripped.Annotations, a)
	}
	return stripped, present, nil
}

// PodsAsDrained are a node's pods as a drain under the policy sees them
// (AsDrained of each, in order), and, per pod, the holding annotations it
// ignores. The NodeDrain controller plans with them and `vacate plan`
// previews with them: one function, so the preview cannot disagree with
// the drain.
func (p Policy) PodsAsDrained(pods []*corev1.Pod, labelsOf NamespaceLabels) ([]*corev1.Pod, map[types.UID][]string, error) {
	out := make([]*corev1.Pod, 0, len(pods))
	ignored := map[types.UID][]string{}
	for _, pod := range pods {
		drained, ign, err := p.AsDrained(pod, labelsOf)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, drained)
		if len(ign) > 0 {
			ignored[pod.UID] = ign
		}
	}
	return out, ignored, nil
}

// CallsHook reports whether a drain under the policy calls the pod's HTTP
// evacuation hook (the pod has the annotation vacate.dev/evacuate-port),
// and, when it does not, why: the policy's httpHooks are off, the pod's
// namespace may not hold drains with annotations (HonoursAnnotations), or
// httpHooks.namespaceSelector (unset: every namespace) does not select it.
// Whether the address is one vacate calls is hook.TargetFor's to say.
func (p Policy) CallsHook(pod *corev1.Pod, labelsOf NamespaceLabels) (calls bool, whyNot string, err error) {
	switch {
	case !hook.Wants(pod):
		return false, "the pod has no annotation " + hook.AnnotationPort, nil
	case !p.HTTPHooks:
		return false, "httpHooks.enabled is false in " + p.named(), nil
	}
	ok, err := p.HonoursAnnotations(pod.Namespace, labelsOf)
	if err != nil {
		return false, "", err
	}
	if !ok {
		return false, fmt.Sprintf("its annotations are ignored: namespace %s is not selected by the pods.annotationNamespaceSelector of %s",
			pod.Namespace, p.named()), nil
	}
	if p.HookNamespaces == nil {
		return true, "", nil
	}
	l, err := labelsOf(pod.Namespace)
	if err != nil {
		return false, "", err
	}
	if !p.HookNamespaces.Matches(l) {
		return false, fmt.Sprintf("namespace %s is not selected by the httpHooks.namespaceSelector of %s", pod.Namespace, p.named()), nil
	}
	return true, "", nil
}

// named names the policy without why it applies.
func (p Policy) named() string {
	if p.Name == "" {
		return "the built-in defaults"
	}
	return "DrainPolicy " + p.Name
}
