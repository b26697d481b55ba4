package cli

import (
	"context"
	"errors"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	er "github.com/vacate-dev/vacate/internal/evictionrequest"
)

// read gathers what the planner needs, reading only: vacate's objects (when
// the cluster serves its API), the nodes, the pods on the drains' nodes, the
// install manifests' objects, the controller's pods and Leases, and the
// ClusterRoleBindings.
func (u *uninstaller) read(ctx context.Context) (clusterView, error) {
	v := clusterView{served: u.served, podNodes: map[string]string{}, objects: map[string]objectState{}}
	if err := u.readVacate(ctx, &v); err != nil {
		return v, err
	}
	nodes, err := u.s.clientset.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return v, u.explain(err, "listing nodes")
	}
	v.nodes = nodes.Items
	if v.hooked, err = u.hookedEvictions(ctx); err != nil {
		return v, err
	}
	if err := u.readPods(ctx, &v); err != nil {
		return v, err
	}
	for _, objs := range [][]*unstructured.Unstructured{u.crds, u.controller, u.rest} {
		for _, o := range objs {
			if v.objects[objectName(o)], err = u.objectState(ctx, o); err != nil {
				return v, err
			}
		}
	}
	if err := u.readController(ctx, &v); err != nil {
		return v, err
	}
	bindings, err := u.s.clientset.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		return v, u.explain(err, "listing ClusterRoleBindings")
	}
	v.bindings = bindings.Items
	return v, nil
}

// hookedEvictions are the Evictions (Kubernetes' EvictionRequest API) that
// carry vacate's finalizer vacate.dev/hook, as namespace/name; none where
// the API is not served.
func (u *uninstaller) hookedEvictions(ctx context.Context) ([]types.NamespacedName, error) {
	list, err := u.s.clientset.LifecycleV1alpha1().Evictions(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil // the API is not served
	}
	if err != nil {
		return nil, u.explain(err, "listing Evictions")
	}
	var out []types.NamespacedName
	for _, ev := range list.Items {
		if slices.Contains(ev.Finalizers, er.FinalizerHook) {
			out = append(out, types.NamespacedName{Namespace: ev.Namespace, Name: ev.Name})
		}
	}
	return out, nil
}

// readVacate lists the drains, policies, evacuations and providers.
func (u *uninstaller) readVacate(ctx context.Context, v *clusterView) error {
	if !u.served {
		return nil
	}
	drains, policies := &v1alpha1.NodeDrainList{}, &v1alpha1.DrainPolicyList{}
	evacuations, providers := &v1alpha1.EvacuationList{}, &v1alpha1.EvacuationProviderList{}
	for _, l := range []struct {
		list client.ObjectList
		kind string
	}{{drains, "NodeDrains"}, {policies, "DrainPolicies"}, {evacuations, "Evacuations"}, {providers, "EvacuationProviders"}} {
		if err := u.s.client.List(ctx, l.list); err != nil {
			return u.explain(err, "listing "+l.kind)
		}
	}
	v.drains, v.policies, v.evacuations, v.providers = drains.Items, policies.Items, evacuations.Items, providers.Items
	return nil
}

// readPods maps the pods on the drains' nodes: "namespace/name" to the
// node, "uid:<uid>" to "namespace/name" (for the HTTP hooks' notes).
func (u *uninstaller) readPods(ctx context.Context, v *clusterView) error {
	seen := map[string]bool{}
	for _, nd := range v.drains {
		node := nd.Spec.NodeName
		if seen[node] || (len(nd.Status.Hooks) == 0 && len(nd.Status.HookCalls) == 0) {
			continue
		}
		seen[node] = true
		pods, err := u.s.clientset.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
		if err != nil {
			return u.explain(err, "listing the pods of node "+node)
		}
		for _, p := range pods.Items {
			ref := p.Namespace + "/" + p.Name
			v.podNodes[ref], v.podNodes["uid:"+string(p.UID)] = node, ref
		}
	}
	return nil
}

// objectState reads whether an object of the manifests is there; a kind the
// cluster does not serve counts as absent.
func (u *uninstaller) objectState(ctx context.Context, want *unstructured.Unstructured) (objectState, error) {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(want.GroupVersionKind())
	err := u.s.client.Get(ctx, client.ObjectKeyFromObject(want), obj)
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return objectAbsent, nil
	case err != nil:
		return objectAbsent, u.explain(err, "reading "+objectName(want))
	case obj.GetDeletionTimestamp() != nil:
		return objectDeleting, nil
	}
	return objectPresent, nil
}

// readController counts the controller's pods and reads who holds its
// Leases.
func (u *uninstaller) readController(ctx context.Context, v *clusterView) error {
	deploy := u.deployment()
	if deploy == nil {
		return errors.New("the install manifests hold no Deployment") // a broken build
	}
	selector, err := podSelector(deploy)
	if err != nil {
		return err
	}
	pods, err := u.s.clientset.CoreV1().Pods(deploy.GetNamespace()).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return u.explain(err, "listing the controller's pods")
	}
	v.controllerPods = len(pods.Items)
	live, err := u.installedDeployment(ctx, deploy)
	if err != nil {
		return err
	}
	for _, key := range controllerLeases(live, u.lease) {
		holder, err := u.leaseHolder(ctx, key)
		if err != nil {
			return err
		}
		v.leases = append(v.leases, leaseView{key: key, holder: holder})
	}
	return nil
}
