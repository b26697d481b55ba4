// Package policy chooses the DrainPolicy that governs a node (Select: by
// nodeSelector, else the default; ambiguity is an error, never resolved
// silently) and resolves it into plain settings, with defaults applied. The controller acts on them and
// `vacate plan` predicts with the same values.
package policy

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/schedule"
	"github.com/vacate-dev/vacate/internal/surge"
)

// DefaultEvictionsPerNode bounds the evictions in flight per node when the
// policy does not say.
const DefaultEvictionsPerNode = 10

// Policy is a DrainPolicy resolved for one drain, with defaults applied.
type Policy struct {
	// Name is the DrainPolicy's name, "" for built-in defaults (no policy).
	Name string
	// Why says how the policy was chosen, for people.
	Why string
	// Rules are the pod rules for the planner.
	Rules drain.Rules
	// Grace overrides the pods' grace period in evictions when set.
	Grace *int64
	// DrainTimeout bounds the drain; 0 means none.
	DrainTimeout time.Duration
	// ForceDelete deletes what is left at the timeout instead of failing.
	ForceDelete bool
	// EvacuationTimeout bounds each evacuation; 0 means none.
	EvacuationTimeout time.Duration
	// UnreachablePods: pods terminating this long on a node that is not
	// Ready no longer count as remaining.
	UnreachablePods time.Duration
	// NodeDeletion bounds how long the node finalizer holds a deleted node.
	NodeDeletion time.Duration
	// CancelTimeout bounds the wait for providers and hooks to confirm a cancel.
	CancelTimeout time.Duration
	// PerNode bounds the evictions in flight on the node.
	PerNode int
	// Triggers are the signals that request a drain of the node.
	Triggers Triggers
	// Admission bounds how many of the policy's drains run at once, and when.
	Admission Admission
	// HTTPHooks: whether annotated pods' HTTP evacuation hooks are called,
	// and in which namespaces (nil: all).
	HTTPHooks      bool
	HookNamespaces labels.Selector
	// AnnotationNamespaces are the namespaces whose pods may hold a drain
	// with their own annotations (pods.annotationNamespaceSelector); nil:
	// all.
	AnnotationNamespaces labels.Selector
	// EndpointsSettle and EndpointsTimeout are endpoints.settleTime and
	// endpoints.timeout: how endpoint-aware pods are taken out of service.
	EndpointsSettle, EndpointsTimeout time.Duration
	// Overridden says, for people, what the drain's requesters' overrides
	// changed (WithOverrides); empty without any.
	Overridden []string
	// Surge is surge.pods (None, Annotated or All) and SurgeReadyTimeout
	// surge.readyTimeout: which pods a drain moves with a replacement
	// first (internal/surge).
	Surge             surge.Mode
	SurgeReadyTimeout time.Duration
}

// Defaults of the timeouts the policy may leave unset.
const (
	DefaultUnreachablePods = 5 * time.Minute
	DefaultNodeDeletion    = time.Hour
	DefaultCancelTimeout   = 10 * time.Minute
	// DefaultEndpointsSettle is endpoints.settleTime's default.
	DefaultEndpointsSettle = 2 * time.Second
	// DefaultEndpointsTimeout is endpoints.timeout's default.
	DefaultEndpointsTimeout = time.Minute
)

// DefaultBatchWindow is how long a requested drain waits for others to be
// requested with it, when the policy does not say.
const DefaultBatchWindow = 2 * time.Second

// Admission is a policy's concurrency and schedule, resolved.
type Admission struct {
	// MaxParallelNodes is the policy's maxParallelNodes (nil: 1); a
	// percentage needs the number of governed nodes (schedule.MaxParallel).
	MaxParallelNodes *intstr.IntOrString
	// Topology limits the domains with running drains per node label.
	Topology []schedule.TopologyLimit
	// BatchWindow: drains requested within it are cordoned together before
	// any of them evicts.
	BatchWindow time.Duration
	// Windows are the maintenance windows; the zero value is any time.
	Windows schedule.Windows
	// ScheduleErr says why the schedule cannot be read; no drain of the
	// policy is admitted while it is set.
	ScheduleErr error
}

// Triggers are a policy's drain triggers, resolved.
type Triggers struct {
	// Taint: the taint vacate.dev/drain requests a drain.
	Taint bool
	// OnUnschedulable: a node cordoned by anyone but vacate is drained.
	OnUnschedulable bool
	// ExternalTaints are other taint keys that request a drain.
	ExternalTaints []string
	// OnNodeDelete: a deleted node is held (finalizer) until it is drained.
	OnNodeDelete bool
	// OnMaintenancePlanned: a node whose condition MaintenancePlanned is
	// True is drained.
	OnMaintenancePlanned bool
}

// DefaultExternalTaints are the taints of the cluster autoscaler and
// Karpenter on nodes they are about to remove.
var DefaultExternalTaints = []string{"ToBeDeletedByClusterAutoscaler", "karpenter.sh/disrupted"}

