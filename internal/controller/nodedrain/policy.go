package nodedrain

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/drain"
)

// policy is a DrainPolicy resolved for one drain, with defaults applied.
type policy struct {
	name         string // "" when no DrainPolicy exists: built-in defaults
	rules        drain.Rules
	grace        *int64
	drainTimeout time.Duration // 0: none
	forceDelete  bool
	perNode      int
}

// resolvePolicy reads the drain's policy: spec.policyName, else the policy
// named "default", else built-in defaults (the same as an empty policy).
func resolvePolicy(ctx context.Context, c client.Reader, nd *v1alpha1.NodeDrain) (policy, error) {
	name := nd.Spec.PolicyName
	explicit := name != ""
	if !explicit {
		name = v1alpha1.DefaultPolicyName
	}
	dp := &v1alpha1.DrainPolicy{}
	err := c.Get(ctx, types.NamespacedName{Name: name}, dp)
	switch {
	case apierrors.IsNotFound(err) && explicit:
		return policy{}, &policyNotFoundError{name: name}
	case apierrors.IsNotFound(err):
		return fromSpec("", v1alpha1.DrainPolicySpec{})
	case err != nil:
		return policy{}, fmt.Errorf("reading DrainPolicy %s: %w", name, err)
	}
	return fromSpec(dp.Name, dp.Spec)
}

func fromSpec(name string, s v1alpha1.DrainPolicySpec) (policy, error) {
	p := policy{
		name: name,
		rules: drain.Rules{
			EvictDaemonSets:   s.Pods.DaemonSets == "Evict",
			DeleteUnmanaged:   s.Pods.Unmanaged == "Delete",
			EvictLocalStorage: s.Pods.LocalStorage == "Evict",
		},
		grace:       s.Pods.GracePeriodOverride,
		forceDelete: s.Timeouts.OnTimeout == "ForceDelete",
		perNode:     int(s.Concurrency.MaxParallelEvictionsPerNode),
	}
	if p.perNode <= 0 {
		p.perNode = 10
	}
	if s.Timeouts.Drain != nil {
		p.drainTimeout = s.Timeouts.Drain.Duration
	}
	if s.Pods.SkipSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(s.Pods.SkipSelector)
		if err != nil {
			return policy{}, fmt.Errorf("DrainPolicy %s: pods.skipSelector: %w", name, err)
		}
		p.rules.SkipSelector = sel
	}
	return p, nil
}

// policyNotFoundError: the drain names a DrainPolicy that does not exist.
type policyNotFoundError struct{ name string }

func (e *policyNotFoundError) Error() string {
	return fmt.Sprintf("DrainPolicy %q named by spec.policyName does not exist", e.name)
}
