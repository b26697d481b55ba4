package devcluster

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Labels the fixtures set.
const (
	ZoneLabel     = "topology.kubernetes.io/zone"
	HostnameLabel = "kubernetes.io/hostname"
	AppLabel      = "app"
	// FixtureLabel marks every object the fixtures create, so a test can
	// find and delete what it made.
	FixtureLabel = "vacate.dev/fixture"
	// OwnKubeletLabel marks pods whose termination a test's kubelet stand-in
	// (internal/dev/traffic) carries out: kwok's pod-delete stage leaves them
	// Terminating, so a pod is gone only once its process has exited, as with
	// a real kubelet. kwok-stages.yaml names the same label.
	OwnKubeletLabel = "traffic.vacate.dev/kubelet"
)

// simImage is the image name of simulated pods; kwok never pulls it.
const simImage = "vacate.dev/simulated:latest"

// NodeSet describes simulated nodes to create.
type NodeSet struct {
	// Prefix names the nodes Prefix-0, Prefix-1, ...
	Prefix string
	// Count is how many nodes to create.
	Count int
	// Zones are assigned round robin to the zone label. Default: one zone "zone-a".
	Zones []string
	// Labels are added to every node.
	Labels map[string]string
	// Pods is the pod capacity of each node. Default 110.
	Pods int
	// PodCIDR, when set, is the first node's spec.podCIDR, from which kwok
	// gives its pods their IPs instead of the cluster's loopback range (which
	// EndpointSlices refuse). Node i gets the i-th block of the same size
	// after it, distinct ranges as kcm's allocator would hand out, so a
	// test can tell from a pod's IP which node it ran on. kcm does not
	// allocate them here (no --allocate-node-cidrs), hence the fixture.
	PodCIDR string
}

// SimulatedNode returns a Node that the dev cluster's kwok runs: it becomes
// Ready, keeps a lease, and its pods get loopback IPs unless its
// spec.podCIDR is set.
func SimulatedNode(name, zone string, podCapacity int) *corev1.Node {
	if podCapacity == 0 {
		podCapacity = 110
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   *resource.NewQuantity(int64(podCapacity), resource.DecimalSI),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Annotations: map[string]string{
				KwokNodeAnnotation:             "fake",
				"node.alpha.kubernetes.io/ttl": "0",
			},
			Labels: map[string]string{
				HostnameLabel:        name,
				ZoneLabel:            zone,
				"kubernetes.io/os":   "linux",
				"kubernetes.io/arch": "amd64",
				"kubernetes.io/role": "agent",
				"type":               "kwok",
				FixtureLabel:         "true",
			},
		},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity,
			NodeInfo: corev1.NodeSystemInfo{
				Architecture:    "amd64",
				OperatingSystem: "linux",
				KubeletVersion:  "fake",
			},
		},
	}
}

// CreateNodes creates the node set and returns the node names, in order.
func CreateNodes(ctx context.Context, cs kubernetes.Interface, set NodeSet) ([]string, error) {
	if set.Count <= 0 {
		return nil, fmt.Errorf("node set %q: count must be positive, got %d", set.Prefix, set.Count)
	}
	zones := set.Zones
	if len(zones) == 0 {
		zones = []string{"zone-a"}
	}
	cidrs, err := nodePodCIDRs(set.PodCIDR, set.Count)
	if err != nil {
		return nil, fmt.Errorf("node set %q: %w", set.Prefix, err)
	}
	names := make([]string, 0, set.Count)
	for i := 0; i < set.Count; i++ {
		name := fmt.Sprintf("%s-%d", set.Prefix, i)
		n := SimulatedNode(name, zones[i%len(zones)], set.Pods)
		for k, v := range set.Labels {
			n.Labels[k] = v
		}
		if cidrs != nil {
			n.Spec.PodCIDR, n.Spec.PodCIDRs = cidrs[i], []string{cidrs[i]}
		}
		if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			return names, fmt.Errorf("creating node %s: %w", name, err)
		}
		names = append(names, name)
	}
	return names, nil
}

// nodePodCIDRs returns count consecutive blocks of first's size starting at
// first, in canonical form (the API server's strict CIDR validation refuses
// "10.0.0.1/24"), or nil when first is empty.
func nodePodCIDRs(first string, count int) ([]string, error) {
	if first == "" {
		return nil, nil
	}
	p, err := netip.ParsePrefix(first)
	if err != nil {
		return nil, fmt.Errorf("pod CIDR %q: %w", first, err)
	}
	p = p.Masked()
	cidrs := make([]string, 0, count)
	for i := 0; i < count; i++ {
		if i > 0 {
			next := lastAddr(p).Next()
			if !next.IsValid() {
				return nil, fmt.Errorf("pod CIDR %q: no room for %d blocks of its size", first, count)
			}
			p = netip.PrefixFrom(next, p.Bits())
		}
		cidrs = append(cidrs, p.String())
	}
	return cidrs, nil
}

