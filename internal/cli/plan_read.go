package cli

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/leader"
	"github.com/vacate-dev/vacate/internal/policy"
	"github.com/vacate-dev/vacate/internal/surge"
)

// This file is plan's read step: it gathers, reading only, every object the
// decisions about a node's drain look at (plan_decide.go), so that they make
// no API call. A read the decisions may not need (a namespace's labels, a
// pod's ReplicaSet) is made anyway, and its error kept with it: the
// decisions return it only if they ask, as they did when they read lazily.

// planInput is what plan reads once for all the nodes.
type planInput struct {
	pdbs []*policyv1.PodDisruptionBudget
	// providers, by name.
	providers   []*v1alpha1.EvacuationProvider
	evacuations []v1alpha1.Evacuation
	// namespaces are the namespaces of the pods read so far, by name.
	namespaces map[string]namespaceRead
	// requests: the leading controller's drains ask for pods that declare
	// eviction responders with EvictionRequests (its Lease says so).
	requests bool
}

// namespaceRead is a namespace as read: its labels (nil when it is gone),
// or why it could not be read.
type namespaceRead struct {
	labels labels.Set
	err    error
}

// nodeRead is what plan read of one node: everything its decisions need
// besides planInput.
type nodeRead struct {
	node *corev1.Node
	// existing is the node's NodeDrain; nil when there is none.
	existing *v1alpha1.NodeDrain
	// policy is the DrainPolicy the drain runs under, before its
	// requesters' overrides.
	policy policy.Policy
	// pods are the pods on the node, as read.
	pods []*corev1.Pod
	// workloads are the ReplicaSets of the node's pods, with their
	// Deployments, by namespace/name: read only when the policy surges.
	workloads map[string]workloadRead
}

// workloadRead is a pod's ReplicaSet and Deployment as read for its surge,
// or why they could not be read.
type workloadRead struct {
	workload surge.Workload
	err      error
}

// readShared reads what every node's plan looks at: the PDBs, the
// EvacuationProviders and the Evacuations.
func readShared(ctx context.Context, s *session) (*planInput, error) {
	pdbList, err := s.clientset.PolicyV1().PodDisruptionBudgets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, s.explain(err, "listing PodDisruptionBudgets")
	}
	pdbs := make([]*policyv1.PodDisruptionBudget, 0, len(pdbList.Items))
	for i := range pdbList.Items {
		pdbs = append(pdbs, &pdbList.Items[i])
	}
	in := &planInput{pdbs: pdbs, namespaces: map[string]namespaceRead{}}
	provList := &v1alpha1.EvacuationProviderList{}
	if err := s.client.List(ctx, provList); err != nil {
		return nil, s.explain(err, "listing EvacuationProviders")
	}
	for i := range provList.Items {
		in.providers = append(in.providers, &provList.Items[i])
	}
	sort.Slice(in.providers, func(i, j int) bool { return in.providers[i].Name < in.providers[j].Name })
	evList := &v1alpha1.EvacuationList{}
	if err := s.client.List(ctx, evList); err != nil {
		return nil, s.explain(err, "listing Evacuations")
	}
	in.evacuations = evList.Items
	in.requests = leaderRequests(ctx, s)
	return in, nil
}

// leaderRequests says whether the leading controller's drains request
// through Kubernetes' EvictionRequest API, as its Lease says; no when the
// Lease cannot be read.
func leaderRequests(ctx context.Context, s *session) bool {
	cs, err := s.controllers(ctx, time.Now())
	if err != nil {
		return false
	}
	for _, c := range cs {
		if c.Held {
			return c.EvictionRequests == leader.EvictionRequestsCoordinating || c.EvictionRequests == leader.EvictionRequestsRequesting
		}
	}
	return false
}

