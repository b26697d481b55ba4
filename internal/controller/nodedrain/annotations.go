package nodedrain

import (
	"context"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/policy"
	"github.com/vacate-dev/vacate/internal/surge"
)

// EventAnnotationIgnored: a pod's own annotations that could hold the drain
// are ignored, because its namespace is not among those the policy allows.
const EventAnnotationIgnored = "AnnotationIgnored"

// namespaceLabels reads a namespace's labels from the cache, for the
// shared decisions (internal/policy, internal/providers).
func (r *Reconciler) namespaceLabels(ctx context.Context) policy.NamespaceLabels {
	return policy.NamespaceLabelsFrom(ctx, r.Client)
}

// honouredNamespaces are, among the namespaces of the pods that carry the
// surge annotation, those whose pods may use annotations under the drain's
// policy (policy.HonoursAnnotations), read once per pass for surge.Wanted.
// Other pods' surge does not depend on it.
func (r *Reconciler) honouredNamespaces(ctx context.Context, s *scope, pods []*corev1.Pod) (map[string]bool, error) {
	if s.policy.Surge == "" || s.policy.Surge == v1alpha1.SurgeNone {
		return nil, nil
	}
	honoured := map[string]bool{}
	for _, pod := range pods {
		if _, annotated := pod.Annotations[surge.Annotation]; !annotated {
			continue
		}
		if _, seen := honoured[pod.Namespace]; seen {
			continue
		}
		ok, err := s.policy.HonoursAnnotations(pod.Namespace, r.namespaceLabels(ctx))
		if err != nil {
			return nil, err
		}
		honoured[pod.Namespace] = ok
	}
	return honoured, nil
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
// policy.AsDrained) is replaced by a copy without its holding
// annotations, so it is drained as if it had none, and gets a Warning event
// saying why, once per run of the drain. The cache's objects are not
// changed.
func (r *Reconciler) ignoreUnallowedAnnotations(ctx context.Context, s *scope, pods []*corev1.Pod) ([]*corev1.Pod, error) {
	out, ignored, err := s.policy.PodsAsDrained(pods, r.namespaceLabels(ctx))
	if err != nil {
		return nil, err
	}
	warned := map[types.UID]bool{}
	for _, pod := range pods {
		ign := ignored[pod.UID]
		if len(ign) == 0 {
			continue
		}
		warned[pod.UID] = true
		if r.annotationWarnings.first(s.drain.Spec.NodeName, runOf(s), pod.UID) {
			r.Events.Eventf(pod, s.drain, corev1.EventTypeWarning, EventAnnotationIgnored, "Drain",
				"annotation(s) %s ignored: namespace %s is not selected by the pods.annotationNamespaceSelector of %s; the pod is drained as if it had none",
				strings.Join(ign, ", "), pod.Namespace, s.policy.Describe())
		}
	}
	r.annotationWarnings.keep(s.drain.Spec.NodeName, runOf(s), warned)
	return out, nil
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