// lastAddr is the highest address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// WaitForNodesReady waits until every named node reports Ready and the
// node lifecycle controller has taken away the taints it keeps on a node
// that is not (node.kubernetes.io/not-ready and unreachable). A new node
// gets the not-ready taint at creation, and it stays a little after Ready:
// until then the scheduler places no pod there, and topology spread
// constraints that honour taints do not count the node.
func WaitForNodesReady(ctx context.Context, cs kubernetes.Interface, names []string, timeout time.Duration) error {
	var notReady []string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		notReady = notReady[:0]
		for _, name := range names {
			n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			switch {
			case err != nil || !NodeReady(n):
				notReady = append(notReady, name)
			case conditionTainted(n):
				notReady = append(notReady, name+" (still tainted not-ready or unreachable)")
			}
		}
		return len(notReady) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("nodes not Ready after %s: %v: %w", timeout, notReady, err)
	}
	return nil
}

// conditionTainted says whether the node carries a taint the node lifecycle
// controller sets from its Ready condition.
func conditionTainted(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
			return true
		}
	}
	return false
}

// NodeReady reports whether the node's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// PodReady reports whether the pod is Running with its Ready condition True.
func PodReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// CreateNamespace creates a namespace named generateName plus a random suffix
// and waits for its default ServiceAccount, so pods can be created at once.
func CreateNamespace(ctx context.Context, cs kubernetes.Interface, generateName string) (string, error) {
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: generateName, Labels: map[string]string{FixtureLabel: "true"}},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("creating namespace: %w", err)
	}
	return ns.Name, WaitForServiceAccount(ctx, cs, ns.Name, time.Minute)
}

func podTemplate(name string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{AppLabel: name, FixtureLabel: "true"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:  "app",
				Image: simImage,
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU:    resource.MustParse("10m"),
					corev1.ResourceMemory: resource.MustParse("16Mi"),
				}},
			}},
			TerminationGracePeriodSeconds: ptr.To[int64](5),
		},
	}
}

func selectorFor(name string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{AppLabel: name}}
}

// Deployment returns a Deployment of simulated pods labelled app=name.
func Deployment(ns, name string, replicas int32) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{FixtureLabel: "true"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: selectorFor(name),
			Template: podTemplate(name),
		},
	}
}

// StatefulSet returns a StatefulSet of simulated pods labelled app=name,
// governed by the headless Service of the same name (see HeadlessService).
func StatefulSet(ns, name string, replicas int32) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{FixtureLabel: "true"}},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(replicas),
			ServiceName:         name,
			Selector:            selectorFor(name),
			Template:            podTemplate(name),
			PodManagementPolicy: appsv1.ParallelPodManagement,
		},
	}
}

// HeadlessService returns the headless Service a StatefulSet names.
func HeadlessService(ns, name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{FixtureLabel: "true"}},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  map[string]string{AppLabel: name},
			Ports:     []corev1.ServicePort{{Name: "app", Port: 8080}},
		},
	}
}

// DaemonSet returns a DaemonSet of simulated pods labelled app=name.
func DaemonSet(ns, name string) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{FixtureLabel: "true"}},
		Spec: appsv1.DaemonSetSpec{
			Selector: selectorFor(name),
			Template: podTemplate(name),
		},
	}
}

// Job returns a Job of simulated pods labelled app=name that run until
// they complete (kwok completes them at once). Its pod failure policy ignores
// disruptions, as a Job that tolerates drains should: an evicted pod is
// replaced without counting against the backoff limit.
func Job(ns, name string, parallelism int32) *batchv1.Job {
	t := podTemplate(name)
	t.Spec.RestartPolicy = corev1.RestartPolicyNever
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{FixtureLabel: "true"}},
		Spec: batchv1.JobSpec{
			Parallelism: ptr.To(parallelism),
			Completions: ptr.To(parallelism),
			Template:    t,
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
				Action:          batchv1.PodFailurePolicyActionIgnore,
				OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
			}}},
		},
	}
}

// BarePod returns a pod with no controller, bound to node when node is set.
func BarePod(ns, name, node string) *corev1.Pod {
	t := podTemplate(name)
	t.Spec.NodeName = node
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: t.Labels},
		Spec:       t.Spec,
	}
}

// PDB returns a PodDisruptionBudget over the pods labelled app=app; exactly
// one of minAvailable and maxUnavailable should be set (as "2" or "10%").
func PDB(ns, name, app string, minAvailable, maxUnavailable string) *policyv1.PodDisruptionBudget {
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{FixtureLabel: "true"}},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: selectorFor(app)},
	}
	if minAvailable != "" {
		pdb.Spec.MinAvailable = ptr.To(intstr.Parse(minAvailable))
	}
	if maxUnavailable != "" {
		pdb.Spec.MaxUnavailable = ptr.To(intstr.Parse(maxUnavailable))
	}
	return pdb
}

