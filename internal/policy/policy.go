// Package policy resolves the DrainPolicy that governs a drain into plain
// settings, with defaults applied. The controller acts on them and
// `vacate plan` predicts with the same values.
package policy

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/drain"
)

// DefaultEvictionsPerNode bounds the evictions in flight per node when the
// policy does not say.
const DefaultEvictionsPerNode = 10

// Policy is a DrainPolicy resolved for one drain, with defaults applied.
type Policy struct {
	// Name is the DrainPolicy's name, "" for built-in defaults (no policy).
	Name string
	// Rules are the pod rules for the planner.
	Rules drain.Rules
	// Grace overrides the pods' grace period in evictions when set.
	Grace *int64
	// DrainTimeout bounds the drain; 0 means none.
	DrainTimeout time.Duration
	// ForceDelete deletes what is left at the timeout instead of failing.
	ForceDelete bool
	// PerNode bounds the evictions in flight on the node.
	PerNode int
}

// Describe names the policy for people.
func (p Policy) Describe() string {
	if p.Name == "" {
		return "built-in defaults (no DrainPolicy " + v1alpha1.DefaultPolicyName + ")"
	}
	return "DrainPolicy " + p.Name
}

// Resolve reads the drain's policy: policyName, else the policy named
// "default", else built-in defaults (the same as an empty policy).
func Resolve(ctx context.Context, c client.Reader, policyName string) (Policy, error) {
	name := policyName
	explicit := name != ""
	if !explicit {
		name = v1alpha1.DefaultPolicyName
	}
	dp := &v1alpha1.DrainPolicy{}
	err := c.Get(ctx, types.NamespacedName{Name: name}, dp)
	switch {
	case apierrors.IsNotFound(err) && explicit:
		return Policy{}, &NotFoundError{Name: name}
	case apierrors.IsNotFound(err):
		return FromSpec("", v1alpha1.DrainPolicySpec{})
	case err != nil:
		return Policy{}, fmt.Errorf("reading DrainPolicy %s: %w", name, err)
	}
	return FromSpec(dp.Name, dp.Spec)
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
	if s.Timeouts.Drain != nil {
		p.DrainTimeout = s.Timeouts.Drain.Duration
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
