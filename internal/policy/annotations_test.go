package policy

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// nsLabels reads labels from a map and counts the reads; a namespace not in
// the map is gone (no labels).
type nsLabels struct {
	labels map[string]labels.Set
	reads  int
	err    error
}

func (n *nsLabels) get(name string) (labels.Set, error) {
	n.reads++
	return n.labels[name], n.err
}

func annotated(ns string, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p", Annotations: annotations}}
}

// TestCallsHook: the decision the controller calls hooks by and vacate plan
// predicts with, with its reason when it does not call.
func TestCallsHook(t *testing.T) {
	spec := v1alpha1.DrainPolicySpec{}
	spec.HTTPHooks.Enabled = true
	spec.HTTPHooks.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"hooks": "yes"}}
	spec.Pods.AnnotationNamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"annotations": "yes"}}
	p, err := FromSpec("strict", spec)
	if err != nil {
		t.Fatal(err)
	}
	off, err := FromSpec("off", v1alpha1.DrainPolicySpec{})
	if err != nil {
		t.Fatal(err)
	}
	open := p
	open.HookNamespaces, open.AnnotationNamespaces = nil, nil
	ns := &nsLabels{labels: map[string]labels.Set{
		"both":  {"hooks": "yes", "annotations": "yes"},
		"hooks": {"hooks": "yes"},
		"anno":  {"annotations": "yes"},
	}}
	port := map[string]string{"vacate.dev/evacuate-port": "8080"}
	for _, tc := range []struct {
		name   string
		p      Policy
		pod    *corev1.Pod
		calls  bool
		whyNot string
	}{
		{"selected by both", p, annotated("both", port), true, ""},
		{"no port annotation", p, annotated("both", map[string]string{"vacate.dev/evacuate-path": "/x"}), false, "no annotation vacate.dev/evacuate-port"},
		{"hooks off", off, annotated("both", port), false, "httpHooks.enabled is false in DrainPolicy off"},
		{"annotations not honoured", p, annotated("hooks", port), false, "namespace hooks is not selected by the pods.annotationNamespaceSelector of DrainPolicy strict"},
		{"hooks not selected", p, annotated("anno", port), false, "namespace anno is not selected by the httpHooks.namespaceSelector of DrainPolicy strict"},
		{"namespace gone: no labels", p, annotated("gone", port), false, "pods.annotationNamespaceSelector"},
		{"no selectors: every namespace", open, annotated("gone", port), true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls, whyNot, err := tc.p.CallsHook(tc.pod, ns.get)
			if err != nil || calls != tc.calls || !strings.Contains(whyNot, tc.whyNot) || (tc.calls && whyNot != "") {
				t.Errorf("CallsHook = %t, %q, %v; want %t, %q", calls, whyNot, err, tc.calls, tc.whyNot)
			}
		})
	}
	ns.reads = 0
	if _, _, err := open.CallsHook(annotated("both", port), ns.get); err != nil || ns.reads != 0 {
		t.Errorf("without selectors CallsHook read %d namespace(s) (err %v), want none", ns.reads, err)
	}
	failing := &nsLabels{err: errors.New("cache down")}
	if _, _, err := p.CallsHook(annotated("both", port), failing.get); err == nil {
		t.Error("a namespace that cannot be read is not an error")
	}
}

// TestAsDrained: holding annotations are dropped from a copy where the
// policy does not honour them; the pod itself is never changed.
func TestAsDrained(t *testing.T) {
	spec := v1alpha1.DrainPolicySpec{}
	spec.Pods.AnnotationNamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"annotations": "yes"}}
	p, err := FromSpec("strict", spec)
	if err != nil {
		t.Fatal(err)
	}
	ns := &nsLabels{labels: map[string]labels.Set{"anno": {"annotations": "yes"}}}
	all := map[string]string{"vacate.dev/drain": "skip", "vacate.dev/evacuate-port": "80", "vacate.dev/evacuate-path": "/e", "other": "kept"}

	pod := annotated("plain", all)
	drained, ignored, err := p.AsDrained(pod, ns.get)
	if err != nil {
		t.Fatal(err)
	}
	if len(drained.Annotations) != 1 || drained.Annotations["other"] != "kept" {
		t.Errorf("as drained, annotations %v; want only other=kept", drained.Annotations)
	}
	if strings.Join(ignored, " ") != "vacate.dev/drain=skip vacate.dev/evacuate-port=80 vacate.dev/evacuate-path=/e" {
		t.Errorf("ignored = %v", ignored)
	}
	if len(pod.Annotations) != 4 {
		t.Errorf("AsDrained changed the pod: %v", pod.Annotations)
	}

	honoured := annotated("anno", all)
	if drained, ignored, err := p.AsDrained(honoured, ns.get); err != nil || drained != honoured || ignored != nil {
		t.Errorf("in a selected namespace: %p (pod %p), ignored %v, %v; want the pod itself", drained, honoured, ignored, err)
	}
	ns.reads = 0
	bare := annotated("plain", map[string]string{"other": "x"})
	if drained, _, err := p.AsDrained(bare, ns.get); err != nil || drained != bare || ns.reads != 0 {
		t.Errorf("a pod without holding annotations: %v, %d namespace read(s); want the pod, no read", err, ns.reads)
	}
	everywhere, err := FromSpec("", v1alpha1.DrainPolicySpec{})
	if err != nil {
		t.Fatal(err)
	}
	if drained, _, err := everywhere.AsDrained(pod, ns.get); err != nil || drained != pod {
		t.Errorf("without pods.annotationNamespaceSelector the annotations are not honoured: %v", err)
	}
}
