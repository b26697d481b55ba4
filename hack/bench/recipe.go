package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/vacate-dev/vacate/config/rbac"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
)

// Who sends the requests, so the audit log tells the drainers apart from the
// harness (which acts as the cluster's admin).
const (
	controllerUser = "vacate:controller"
	kubectlUser    = "bench:kubectl"
	tightUser      = "bench:tight"
	leaseNamespace = "kube-system"
	leaseName      = "vacate-controller" // vacate-controller's default --leader-election-id
	benchNamespace = "bench"
)

// recipe is the cluster every run starts from.
type recipe struct {
	nodes       int
	pods        int // Deployment and StatefulSet pods; DaemonSet pods come on top
	daemonSets  int
	perDeploy   int      // pods per Deployment, each behind a PDB
	pdbMaxUnav  string   // the PDBs' maxUnavailable
	stsSize     int      // pods per StatefulSet (no PDB)
	drain       string   // nodes to drain: a count or a percentage of nodes
	maxParallel string   // the DrainPolicy's maxParallelNodes in the parallel row; "" = the drained count
	podsPerNode int      // node pod capacity
	ctrlFlags   []string // vacate-controller flags on top of controllerFlags'
}

// split returns how many Deployments and StatefulSets make up the pods:
// Deployments of perDeploy pods take 15/16 of them, StatefulSets of at most
// stsSize the rest (sizes of the last one adjusted).
func (r recipe) split() (deploys int, sts []int) {
	deploys = r.pods * 15 / 16 / r.perDeploy
	if deploys < 1 {
		deploys = 1
	}
	rest := r.pods - deploys*r.perDeploy
	for rest > 0 {
		n := min(rest, r.stsSize)
		sts = append(sts, n)
		rest -= n
	}
	return deploys, sts
}

// drainCount resolves -drain against the node count.
func (r recipe) drainCount() (int, error) {
	return resolveCount(r.drain, r.nodes)
}

// resolveCount reads "7" or "10%" (of total, rounded up, at least 1).
func resolveCount(s string, total int) (int, error) {
	if p, ok := strings.CutSuffix(s, "%"); ok {
		v, err := strconv.Atoi(p)
		if err != nil || v <= 0 || v > 100 {
			return 0, fmt.Errorf("%q: want a percentage from 1%% to 100%%", s)
		}
		return max(1, (total*v+99)/100), nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v <= 0 || v > total {
		return 0, fmt.Errorf("%q: want a count from 1 to %d", s, total)
	}
	return v, nil
}

func (r recipe) String() string {
	deploys, sts := r.split()
	n, _ := r.drainCount()
	return fmt.Sprintf("%d nodes (%d pods each at most), %d Deployments x %d pods (PDB maxUnavailable %s), %d StatefulSets (%d pods, no PDB), %d DaemonSets; drain %d nodes",
		r.nodes, r.podsPerNode, deploys, r.perDeploy, r.pdbMaxUnav, len(sts), sum(sts), r.daemonSets, n)
}

func sum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

// setup creates the nodes and the workload and waits until every pod is
// ready and every PDB has its status; it returns the node names, sorted.
func setup(ctx context.Context, cs kubernetes.Interface, r recipe) ([]string, error) {
	names, err := setupNodes(ctx, cs, r)
	if err != nil {
		return nil, err
	}
	if _, err := grow(ctx, cs, r, workload{}, r.pods); err != nil {
		return nil, err
	}
	return names, nil
}

// setupNodes creates the recipe's nodes and the bench namespace, waits until
// the nodes are Ready, and returns their names sorted by number.
func setupNodes(ctx context.Context, cs kubernetes.Interface, r recipe) ([]string, error) {
	names, err := devcluster.CreateNodes(ctx, cs, devcluster.NodeSet{Prefix: "node", Count: r.nodes, Pods: r.podsPerNode, Zones: []string{"zone-a", "zone-b", "zone-c"}})
	if err != nil {
		return nil, err
	}
	if err := devcluster.WaitForNodesReady(ctx, cs, names, 5*time.Minute); err != nil {
		return nil, err
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace}}, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("creating namespace: %w", err)
	}
	if err := devcluster.WaitForServiceAccount(ctx, cs, benchNamespace, time.Minute); err != nil {
		return nil, err
	}
	sort.Slice(names, func(i, j int) bool { return nodeIndex(names[i]) < nodeIndex(names[j]) })
	return names, nil
}

// grow adds to the workload have until it holds pods Deployment and
// StatefulSet pods, laid out as the recipe lays out that many (see
// workloadFor), and waits until every pod is ready and every PDB settled.
// The first call (have empty) creates the DaemonSets too.
func grow(ctx context.Context, cs kubernetes.Interface, r recipe, have workload, pods int) (workload, error) {
	want := workloadFor(r, have, pods)
	if err := createWorkload(ctx, cs, r, have, want); err != nil {
		return have, err
	}
	if err := waitReady(ctx, cs, want.pods()+r.daemonSets*r.nodes, want.deploys, r); err != nil {
		return want, err
	}
	return want, nil
}

// nodeIndex is the number in node-<n>, so node-10 sorts after node-9.
func nodeIndex(name string) int {
	i, _ := strconv.Atoi(strings.TrimPrefix(name, "node-"))
	return i
}

// workload is what the recipe created: Deployments of perDeploy pods
// (web-0, web-1, ...) and StatefulSets (db-0, db-1, ...) of the sizes listed.
type workload struct {
	perDeploy int
	deploys   int
	sts       []int
}

func (w workload) pods() int { return w.deploys*w.perDeploy + sum(w.sts) }

