package admission_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/admission"
	"github.com/vacate-dev/vacate/internal/controller/index"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// BenchmarkAdmissionPass measures one pass of a policy's queue, the work
// every batch of events that concerns the queue costs, with 10 drains
// running and 10, 100 or 1,000 waiting, 20 pods per node under 10 PDBs:
//   - slots=full: maxParallelNodes 10, every waiting drain waits for a slot;
//   - slots=free: maxParallelNodes 2,000, and the PDBs allow no disruption,
//     so every waiting drain is planned (its pods, their PDBs) and waits for
//     PDB headroom: the dearest pass that admits nothing.
//
// Reads come from memClient, which copies objects out of maps and indexes
// pods by node as the informer cache does. A decision is one waiting
// drain's verdict; the pass writes nothing once the verdicts are recorded,
// as in a steady queue.
func BenchmarkAdmissionPass(b *testing.B) {
	for _, slots := range []string{"full", "free"} {
		for _, queued := range []int{10, 100, 1000} {
			b.Run(fmt.Sprintf("slots=%s/queued=%d", slots, queued), func(b *testing.B) {
				limit, allowed := 10, int32(5)
				if slots == "free" {
					limit, allowed = 2000, 0
				}
				r := queueOf(b, 10, limit, queued, 20, allowed)
				ctx, req := context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "fleet"}}
				if _, err := r.Reconcile(ctx, req); err != nil { // records the verdicts
					b.Fatal(err)
				}
				cpu0 := cpuTime()
				b.ResetTimer()
				for range b.N {
					if _, err := r.Reconcile(ctx, req); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				cpu := cpuTime() - cpu0
				decisions := float64(b.N * queued)
				b.ReportMetric(decisions/b.Elapsed().Seconds(), "decisions/s")
				b.ReportMetric(float64(cpu.Microseconds())/decisions, "cpu-µs/decision")
			})
		}
	}
}

// cpuTime is the process's CPU time, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// queueOf builds a fleet under maxParallelNodes limit: running drains
// admitted, queued ones requested an hour ago (their batch closed), perNode
// pods on every node, one in two guarded by one of 10 PDBs that allow
// allowed disruptions.
func queueOf(b *testing.B, running, limit, queued, perNode int, allowed int32) *admission.Reconciler {
	b.Helper()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	objs := []client.Object{&v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "fleet"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": "a"}},
		Concurrency:  v1alpha1.Concurrency{MaxParallelNodes: ptr.To(intstr.FromInt32(int32(limit)))},
	}}}
	for i := range 10 {
		objs = append(objs, testutil.PDB("apps", fmt.Sprintf("app-%d", i), fmt.Sprintf("app-%d", i), 5, allowed))
	}
	for i := range running + queued {
		node := fmt.Sprintf("node-%04d", i)
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, UID: types.UID("uid-" + node),
			Labels: map[string]string{"fleet": "a", "topology.kubernetes.io/zone": fmt.Sprintf("zone-%d", i%3)}}})
		nd := testutil.NodeDrain(node, "", "cli:bench")
		nd.Finalizers = []string{v1alpha1.FinalizerRestore} // added by the NodeDrain controller
		nd.Status.RequestTime = &metav1.Time{Time: now.Add(-time.Hour + time.Duration(i)*time.Millisecond)}
		if i < running {
			nd.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionAdmitted, Status: metav1.ConditionTrue,
				Reason: v1alpha1.ReasonAdmitted, LastTransitionTime: metav1.NewTime(now)}}
			nd.Status.Phase = v1alpha1.PhaseEvicting
		}
		objs = append(objs, nd)
		for j := range perNode {
			p := testutil.Pod(fmt.Sprintf("%s-pod-%d", node, j)).Namespace("apps").OnNode(node).OwnedBy("ReplicaSet", fmt.Sprintf("rs-%d", j%10))
			if j%2 == 0 {
				p = p.Labels("app", fmt.Sprintf("app-%d", j%10))
			}
			objs = append(objs, p.Obj())
		}
	}
	return &admission.Reconciler{Client: newMemClient(objs), Clock: clocktesting.NewFakePassiveClock(now), Events: events.NewFakeRecorder(1 << 16)}
}

