package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/internal/leader"
)

// The controller's flags that name its leader Lease.
const (
	flagLeaseName      = "--leader-election-id"
	flagLeaseNamespace = "--leader-election-namespace"
)

// deploymentLease is the Lease the controller of deploy elects its leader
// on: the --leader-election-id and --leader-election-namespace of its
// containers' command and args (--flag=value or --flag value), each
// defaulting as vacate-controller's own flags do.
func deploymentLease(deploy *unstructured.Unstructured) types.NamespacedName {
	key := types.NamespacedName{Namespace: leader.DefaultLeaseNamespace, Name: leader.DefaultLeaseName}
	containers, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "containers")
	for _, c := range containers {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		command, _, _ := unstructured.NestedStringSlice(m, "command")
		args, _, _ := unstructured.NestedStringSlice(m, "args")
		all := append(command, args...)
		if v, ok := flagValue(all, flagLeaseName); ok {
			key.Name = v
		}
		if v, ok := flagValue(all, flagLeaseNamespace); ok {
			key.Namespace = v
		}
	}
	return key
}

// flagValue is the last value given to flag in args, as --flag=value or
// --flag value.
func flagValue(args []string, flag string) (value string, found bool) {
	for i, a := range args {
		switch {
		case strings.HasPrefix(a, flag+"="):
			value, found = strings.TrimPrefix(a, flag+"="), true
		case a == flag && i+1 < len(args):
			value, found = args[i+1], true
		}
	}
	return value, found
}

// controllerLeases are the Leases uninstall waits on, without duplicates:
// the installed Deployment's, then the one --lease-namespace and
// --lease-name name (by default where a vacate-controller run outside the
// cluster, such as 'vacate dev controller', holds it).
func controllerLeases(deploy *unstructured.Unstructured, flagged types.NamespacedName) []types.NamespacedName {
	out := []types.NamespacedName{deploymentLease(deploy)}
	if !slices.Contains(out, flagged) {
		out = append(out, flagged)
	}
	return out
}

// installedDeployment is the controller's Deployment as the cluster has it
// (an operator may have changed its flags), or as the install manifests
// render it when the cluster has none.
func (u *uninstaller) installedDeployment(ctx context.Context, manifest *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(manifest.GroupVersionKind())
	err := u.s.client.Get(ctx, client.ObjectKeyFromObject(manifest), live)
	switch {
	case apierrors.IsNotFound(err):
		return manifest, nil
	case err != nil:
		return nil, u.explain(err, fmt.Sprintf("reading Deployment %s/%s", manifest.GetNamespace(), manifest.GetName()))
	}
	return live, nil
}