// readNode reads what a drain of the node would meet: the node, its
// NodeDrain, the DrainPolicy (policyName, else the drain's, else the one
// that selects the node), its pods, their namespaces (into in) and, when
// the policy surges, their workloads.
func readNode(ctx context.Context, s *session, name, policyName string, in *planInput) (nodeRead, error) {
	node, err := s.node(ctx, name)
	if err != nil {
		return nodeRead{}, err
	}
	r := nodeRead{node: node}
	nd := &v1alpha1.NodeDrain{}
	switch err := s.client.Get(ctx, types.NamespacedName{Name: name}, nd); {
	case err == nil:
		r.existing = nd
		if policyName == "" {
			policyName = nd.Spec.PolicyName
		}
	case !apierrors.IsNotFound(err):
		return nodeRead{}, s.explain(err, "reading NodeDrain "+name)
	}
	r.policy, err = policy.Resolve(ctx, s.client, policyName, node)
	if policy.IsAmbiguous(err) {
		return nodeRead{}, fmt.Errorf("node %s: %w", name, err)
	}
	if policy.IsNotFound(err) {
		return nodeRead{}, fmt.Errorf("DrainPolicy %q not found in %s; see 'kubectl get drainpolicies'", policyName, s.where)
	}
	if err != nil {
		return nodeRead{}, s.explain(err, "reading the DrainPolicy")
	}
	podList, err := s.clientset.CoreV1().Pods("").List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", name).String()})
	if err != nil {
		return nodeRead{}, s.explain(err, "listing the pods of node "+name)
	}
	r.pods = make([]*corev1.Pod, 0, len(podList.Items))
	for i := range podList.Items {
		r.pods = append(r.pods, &podList.Items[i])
	}
	in.readNamespaces(ctx, s, r.pods)
	if surges(r.policy) {
		r.workloads = readWorkloads(ctx, s, r.pods)
	}
	return r, nil
}

// readNamespaces reads the namespaces of the pods not read yet.
func (in *planInput) readNamespaces(ctx context.Context, s *session, pods []*corev1.Pod) {
	for _, pod := range pods {
		name := pod.Namespace
		if _, ok := in.namespaces[name]; ok {
			continue
		}
		ns, err := s.clientset.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			in.namespaces[name] = namespaceRead{}
		case err != nil:
			in.namespaces[name] = namespaceRead{err: s.explain(err, "reading namespace "+name)}
		default:
			in.namespaces[name] = namespaceRead{labels: ns.Labels}
		}
	}
}

// labelsOf answers, from the namespaces read, the questions the decisions
// plan shares with the controller ask of a namespace (a namespace that is
// gone has no labels). It never reads.
func (in *planInput) labelsOf(name string) (labels.Set, error) {
	r, ok := in.namespaces[name]
	if !ok {
		return nil, fmt.Errorf("namespace %s was not read for the plan", name) // a bug: readNode reads every pod's
	}
	return r.labels, r.err
}

// readWorkloads reads the ReplicaSet, and its Deployment, of each pod a
// ReplicaSet controls.
func readWorkloads(ctx context.Context, s *session, pods []*corev1.Pod) map[string]workloadRead {
	out := map[string]workloadRead{}
	for _, pod := range pods {
		rs, ok := replicaSetOf(pod)
		key := pod.Namespace + "/" + rs
		if _, read := out[key]; !ok || read {
			continue
		}
		w, err := surge.Read(ctx, s.client, pod.Namespace, rs)
		if err != nil {
			err = s.explain(err, "reading the ReplicaSet "+key)
		}
		out[key] = workloadRead{workload: w, err: err}
	}
	return out
}

// replicaSetOf names the ReplicaSet that controls the pod, if one does.
func replicaSetOf(pod *corev1.Pod) (string, bool) {
	ref := metav1.GetControllerOfNoCopy(pod)
	if ref == nil || ref.Kind != "ReplicaSet" {
		return "", false
	}
	return ref.Name, true
}

// workloadOf is the pod's workload as read: its ReplicaSet and Deployment,
// none when no ReplicaSet controls it. It never reads.
func (r nodeRead) workloadOf(pod *corev1.Pod) (surge.Workload, error) {
	rs, ok := replicaSetOf(pod)
	if !ok {
		return surge.Workload{}, nil
	}
	key := pod.Namespace + "/" + rs
	w, ok := r.workloads[key]
	if !ok {
		return surge.Workload{}, fmt.Errorf("the ReplicaSet %s was not read for the plan", key) // a bug: readNode reads every pod's when the policy surges
	}
	return w.workload, w.err
}