// workloadFor is have grown to pods pods: the Deployments and StatefulSets
// the recipe's split gives for the pods added (have's objects are kept as
// they are), so a cluster grown in steps has the same mix as one made at
// once, 15/16 of the pods behind PDBs.
func workloadFor(r recipe, have workload, pods int) workload {
	out := workload{perDeploy: r.perDeploy, deploys: have.deploys, sts: append([]int(nil), have.sts...)}
	if add := pods - have.pods(); add > 0 {
		step := r
		step.pods = add
		d, sts := step.split()
		out.deploys += d
		out.sts = append(out.sts, sts...)
	}
	return out
}

// createWorkload creates the objects of want that have does not hold; with
// have empty, the DaemonSets too.
func createWorkload(ctx context.Context, cs kubernetes.Interface, r recipe, have, want workload) error {
	ns := benchNamespace
	for i := have.deploys; i < want.deploys; i++ {
		app := fmt.Sprintf("web-%d", i)
		if _, err := cs.AppsV1().Deployments(ns).Create(ctx, devcluster.Deployment(ns, app, int32(r.perDeploy)), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating Deployment %s: %w", app, err)
		}
		if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, devcluster.PDB(ns, app, app, "", r.pdbMaxUnav), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating PDB %s: %w", app, err)
		}
	}
	for i := len(have.sts); i < len(want.sts); i++ {
		app := fmt.Sprintf("db-%d", i)
		if _, err := cs.CoreV1().Services(ns).Create(ctx, devcluster.HeadlessService(ns, app), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating Service %s: %w", app, err)
		}
		if _, err := cs.AppsV1().StatefulSets(ns).Create(ctx, devcluster.StatefulSet(ns, app, int32(want.sts[i])), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating StatefulSet %s: %w", app, err)
		}
	}
	if have.pods() > 0 {
		return nil
	}
	for i := 0; i < r.daemonSets; i++ {
		if _, err := cs.AppsV1().DaemonSets(ns).Create(ctx, devcluster.DaemonSet(ns, fmt.Sprintf("agent-%d", i)), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating DaemonSet: %w", err)
		}
	}
	return nil
}

// waitReady polls, every two seconds, until want pods are ready and each of
// the deploys PDBs has seen all its pods. It reads the Deployments',
// StatefulSets' and DaemonSets' ready counts, and lists the pods themselves
// only once those add up: a list of 30,000 pods every two seconds cost the
// harness and the API server more CPU than the rest of its waiting.
func waitReady(ctx context.Context, cs kubernetes.Interface, want, deploys int, r recipe) error {
	ready := 0
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 60*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		if ready, err = readyByWorkloads(ctx, cs); err != nil || ready < want {
			return false, nil
		}
		pods, err := cs.CoreV1().Pods(benchNamespace).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, nil
		}
		ready = 0
		for i := range pods.Items {
			if devcluster.PodReady(&pods.Items[i]) {
				ready++
			}
		}
		if ready < want {
			return false, nil
		}
		pdbs, err := cs.PolicyV1().PodDisruptionBudgets(benchNamespace).List(ctx, metav1.ListOptions{})
		if err != nil || len(pdbs.Items) != deploys {
			return false, nil
		}
		for _, p := range pdbs.Items {
			if p.Status.ObservedGeneration != p.Generation || p.Status.ExpectedPods != int32(r.perDeploy) || p.Status.CurrentHealthy < p.Status.DesiredHealthy {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d ready pods (have %d) and settled PDBs: %w", want, ready, err)
	}
	return nil
}

// readyByWorkloads adds up the ready pods the bench's Deployments,
// StatefulSets and DaemonSets report.
func readyByWorkloads(ctx context.Context, cs kubernetes.Interface) (int, error) {
	apps := cs.AppsV1()
	deps, err := apps.Deployments(benchNamespace).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return 0, err
	}
	sts, err := apps.StatefulSets(benchNamespace).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return 0, err
	}
	dss, err := apps.DaemonSets(benchNamespace).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, d := range deps.Items {
		n += int(d.Status.ReadyReplicas)
	}
	for _, s := range sts.Items {
		n += int(s.Status.ReadyReplicas)
	}
	for _, d := range dss.Items {
		n += int(d.Status.NumberReady)
	}
	return n, nil
}

// users creates the drainers' identities and returns a kubeconfig for each:
// vacate-controller bound to its generated ClusterRole and its Lease Role
// only; kubectl and the tight client as cluster admins, as a person or a
// script usually runs.
func users(ctx context.Context, c *devcluster.Cluster) (map[string]string, error) {
	role, err := rbac.ControllerRole()
	if err != nil {
		return nil, err
	}
	subjects := []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: controllerUser}}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   subjects,
	}
	leaseRole, err := rbac.LeaderElectionRole(leaseNamespace, leaseName)
	if err != nil {
		return nil, err
	}
	leaseBinding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: leaseRole.Namespace, Name: leaseRole.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: leaseRole.Name},
		Subjects:   subjects,
	}
	rb := c.Client.RbacV1()
	if _, err := rb.ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("creating ClusterRole: %w", err)
	}
	if _, err := rb.ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("creating ClusterRoleBinding: %w", err)
	}
	if _, err := rb.Roles(leaseNamespace).Create(ctx, leaseRole, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("creating Lease Role: %w", err)
	}
	if _, err := rb.RoleBindings(leaseNamespace).Create(ctx, leaseBinding, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("creating Lease RoleBinding: %w", err)
	}
	out := map[string]string{}
	for user, groups := range map[string][]string{controllerUser: nil, kubectlUser: {"system:masters"}, tightUser: {"system:masters"}} {
		path, err := c.KubeconfigFor(user, groups...)
		if err != nil {
			return nil, err
		}
		out[user] = path
	}
	return out, nil
}
