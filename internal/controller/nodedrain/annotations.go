package nodedrain

import (
	"context"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/hook"
	"github.com/vacate-dev/vacate/internal/policy"
)

// EventAnnotationIgnored: a pod's own annotations that could hold the drain
// are ignored, because its namespace is not among those the policy allows.
const EventAnnotationIgnored = "AnnotationIgnored"

// holdingAnnotations are the pod annotations with which a pod can hold a
// drain: opt out of it or make it wait (vacate.dev/drain), or make it wait
// for the pod's own HTTP evacuation hook (the port; the path only goes
// with it).
var holdingAnnotations = []string{drain.PodAnnotation, hook.AnnotationPort, hook.AnnotationPath}

// annotationsHonoured reports whether the policy lets pods of the namespace
// hold a drain with their own annotations: its
// pods.annotationNamespaceSelector (unset or empty: every namespace)
// selects the namespace's labels, read from the cache. A namespace that is
// gone has no labels.
func (r *Reconciler) annotationsHonoured(ctx context.Context, p policy.Policy, namespace string) (bool, error) {
	if p.AnnotationNamespaces == nil || p.AnnotationNamespaces.Empty() {
		return true, nil
	}
	ns := &corev1.Namespace{}
	err := r.Client.Get(ctx, types.NamespacedName{Name: namespace}, ns)
	if err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("reading namespace %s: %w", namespace, err)
	}
	return p.AnnotationNamespaces.Matches(labels.Set(ns.Labels)), nil
}

// podsAsDrained are the node's pods as the drain's planner sees them (see
// ignoreUnallowedAnnotations).
func (r *Reconciler) podsAsDrained(ctx context.Context, s *scope) ([]*corev1.Pod, error) {
	pods, err := r.podsOnNode(ctx, s.drain.Spec.NodeName)
	if err != nil {
		return nil, err
	}
	return r.ignoreUnallowedAnnotations(ctx, s, pods)
}

// ignoreUnallowedAnnotations returns the node's pods as the drain treats
// them: a pod whose namespace the policy does not allow to hold drains (see
// annotationsHonoured) is replaced by a copy without its holding
// annotations, so it is drained as if it had none, and gets a Warning event
// saying why, once per run of the drain. The cache's objects are not
// changed.
func (r *Reconciler) ignoreUnallowedAnnotations(ctx context.Context, s *scope, pods []*corev1.Pod) ([]*corev1.Pod, error) {
	out := make([]*corev1.Pod, 0, len(pods))
	warned := map[types.UID]bool{}
	for _, pod := range pods {
		present := presentHolding(pod)
		if len(present) == 0 {
			out = append(out, pod)
			continue
		}
		ok, err := r.annotationsHonoured(ctx, s.policy, pod.Namespace)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, pod)
			continue
		}
		stripped := pod.DeepCopy()
		for _, a := range holdingAnnotations {
			delete(stripped.Annotations, a)
		}
		out = append(out, stripped)
		warned[pod.UID] = true
		if r.annotationWarnings.first(s.drain.Spec.NodeName, runOf(s), pod.UID) {
			r.Events.Eventf(pod, s.drain, corev1.EventTypeWarning, EventAnnotationIgnored, "Drain",
				"annotation(s) %s ignored: namespace %s is not selected by the pods.annotationNamespaceSelector of %s; the pod is drained as if it had none",
				strings.Join(present, ", "), pod.Namespace, s.policy.Describe())
		}
	}
	r.annotationWarnings.keep(s.drain.Spec.NodeName, runOf(s), warned)
	return out, nil
}

// presentHolding names the holding annotations the pod carries, as
// key=value.
func presentHolding(pod *corev1.Pod) []string {
	var present []string
	for _, a := range holdingAnnotations {
		if v, ok := pod.Annotations[a]; ok {
			present = append(present, a+"="+v)
		}
	}
	return present
}

// runOf identifies the drain's current run: its UID and admission time
// (a drain requested again after an undo, or whose mode went up, is a new
// run).
func runOf(s *scope) string {
	run := string(s.drain.UID)
	if st := s.drain.Status.StartTime; st != nil {
		run += "/" + st.UTC().String()
	}
	return run
}

// warnedPods remembers, per node, the pods already warned that their
// annotations are ignored in the node's current drain run, so each gets one
// event per run, not one per pass. It is a cache: after a restart a pod is
// warned once more. Each pass keeps only the pods still ignored, so it
// holds at most the ignored pods of the nodes being drained. The zero
// value is ready to use.
type warnedPods struct {
	mu     sync.Mutex
	byNode map[string]warnedRun
}

type warnedRun struct {
	run  string
	pods map[types.UID]bool
}

// first reports whether the pod is not yet warned in this run of the
// node's drain, and records it.
func (w *warnedPods) first(node, run string, pod types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byNode == nil {
		w.byNode = map[string]warnedRun{}
	}
	wr, ok := w.byNode[node]
	if !ok || wr.run != run {
		wr = warnedRun{run: run, pods: map[types.UID]bool{}}
		w.byNode[node] = wr
	}
	if wr.pods[pod] {
		return false
	}
	wr.pods[pod] = true
	return true
}

// keep forgets the node's pods that are no longer ignored (gone, or their
// annotations or namespace changed), and the node when none is.
func (w *warnedPods) keep(node, run string, pods map[types.UID]bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wr, ok := w.byNode[node]
	if !ok {
		return
	}
	if wr.run != run || len(pods) == 0 {
		delete(w.byNode, node)
		return
	}
	for uid := range wr.pods {
		if !pods[uid] {
			delete(wr.pods, uid)
		}
	}
}
