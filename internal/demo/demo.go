// Package demo runs vacate's demo on a throwaway dev cluster.
package demo

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/vacate-dev/vacate/internal/devcluster"
)

// ClusterName is the dev cluster the demo uses, apart from the user's own.
const ClusterName = "vacate-demo"

// Options configure the demo.
type Options struct {
	// Keep leaves the cluster running at the end.
	Keep bool
	// Nodes is how many simulated nodes to create. Default 5.
	Nodes int
}

// Run starts a dev cluster, creates simulated nodes and a small workload,
// prints what runs where, and stops the cluster unless opts.Keep is set.
func Run(ctx context.Context, out io.Writer, opts Options) (err error) {
	if opts.Nodes == 0 {
		opts.Nodes = 5
	}
	start := time.Now()
	step := func(format string, args ...any) {
		fmt.Fprintf(out, "==> [%5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}

	step("starting dev cluster %q (etcd %s, Kubernetes %s, kwok %s)",
		ClusterName, devcluster.EtcdVersion, devcluster.KubernetesVersion, devcluster.KwokVersion)
	c, err := devcluster.Up(ctx, devcluster.Options{Name: ClusterName, Detach: opts.Keep, Out: indent(out)})
	if err != nil {
		return err
	}
	defer func() {
		if opts.Keep && err == nil {
			fmt.Fprintf(out, "\nThe cluster keeps running. Try:\n  export KUBECONFIG=%s\n  kubectl get nodes,pods -A -o wide\nStop it with:\n  vacate dev down --name %s\n", c.Kubeconfig, ClusterName)
			return
		}
		step("stopping the dev cluster")
		c.Stop()
	}()

	step("creating %d simulated nodes in 2 zones", opts.Nodes)
	nodes, err := devcluster.CreateNodes(ctx, c.Client, devcluster.NodeSet{Prefix: "node", Count: opts.Nodes, Zones: []string{"zone-a", "zone-b"}})
	if err != nil {
		return err
	}
	if err := devcluster.WaitForNodesReady(ctx, c.Client, nodes, time.Minute); err != nil {
		return err
	}

	const ns = "shop"
	step("creating namespace %s: Deployment web (6 replicas, PDB maxUnavailable 1), StatefulSet db (3), DaemonSet agent", ns)
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	if err := devcluster.WaitForServiceAccount(ctx, c.Client, ns, time.Minute); err != nil {
		return err
	}
	if err := devcluster.CreateWorkload(ctx, c.Client, devcluster.Workload{Namespace: ns, DeploymentReplicas: 6, StatefulSetReplicas: 3}); err != nil {
		return err
	}
	want := 6 + 3 + opts.Nodes
	if _, err := devcluster.WaitForPodsReady(ctx, c.Client, ns, labels.Everything(), want, 2*time.Minute); err != nil {
		return err
	}
	pdb, err := devcluster.WaitForPDB(ctx, c.Client, ns, "web", 6, time.Minute)
	if err != nil {
		return err
	}
	step("all %d pods are Running; PDB web allows %d disruption(s) (%d of %d healthy)",
		want, pdb.Status.DisruptionsAllowed, pdb.Status.CurrentHealthy, pdb.Status.ExpectedPods)

	if err := printNodes(ctx, out, c.Client); err != nil {
		return err
	}
	if err := printPods(ctx, out, c.Client, ns); err != nil {
		return err
	}
	fmt.Fprintln(out, "\n(draining comes with the drain engine: see the open issues)")
	step("done")
	return nil
}

func printNodes(ctx context.Context, out io.Writer, cs kubernetes.Interface) error {
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	perNode := map[string]int{}
	for _, p := range pods.Items {
		perNode[p.Spec.NodeName]++
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tZONE\tREADY\tPODS")
	for _, n := range nodes.Items {
		fmt.Fprintf(tw, "%s\t%s\t%t\t%d\n", n.Name, n.Labels[devcluster.ZoneLabel], devcluster.NodeReady(&n), perNode[n.Name])
	}
	return tw.Flush()
}

func printPods(ctx context.Context, out io.Writer, cs kubernetes.Interface, ns string) error {
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	items := pods.Items
	sort.Slice(items, func(i, j int) bool { return items[i].Name < items[j].Name })
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tOWNER\tNODE\tIP\tPHASE")
	for _, p := range items {
		owner := "-"
		if len(p.OwnerReferences) > 0 {
			owner = p.OwnerReferences[0].Kind
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.Name, owner, p.Spec.NodeName, p.Status.PodIP, p.Status.Phase)
	}
	return tw.Flush()
}

// indent prefixes the dev cluster's progress lines so they read as detail.
func indent(w io.Writer) io.Writer { return indentWriter{w} }

type indentWriter struct{ w io.Writer }

func (i indentWriter) Write(p []byte) (int, error) {
	lines := strings.SplitAfter(string(p), "\n")
	for _, l := range lines {
		if l != "" {
			if _, err := io.WriteString(i.w, "      "+l); err != nil {
				return 0, err
			}
		}
	}
	return len(p), nil
}