// memClient stands in for the informer cache in the benchmark: reads copy
// objects out of maps, and pods are indexed by node as the cache indexes
// them (index.PodNodeName); a status patch stores the object as written.
// controller-runtime's fake client filters every indexed list by scanning
// all objects of the kind, which would measure the fake, not admission.
type memClient struct {
	client.Client // nil: any other call panics, so the benchmark uses only these
	policies      map[string]*v1alpha1.DrainPolicy
	drains        map[string]*v1alpha1.NodeDrain
	nodes         map[string]*corev1.Node
	pdbs          []*policyv1.PodDisruptionBudget
	podsByNode    map[string][]*corev1.Pod
}

func newMemClient(objs []client.Object) *memClient {
	m := &memClient{policies: map[string]*v1alpha1.DrainPolicy{}, drains: map[string]*v1alpha1.NodeDrain{},
		nodes: map[string]*corev1.Node{}, podsByNode: map[string][]*corev1.Pod{}}
	for _, o := range objs {
		switch o := o.(type) {
		case *v1alpha1.DrainPolicy:
			m.policies[o.Name] = o
		case *v1alpha1.NodeDrain:
			m.drains[o.Name] = o
		case *corev1.Node:
			m.nodes[o.Name] = o
		case *policyv1.PodDisruptionBudget:
			m.pdbs = append(m.pdbs, o)
		case *corev1.Pod:
			m.podsByNode[o.Spec.NodeName] = append(m.podsByNode[o.Spec.NodeName], o)
		}
	}
	return m
}

func (m *memClient) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	notFound := func(res string) error {
		return apierrors.NewNotFound(schema.GroupResource{Resource: res}, key.Name)
	}
	switch o := obj.(type) {
	case *v1alpha1.DrainPolicy:
		if p, ok := m.policies[key.Name]; ok {
			p.DeepCopyInto(o)
			return nil
		}
		return notFound("drainpolicies")
	case *v1alpha1.NodeDrain:
		if d, ok := m.drains[key.Name]; ok {
			d.DeepCopyInto(o)
			return nil
		}
		return notFound("nodedrains")
	case *corev1.Node:
		if n, ok := m.nodes[key.Name]; ok {
			n.DeepCopyInto(o)
			return nil
		}
		return notFound("nodes")
	}
	return fmt.Errorf("memClient: Get of %T", obj)
}

func (m *memClient) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	lo := (&client.ListOptions{}).ApplyOptions(opts)
	switch l := list.(type) {
	case *v1alpha1.DrainPolicyList:
		for _, p := range m.policies {
			l.Items = append(l.Items, *p.DeepCopy())
		}
	case *v1alpha1.NodeDrainList:
		for _, d := range m.drains {
			l.Items = append(l.Items, *d.DeepCopy())
		}
	case *corev1.NodeList:
		for _, n := range m.nodes {
			l.Items = append(l.Items, *n.DeepCopy())
		}
	case *policyv1.PodDisruptionBudgetList:
		for _, p := range m.pdbs {
			l.Items = append(l.Items, *p.DeepCopy())
		}
	case *corev1.PodList:
		node, ok := lo.FieldSelector.RequiresExactMatch(index.PodNodeName)
		if !ok {
			return fmt.Errorf("memClient: pods are listed by %s only", index.PodNodeName)
		}
		for _, p := range m.podsByNode[node] {
			l.Items = append(l.Items, *p.DeepCopy())
		}
	default:
		return fmt.Errorf("memClient: List of %T", list)
	}
	return nil
}

// Patch stores a node as patched (a cordon).
func (m *memClient) Patch(_ context.Context, obj client.Object, _ client.Patch, _ ...client.PatchOption) error {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return fmt.Errorf("memClient: patch of %T", obj)
	}
	m.nodes[n.Name] = n.DeepCopy()
	return nil
}

func (m *memClient) Status() client.SubResourceWriter { return memStatus{m: m} }

// memStatus stores a NodeDrain's status as patched; its other methods are
// the nil SubResourceWriter's, which admission never calls.
type memStatus struct {
	client.SubResourceWriter
	m *memClient
}

func (s memStatus) Patch(_ context.Context, obj client.Object, _ client.Patch, _ ...client.SubResourcePatchOption) error {
	nd, ok := obj.(*v1alpha1.NodeDrain)
	if !ok {
		return fmt.Errorf("memClient: status patch of %T", obj)
	}
	s.m.drains[nd.Name] = nd.DeepCopy()
	return nil
}
