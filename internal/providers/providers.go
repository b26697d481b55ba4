// Package providers decides what a drain asks of EvacuationProviders: which
// providers take part in a drain of a mode, which of the pods leaving the
// node each protects, which get an Evacuation, and how an Evacuation's
// answer reads. It reads nothing from the API itself (the caller passes how
// to read a namespace's labels): the NodeDrain controller acts on these
// decisions and `vacate plan` predicts with them.
package providers

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/policy"
)

// Stage is a provider's stage, BeforeEviction when unset.
func Stage(p *v1alpha1.EvacuationProvider) v1alpha1.EvacuationStage {
	if p.Spec.Stage == "" {
		return v1alpha1.StageBeforeEviction
	}
	return p.Spec.Stage
}

// StageOf is an Evacuation's recorded stage, BeforeEviction when unset.
func StageOf(ev *v1alpha1.Evacuation) v1alpha1.EvacuationStage {
	if ev.Spec.Stage == "" {
		return v1alpha1.StageBeforeEviction
	}
	return ev.Spec.Stage
}

// TakesPart reports whether a provider takes part in drains of this mode
// (spec.modes; unset: every mode).
func TakesPart(p *v1alpha1.EvacuationProvider, mode v1alpha1.DrainMode) bool {
	return len(p.Spec.Modes) == 0 || slices.Contains(p.Spec.Modes, mode)
}

// Eligible reports whether a drain of this mode may ask the provider
// anything new: it takes part in the mode and is not being deleted (a
// provider being deleted keeps what it was asked, and is asked nothing
// more).
func Eligible(p *v1alpha1.EvacuationProvider, mode v1alpha1.DrainMode) bool {
	return TakesPart(p, mode) && p.DeletionTimestamp.IsZero()
}

// Asks reports whether a drain of this mode asks the provider for an
// Evacuation, given how many of the pods leaving the node it protects and
// whether the drain already asked it: an eligible provider is asked when it
// protects a leaving pod, or in Decommission always (a DaemonSet storage
// agent, or data whose consumers run elsewhere, must move too; a provider
// with nothing there answers Completed at once), and a drain that asked it
// goes on asking.
func Asks(p *v1alpha1.EvacuationProvider, mode v1alpha1.DrainMode, protects int, alreadyAsked bool) bool {
	return Eligible(p, mode) && (protects > 0 || mode == v1alpha1.ModeDecommission || alreadyAsked)
}

// Selects reports whether the provider's selectors pick the pod: its
// podSelector matches the pod's labels and its namespaceSelector (unset:
// every namespace) the labels of the pod's namespace, read only then.
func Selects(p *v1alpha1.EvacuationProvider, pod *corev1.Pod, labelsOf policy.NamespaceLabels) (bool, error) {
	sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
	if err != nil {
		return false, fmt.Errorf("EvacuationProvider %s: podSelector: %w", p.Name, err)
	}
	if !sel.Matches(labels.Set(pod.Labels)) {
		return false, nil
	}
	if p.Spec.NamespaceSelector == nil {
		return true, nil
	}
	nsSel, err := metav1.LabelSelectorAsSelector(p.Spec.NamespaceSelector)
	if err != nil {
		return false, fmt.Errorf("EvacuationProvider %s: namespaceSelector: %w", p.Name, err)
	}
	l, err := labelsOf(pod.Namespace)
	if err != nil {
		return false, err
	}
	return nsSel.Matches(l), nil
}

// Protected are the pods, of those given (the pods leaving the node), that
// the provider protects (Selects).
func Protected(p *v1alpha1.EvacuationProvider, pods []*corev1.Pod, labelsOf policy.NamespaceLabels) ([]*corev1.Pod, error) {
	var out []*corev1.Pod
	for _, pod := range pods {
		ok, err := Selects(p, pod, labelsOf)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, pod)
		}
	}
	return out, nil
}

// AskedFor reports whether an Evacuation was asked by the drain with this
// UID for the node with this UID.
func AskedFor(ev *v1alpha1.Evacuation, drainUID, nodeUID types.UID) bool {
	return ev.Spec.DrainUID == string(drainUID) && ev.Spec.NodeUID == string(nodeUID)
}

// Request is the spec of the Evacuation a drain asks of a provider,
// recording the leaving pods it protects: an earlier drain's Evacuation
// (have) is taken over, its spec replaced; this drain's gets the drain's
// mode and Evacuate, and any newly protected pods added (never removed), and
// its stage only moves toward BeforeEviction (holding more, never less). Its
// reporter follows the provider's: only that identity may write its status.
func Request(nd *v1alpha1.NodeDrain, node *corev1.Node, p *v1alpha1.EvacuationProvider, protected []*corev1.Pod, have *v1alpha1.Evacuation) v1alpha1.EvacuationSpec {
	want := v1alpha1.EvacuationSpec{NodeName: nd.Spec.NodeName, NodeUID: string(node.UID), Provider: p.Name, Mode: nd.Mode(),
		Desired: v1alpha1.DesiredEvacuate, DrainUID: string(nd.UID), Stage: Stage(p), Reporter: p.Spec.Reporter.UserName()}
	if have != nil && AskedFor(have, nd.UID, node.UID) {
		want.ProtectedPods = slices.Clone(have.Spec.ProtectedPods)
		want.Release = have.Spec.Release
		if StageOf(have) == v1alpha1.StageBeforeEviction {
			want.Stage = v1alpha1.StageBeforeEviction
		}
	}
	for _, pod := range protected {
		if !slices.ContainsFunc(want.ProtectedPods, func(pp v1alpha1.ProtectedPod) bool { return pp.UID == string(pod.UID) }) {
			want.ProtectedPods = append(want.ProtectedPods, v1alpha1.ProtectedPod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)})
		}
	}
	return want
}

// Timeout is how long the provider may stay silent on an unfinished
// evacuation before the drain reports it stale (spec.timeout; default
// v1alpha1.DefaultProviderTimeout, also for a provider that is gone).
func Timeout(p *v1alpha1.EvacuationProvider) time.Duration {
	if p != nil && p.Spec.Timeout != nil {
		return p.Spec.Timeout.Duration
	}
	return v1alpha1.DefaultProviderTimeout
}

// ProtectedOnNode are the pods an Evacuation recorded (spec.protectedPods)
// that are still on the node: the same pod, by UID.
func ProtectedOnNode(ev *v1alpha1.Evacuation, onNode map[types.UID]*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, pp := range ev.Spec.ProtectedPods {
		if pod, ok := onNode[types.UID(pp.UID)]; ok {
			out = append(out, pod)
		}
	}
	return out
}
