package admission

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/index"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/policy"
	"github.com/vacate-dev/vacate/internal/schedule"
)

// This file reads a queue for a pass: the policy's running drains (from
// the cache, or from the API server before an admission is written), split
// into admitted and waiting, each with its node; the policy's limits; and,
// when a slot is free, the PDBs and what each node's pods still need of
// them. It decides nothing: plan.go does.

// member is a drain of the queue.
type member struct {
	drain *v1alpha1.NodeDrain
	// node is the drain's node; a stand-in with only its name for an
	// admitted drain whose node is gone (it holds its slot until the pass
	// of HeldKey gives the admission up).
	node     *corev1.Node
	admitted bool
}

// queue is what a pass read of one policy's queue.
type queue struct {
	key    string
	policy policy.Policy
	now    time.Time
	// all are every NodeDrain, for the queue gauge.
	all []v1alpha1.NodeDrain
	// admitted and waiting are the queue's running drains.
	admitted, waiting []*member
	// nodes are the nodes by name as this pass last saw them.
	nodes  map[string]*corev1.Node
	limits schedule.Limits
	pdbs   []*policyv1.PodDisruptionBudget
	// needs are, per member's node, what its pods that must still leave need.
	needs map[string]need
}

// read gathers the queue from reader (the cache, or the API server for the
// drains before an admission) and the cache for nodes, pods and PDBs.
func (r *Reconciler) read(ctx context.Context, reader client.Reader, key string, pol policy.Policy, now time.Time) (*queue, error) {
	list := &v1alpha1.NodeDrainList{}
	if err := reader.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing NodeDrains: %w", err)
	}
	policies := &v1alpha1.DrainPolicyList{}
	if err := r.Client.List(ctx, policies); err != nil {
		return nil, fmt.Errorf("listing DrainPolicies: %w", err)
	}
	q := &queue{key: key, policy: pol, now: now, all: list.Items, nodes: map[string]*corev1.Node{}, needs: map[string]need{}}
	for i := range list.Items {
		nd := &list.Items[i]
		if !nd.Running() {
			continue
		}
		m, err := r.member(ctx, nd, key, policies.Items)
		if err != nil || m == nil {
			if err != nil {
				return nil, err
			}
			continue
		}
		q.nodes[m.node.Name] = m.node
		if m.admitted {
			q.admitted = append(q.admitted, m)
		} else {
			q.waiting = append(q.waiting, m)
		}
	}
	if len(q.waiting) == 0 {
		return q, nil
	}
	var err error
	if q.limits, err = r.limits(ctx, pol, policies.Items); err != nil {
		return nil, err
	}
	if len(q.admitted) >= q.limits.MaxParallel {
		return q, nil // no slot: every waiting drain waits for one, whatever its PDBs
	}
	if q.pdbs, err = index.PDBs(ctx, r.Client); err != nil {
		return nil, err
	}
	guards := drain.GuardsOf(q.pdbs...)
	// At once: the first read of a node's pods lists them from the API
	// server (the pod cache watches the pods of drained nodes only), and
	// a batch of twenty read one after another held its first eviction
	// back by a second at 1,000 nodes.
	members := append(append([]*member(nil), q.admitted...), q.waiting...)
	needs := make([]need, len(members))
	if _, err := atOnce(len(members), func(i int) (reconcile.Result, error) {
		var err error
		needs[i], err = r.needs(ctx, members[i].node, pol, guards, now)
		return reconcile.Result{}, err
	}); err != nil {
		return nil, err
	}
	for i, m := range members {
		q.needs[m.node.Name] = needs[i]
	}
	return q, nil
}