// Describe names the policy, and why it applies, for people.
func (p Policy) Describe() string {
	name := "DrainPolicy " + p.Name
	if p.Name == "" {
		name = "built-in defaults"
	}
	if p.Why == "" {
		return name
	}
	return name + " (" + p.Why + ")"
}

// Resolve reads the policy of a drain of node: policyName when set (it
// must exist), else the one DrainPolicy whose nodeSelector matches the
// node, else the policy named "default", else built-in defaults (the same
// as an empty policy). More than one match is an *AmbiguousError.
func Resolve(ctx context.Context, c client.Reader, policyName string, node *corev1.Node) (Policy, error) {
	if policyName != "" {
		dp := &v1alpha1.DrainPolicy{}
		err := c.Get(ctx, types.NamespacedName{Name: policyName}, dp)
		switch {
		case apierrors.IsNotFound(err):
			return Policy{}, &NotFoundError{Name: policyName}
		case err != nil:
			return Policy{}, fmt.Errorf("reading DrainPolicy %s: %w", policyName, err)
		}
		p, err := FromSpec(dp.Name, dp.Spec)
		p.Why = "named by the drain's spec.policyName"
		return p, err
	}
	list := &v1alpha1.DrainPolicyList{}
	if err := c.List(ctx, list); err != nil {
		return Policy{}, fmt.Errorf("listing DrainPolicies: %w", err)
	}
	var nodeLabels map[string]string
	if node != nil {
		nodeLabels = node.Labels
	}
	return Choose(nodeLabels, list.Items)
}

// Choose resolves the policy that governs a node with these labels among
// policies, as Resolve does without a policy name: Select, then FromSpec,
// built-in defaults when none applies. No API calls.
func Choose(nodeLabels map[string]string, policies []v1alpha1.DrainPolicy) (Policy, error) {
	dp, why, err := Select(nodeLabels, policies)
	if err != nil {
		return Policy{}, err
	}
	if dp == nil {
		p, err := FromSpec("", v1alpha1.DrainPolicySpec{})
		p.Why = why
		return p, err
	}
	p, err := FromSpec(dp.Name, dp.Spec)
	p.Why = why
	return p, err
}

// Select picks the DrainPolicy that governs a node with these labels: the
// one whose nodeSelector matches; the policy named "default" when none
// does; nil (built-in defaults) without a default either. why says which
// rule chose it. Two or more matches are an *AmbiguousError, and a policy
// whose selector cannot be read an *InvalidError: nothing is drained under
// a policy that may not be the one meant.
func Select(nodeLabels map[string]string, policies []v1alpha1.DrainPolicy) (chosen *v1alpha1.DrainPolicy, why string, err error) {
	var matched []string
	var fallback *v1alpha1.DrainPolicy
	for i := range policies {
		dp := &policies[i]
		if dp.Name == v1alpha1.DefaultPolicyName {
			fallback = dp
			continue
		}
		if dp.Spec.NodeSelector == nil {
			continue // only for drains that name it
		}
		sel, err := metav1.LabelSelectorAsSelector(dp.Spec.NodeSelector)
		if err != nil {
			return nil, "", &InvalidError{Name: dp.Name, Err: err}
		}
		if sel.Matches(labels.Set(nodeLabels)) {
			matched = append(matched, dp.Name)
			chosen = dp
		}
	}
	switch {
	case len(matched) > 1:
		sort.Strings(matched)
		return nil, "", &AmbiguousError{Names: matched}
	case chosen != nil:
		return chosen, "its nodeSelector matches the node", nil
	case fallback != nil:
		return fallback, "no other DrainPolicy selects the node", nil
	}
	return nil, "no DrainPolicy selects the node and there is no DrainPolicy " + v1alpha1.DefaultPolicyName, nil
}