// Workload is a small, realistic mix: a Deployment with a PDB, a
// StatefulSet with its Service, and a DaemonSet.
type Workload struct {
	Namespace           string
	DeploymentReplicas  int32
	StatefulSetReplicas int32
	// PDBMaxUnavailable of the Deployment's PDB, such as "1" or "10%".
	PDBMaxUnavailable string
	// NodeSelector, when set, keeps every pod of the mix on matching nodes.
	NodeSelector map[string]string
	// SpreadDeployment places the Deployment's pods evenly over the nodes
	// (a hard topology spread, maxSkew 1, over the nodes that are not
	// cordoned), so that every node holds some: without it the scheduler
	// may leave a node without any.
	SpreadDeployment bool
}

// CreateWorkload creates the mix: Deployment "web" with PDB "web", StatefulSet
// "db" with its Service, DaemonSet "agent".
func CreateWorkload(ctx context.Context, cs kubernetes.Interface, w Workload) error {
	ns := w.Namespace
	if w.PDBMaxUnavailable == "" {
		w.PDBMaxUnavailable = "1"
	}
	dep, sts, ds := Deployment(ns, "web", w.DeploymentReplicas), StatefulSet(ns, "db", w.StatefulSetReplicas), DaemonSet(ns, "agent")
	dep.Spec.Template.Spec.NodeSelector = w.NodeSelector
	if w.SpreadDeployment {
		dep.Spec.Template.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
			MaxSkew: 1, TopologyKey: HostnameLabel, WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector:    selectorFor("web"),
			NodeTaintsPolicy: ptr.To(corev1.NodeInclusionPolicyHonor), // a cordoned node counts for nothing
		}}
	}
	sts.Spec.Template.Spec.NodeSelector = w.NodeSelector
	ds.Spec.Template.Spec.NodeSelector = w.NodeSelector
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating deployment web: %w", err)
	}
	if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, PDB(ns, "web", "web", "", w.PDBMaxUnavailable), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating PDB web: %w", err)
	}
	if _, err := cs.CoreV1().Services(ns).Create(ctx, HeadlessService(ns, "db"), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating service db: %w", err)
	}
	if _, err := cs.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating statefulset db: %w", err)
	}
	if _, err := cs.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating daemonset agent: %w", err)
	}
	return nil
}

// WaitForPodsReady waits until at least count pods in ns matching selector
// are Running and Ready, and returns them, by name. It lists once and then
// follows a watch (listing again if the watch ends), so a wait for many
// pods costs the API server what changes, not a list per poll.
func WaitForPodsReady(ctx context.Context, cs kubernetes.Interface, ns string, selector labels.Selector, count int, timeout time.Duration) ([]corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pods := map[string]*corev1.Pod{}
	readyPods := func() []corev1.Pod {
		var ready []corev1.Pod
		for _, p := range pods {
			if PodReady(p) {
				ready = append(ready, *p)
			}
		}
		return ready
	}
	for {
		list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
		if err == nil {
			clear(pods)
			for i := range list.Items {
				pods[list.Items[i].Name] = &list.Items[i]
			}
			if ready := readyPods(); len(ready) >= count {
				return byName(ready), nil
			}
			if ready, done := followPods(ctx, cs, ns, selector, list.ResourceVersion, pods, count, readyPods); done {
				return byName(ready), nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for %d ready pods matching %q in %s (have %d of %d seen): %w",
				count, selector, ns, len(readyPods()), len(pods), ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// followPods applies a watch's events from resourceVersion to pods until
// count of them are ready (done) or the watch ends.
func followPods(ctx context.Context, cs kubernetes.Interface, ns string, selector labels.Selector, resourceVersion string,
	pods map[string]*corev1.Pod, count int, readyPods func() []corev1.Pod) ([]corev1.Pod, bool) {
	w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: selector.String(), ResourceVersion: resourceVersion})
	if err != nil {
		return nil, false
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		p, ok := ev.Object.(*corev1.Pod)
		if !ok {
			return nil, false // an error (such as an expired version): list again
		}
		switch ev.Type {
		case watch.Deleted:
			delete(pods, p.Name)
		default:
			pods[p.Name] = p
			if !PodReady(p) {
				continue
			}
			if ready := readyPods(); len(ready) >= count {
				return ready, true
			}
		}
	}
	return nil, false
}

func byName(pods []corev1.Pod) []corev1.Pod {
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return pods
}

// WaitForPDB waits until the disruption controller has computed the PDB's
// status for its current generation with expectedPods pods, and returns it.
func WaitForPDB(ctx context.Context, cs kubernetes.Interface, ns, name string, expectedPods int32, timeout time.Duration) (*policyv1.PodDisruptionBudget, error) {
	var pdb *policyv1.PodDisruptionBudget
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := cs.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pdb = p
		return p.Status.ObservedGeneration == p.Generation && p.Status.ExpectedPods == expectedPods &&
			p.Status.CurrentHealthy == expectedPods, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for the status of PDB %s/%s with %d healthy pods: %w", ns, name, expectedPods, err)
	}
	return pdb, nil
}