// member places a running drain: in this queue (its node's policy, or the
// one it names, is key's), or not (nil). A drain whose node is missing,
// replaced or governed by no clear policy belongs to no queue: the pass of
// HeldKey holds it. Once admitted, it counts in every queue it may belong
// to until that pass gives the admission up, to be safe. A replaced node's
// drain comes back as a new one once the NodeDrain controller recorded the
// new node's UID (which waits for that).
func (r *Reconciler) member(ctx context.Context, nd *v1alpha1.NodeDrain, key string, policies []v1alpha1.DrainPolicy) (*member, error) {
	admitted := nd.Admitted()
	node := &corev1.Node{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: nd.Spec.NodeName}, node); apierrors.IsNotFound(err) {
		if admitted && (nd.Spec.PolicyName == "" || nd.Spec.PolicyName == key) {
			return &member{drain: nd, node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nd.Spec.NodeName}}, admitted: true}, nil
		}
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("reading node %s: %w", nd.Spec.NodeName, err)
	}
	if !admitted && nd.Status.NodeUID != "" && nd.Status.NodeUID != string(node.UID) {
		return nil, nil // replaced: held until the NodeDrain controller starts it over
	}
	name, err := KeyOf(nd, node.Labels, policies)
	switch {
	case err != nil && admitted:
		return &member{drain: nd, node: node, admitted: true}, nil
	case err != nil || name != key:
		return nil, nil
	}
	return &member{drain: nd, node: node, admitted: admitted}, nil
}

// KeyOf is the queue of a drain on a node with these labels: the policy it
// names, or the one that governs the node, or BuiltinKey.
func KeyOf(nd *v1alpha1.NodeDrain, nodeLabels map[string]string, policies []v1alpha1.DrainPolicy) (string, error) {
	if nd.Spec.PolicyName != "" {
		return nd.Spec.PolicyName, nil
	}
	dp, _, err := policy.Select(nodeLabels, policies)
	switch {
	case err != nil:
		return "", err
	case dp == nil:
		return BuiltinKey, nil
	}
	return dp.Name, nil
}

// limits resolves the policy's concurrency; a percentage counts the nodes
// the policy governs.
func (r *Reconciler) limits(ctx context.Context, pol policy.Policy, policies []v1alpha1.DrainPolicy) (schedule.Limits, error) {
	adm := pol.Admission
	governed := 0
	if adm.MaxParallelNodes != nil && adm.MaxParallelNodes.Type == intstr.String {
		nodes := &corev1.NodeList{}
		if err := r.Client.List(ctx, nodes); err != nil {
			return schedule.Limits{}, fmt.Errorf("listing nodes: %w", err)
		}
		for _, n := range nodes.Items {
			dp, _, err := policy.Select(n.Labels, policies)
			if err == nil && ((dp == nil && pol.Name == "") || (dp != nil && dp.Name == pol.Name)) {
				governed++
			}
		}
	}
	n, err := schedule.MaxParallel(adm.MaxParallelNodes, governed)
	if err != nil {
		return schedule.Limits{}, err
	}
	return schedule.Limits{MaxParallel: n, Topology: adm.Topology}, nil
}

// need is what a node's pods that must still leave need of the PDBs.
type need struct {
	// pdbs are, per PDB, the pods it guards.
	pdbs map[string]int
	// unguarded are the pods no PDB guards.
	unguarded int
}

// needs are what the node's pods that the planner would evict need: per
// PDB, the pods it guards, and how many no PDB guards.
func (r *Reconciler) needs(ctx context.Context, node *corev1.Node, pol policy.Policy, guards *drain.Guards, now time.Time) (need, error) {
	pods, err := r.Pods.Or(r.Client)(ctx, node.Name)
	if err != nil {
		return need{}, fmt.Errorf("listing pods on node %s: %w", node.Name, err)
	}
	out := need{pdbs: map[string]int{}}
	for _, dec := range drain.New(pods, guards, pol.Rules.ForNode(node), now).Decisions {
		if dec.Action != drain.Evict {
			continue
		}
		if len(dec.PDBs) == 0 {
			out.unguarded++
		}
		for _, p := range dec.PDBs {
			out.pdbs[p]++
		}
	}
	return out, nil
}

// cordonedAs takes the nodes as an earlier read of the pass left them
// (cordoned just now: the cache may not show it yet).
func (q *queue) cordonedAs(earlier *queue) {
	for _, m := range append(append([]*member(nil), q.admitted...), q.waiting...) {
		if n, ok := earlier.nodes[m.node.Name]; ok {
			m.node = n
			q.nodes[n.Name] = n
		}
	}
}