// Governs reports whether the policy governs a node with these labels,
// given all the policies (the default governs what no other selects).
func Governs(dp *v1alpha1.DrainPolicy, nodeLabels map[string]string, policies []v1alpha1.DrainPolicy) bool {
	if dp.Name == v1alpha1.DefaultPolicyName {
		chosen, _, err := Select(nodeLabels, policies)
		return err == nil && chosen != nil && chosen.Name == dp.Name
	}
	if dp.Spec.NodeSelector == nil {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(dp.Spec.NodeSelector)
	return err == nil && sel.Matches(labels.Set(nodeLabels))
}

// AmbiguousError: more than one DrainPolicy selects the node.
type AmbiguousError struct{ Names []string }

func (e *AmbiguousError) Error() string {
	return fmt.Sprintf("DrainPolicies %s all select the node; nothing is drained until exactly one does (narrow their nodeSelectors, or name one in spec.policyName)",
		strings.Join(e.Names, ", "))
}

// InvalidError: a DrainPolicy's nodeSelector cannot be read.
type InvalidError struct {
	Name string
	Err  error
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("DrainPolicy %s has an invalid nodeSelector (%v); nothing is drained by selection until it is fixed", e.Name, e.Err)
}

func (e *InvalidError) Unwrap() error { return e.Err }

// IsAmbiguous reports whether err says the node's policy is not clear: more
// than one selects it, or a selector cannot be read.
func IsAmbiguous(err error) bool {
	var a *AmbiguousError
	var i *InvalidError
	return errors.As(err, &a) || errors.As(err, &i)
}

// FromSpec resolves a DrainPolicy's spec.
func FromSpec(name string, s v1alpha1.DrainPolicySpec) (Policy, error) {
	p := Policy{
		Name: name,
		Rules: drain.Rules{
			EvictDaemonSets:   s.Pods.DaemonSets == "Evict",
			DeleteUnmanaged:   s.Pods.Unmanaged == "Delete",
			EvictLocalStorage: s.Pods.LocalStorage == "Evict",
		},
		Grace:       s.Pods.GracePeriodOverride,
		ForceDelete: s.Timeouts.OnTimeout == "ForceDelete",
		PerNode:     int(s.Concurrency.MaxParallelEvictionsPerNode),
	}
	if p.PerNode <= 0 {
		p.PerNode = DefaultEvictionsPerNode
	}
	p.Triggers = Triggers{
		Taint:                s.Triggers.Taint == nil || *s.Triggers.Taint,
		OnUnschedulable:      s.Triggers.OnUnschedulable == "Drain",
		ExternalTaints:       s.Triggers.ExternalTaints,
		OnNodeDelete:         s.Triggers.OnNodeDelete == "Drain",
		OnMaintenancePlanned: s.Triggers.OnMaintenancePlanned == "Drain",
	}
	if len(p.Triggers.ExternalTaints) == 0 {
		p.Triggers.ExternalTaints = DefaultExternalTaints
	}
	if s.Timeouts.Drain != nil {
		p.DrainTimeout = s.Timeouts.Drain.Duration
	}
	if s.Timeouts.Evacuation != nil {
		p.EvacuationTimeout = s.Timeouts.Evacuation.Duration
	}
	p.UnreachablePods = durationOr(s.Timeouts.UnreachablePods, DefaultUnreachablePods)
	p.Rules.UnreachablePods = p.UnreachablePods
	p.NodeDeletion = durationOr(s.Timeouts.NodeDeletion, DefaultNodeDeletion)
	p.CancelTimeout = durationOr(s.Timeouts.Cancel, DefaultCancelTimeout)
	p.EndpointsSettle = durationOr(s.Endpoints.SettleTime, DefaultEndpointsSettle)
	p.EndpointsTimeout = durationOr(s.Endpoints.Timeout, DefaultEndpointsTimeout)
	p.Surge = surge.Mode(s.Surge.Pods)
	if p.Surge == "" {
		p.Surge = v1alpha1.SurgeNone
	}
	p.SurgeReadyTimeout = durationOr(s.Surge.ReadyTimeout, surge.DefaultReadyTimeout)
	p.Admission = Admission{MaxParallelNodes: s.Concurrency.MaxParallelNodes, BatchWindow: DefaultBatchWindow}
	if s.Concurrency.BatchWindow != nil {
		p.Admission.BatchWindow = s.Concurrency.BatchWindow.Duration
	}
	for _, l := range s.Concurrency.MaxUnavailablePerTopologyKey {
		p.Admission.Topology = append(p.Admission.Topology, schedule.TopologyLimit{Key: l.TopologyKey, MaxUnavailable: int(l.MaxUnavailable)})
	}
	p.Admission.Windows, p.Admission.ScheduleErr = schedule.ParseSchedule(s.Schedule)
	p.HTTPHooks = s.HTTPHooks.Enabled
	if s.HTTPHooks.NamespaceSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(s.HTTPHooks.NamespaceSelector)
		if err != nil {
			return Policy{}, fmt.Errorf("DrainPolicy %s: httpHooks.namespaceSelector: %w", name, err)
		}
		p.HookNamespaces = sel
	}
	if s.Pods.AnnotationNamespaceSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(s.Pods.AnnotationNamespaceSelector)
		if err != nil {
			return Policy{}, fmt.Errorf("DrainPolicy %s: pods.annotationNamespaceSelector: %w", name, err)
		}
		p.AnnotationNamespaces = sel
	}
	if s.Pods.SkipSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(s.Pods.SkipSelector)
		if err != nil {
			return Policy{}, fmt.Errorf("DrainPolicy %s: pods.skipSelector: %w", name, err)
		}
		p.Rules.SkipSelector = sel
	}
	return p, nil
}

// NotFoundError: a drain names a DrainPolicy that does not exist.
type NotFoundError struct{ Name string }

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("DrainPolicy %q named by spec.policyName does not exist", e.Name)
}

// IsNotFound reports whether err says the named policy does not exist.
func IsNotFound(err error) bool {
	var nf *NotFoundError
	return errors.As(err, &nf)
}

// durationOr is d's duration, or def when d is unset.
func durationOr(d *metav1.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.Duration
}
