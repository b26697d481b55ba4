// Package demo runs vacate's demo on a throwaway dev cluster: the vacate
// controller in process, simulated nodes with a realistic workload, three
// nodes drained with the live progress view, one held by a tight PDB and
// explained, the PDB relaxed, and a summary with a report file.
package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/explain"
	"github.com/vacate-dev/vacate/internal/operator"
	"github.com/vacate-dev/vacate/internal/progress"
)

// ClusterName is the dev cluster the demo uses, apart from the user's own.
const ClusterName = "vacate-demo"

// Requester is the demo's requester name on its NodeDrains.
const Requester = "demo"

// Options configure the demo.
type Options struct {
	// Keep leaves the cluster running at the end, with a vacate controller.
	Keep bool
	// Nodes is how many simulated nodes to create. Default 8.
	Nodes int
	// ReportDir is where the report file goes. Default: the vacate cache
	// directory's demo/ folder.
	ReportDir string
	// Executable is vacate-dev, which runs the brokers (`Executable broker
	// ...`) and the controller that --keep leaves running (`Executable
	// controller --name vacate-demo`). Default: this program.
	Executable string
}

const (
	ns = "shop"
	// drains is how many nodes the demo drains.
	drains = 3
	// blockedFor is how long the demo lets the tight PDB hold a drain
	// before explaining it.
	blockedFor = 4 * time.Second
)

// demo is one run's state.
type demo struct {
	out   io.Writer
	opts  Options
	start time.Time
	c     *devcluster.Cluster
	cl    client.WithWatch
}

func (d *demo) step(format string, args ...any) {
	fmt.Fprintf(d.out, "==> [%5.1fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

// Run starts a dev cluster and the controller, creates nodes and a
// workload, drains three nodes while showing progress, explains the one a
// tight PDB holds, relaxes the PDB, and ends with a summary and a report.
// The cluster stops at the end unless opts.Keep is set.
func Run(ctx context.Context, out io.Writer, opts Options) (err error) {
	if opts.Nodes == 0 {
		opts.Nodes = 8
	}
	if opts.Nodes < drains+2 {
		return fmt.Errorf("the demo needs at least %d nodes, got %d", drains+2, opts.Nodes)
	}
	d := &demo{out: out, opts: opts, start: time.Now()}
	d.step("starting dev cluster %q (etcd %s, Kubernetes %s, kwok %s)",
		ClusterName, devcluster.EtcdVersion, devcluster.KubernetesVersion, devcluster.KwokVersion)
	d.c, err = devcluster.Up(ctx, devcluster.Options{Name: ClusterName, Detach: opts.Keep, Out: indent(out)})
	if err != nil {
		return err
	}
	defer func() {
		if opts.Keep && err == nil {
			err = d.keep(ctx)
			return
		}
		d.step("stopping the dev cluster")
		d.c.Stop()
	}()
	stop, err := d.startController(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if serr := stop(); serr != nil && err == nil {
			err = fmt.Errorf("vacate controller: %w", serr)
		}
	}()
	targets, err := d.setup(ctx)
	if err != nil {
		return err
	}
	var others []string
	for i := range d.opts.Nodes {
		if n := fmt.Sprintf("node-%d", i); !slices.Contains(targets, n) {
			others = append(others, n)
		}
	}
	data, err := d.startStateful(ctx, targets[1], targets[2], others)
	defer d.closeStateful(context.WithoutCancel(ctx), data)
	if err != nil {
		return err
	}
	if err := d.drain(ctx, targets); err != nil {
		return err
	}
	if err := d.reportStateful(ctx, data); err != nil {
		return err
	}
	if err := d.spotNotice(ctx, others[len(others)-1]); err != nil {
		return err
	}
	return d.endpointAware(ctx)
}

// startController installs the CRDs and runs the vacate controller in this
// process, logging to a file in the cluster's directory.
func (d *demo) startController(ctx context.Context) (func() error, error) {
	logPath := filepath.Join(d.c.Dir, "controller.log")
	d.step("installing vacate's CRDs; starting the vacate controller in this process (log: %s)", logPath)
	if err := devcluster.InstallCRDs(ctx, d.c.RESTConfig); err != nil {
		return nil, err
	}
	if err := devcluster.InstallControllerIdentity(ctx, d.c.RESTConfig); err != nil {
		return nil, err
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("creating the controller's log: %w", err)
	}
	logger := useLog(logFile)
	opts := operator.InProcessOptions()
	opts.Controllers.AllowLoopbackHooks = true // the dev cluster's pods live on 127.0.0.0/8
	stop, err := operator.Start(logr.NewContext(ctx, logger), d.c.RESTConfig, opts)
	if err != nil {
		logFile.Close()
		return nil, err
	}
	scheme, err := operator.Scheme()
	if err != nil {
		return nil, err
	}
	if d.cl, err = client.NewWithWatch(d.c.RESTConfig, client.Options{Scheme: scheme}); err != nil {
		return nil, err
	}
	return func() error {
		err := stop()
		useLog(io.Discard)
		logFile.Close()
		return err
	}, nil
}

// The process-wide loggers (controller-runtime's, klog's) are set once and
// write to the current demo's log file: setting them again while the
// previous controller's goroutines wind down would race.
var (
	logOnce sync.Once
	logTo   = &switchWriter{w: io.Discard}
	logger  logr.Logger
)

func useLog(w io.Writer) logr.Logger {
	logOnce.Do(func() {
		logger = zap.New(zap.WriteTo(logTo))
		ctrl.SetLogger(logger)
		klog.SetLogger(logger)
	})
	logTo.set(w)
	return logger
}

// switchWriter writes to a writer that can be replaced.
type switchWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *switchWriter) set(w io.Writer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w = w
}

func (s *switchWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// setup creates the nodes and the workload, shows where the pods run, and
// picks the nodes to drain: the one that holds db's first pod (its PDB is
// tight, so that drain blocks) and the two busiest nodes without a db pod.
func (d *demo) setup(ctx context.Context) ([]string, error) {
	cs := d.c.Client
	d.step("creating %d simulated nodes in 2 zones", d.opts.Nodes)
	nodes, err := devcluster.CreateNodes(ctx, cs, devcluster.NodeSet{Prefix: "node", Count: d.opts.Nodes, Zones: []string{"zone-a", "zone-b"}})
	if err != nil {
		return nil, err
	}
	if err := devcluster.WaitForNodesReady(ctx, cs, nodes, time.Minute); err != nil {
		return nil, err
	}
	d.step("creating DrainPolicy default: 2 nodes at a time, in PDB-aware order, drains requested together cordoned together, HTTP evacuation hooks allowed")
	dp := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DefaultPolicyName},
		Spec: v1alpha1.DrainPolicySpec{Concurrency: v1alpha1.Concurrency{MaxParallelNodes: ptr.To(intstr.FromInt32(2))},
			HTTPHooks: v1alpha1.HTTPHooks{Enabled: true}}}
	if err := d.cl.Create(ctx, dp); err != nil {
		return nil, fmt.Errorf("creating DrainPolicy default: %w", err)
	}
	d.step("creating namespace %s: Deployments web (12, PDB maxUnavailable 1) and api (6, PDB minAvailable 50%%), "+
		"StatefulSet db (3, PDB minAvailable 3: tight), DaemonSet agent, Job report (2 pods)", ns)
	if err := createShop(ctx, cs); err != nil {
		return nil, err
	}
	// kwok runs a Job's pods to completion at once: they stay on their
	// nodes as Succeeded, which a drain leaves in place.
	want := 12 + 6 + 3 + d.opts.Nodes
	running, err := labels.Parse(devcluster.AppLabel + "!=report")
	if err != nil {
		return nil, err
	}
	if _, err := devcluster.WaitForPodsReady(ctx, cs, ns, running, want, 2*time.Minute); err != nil {
		return nil, err
	}
	for name, expected := range map[string]int32{"web": 12, "api": 6, "db": 3} {
		if _, err := devcluster.WaitForPDB(ctx, cs, ns, name, expected, time.Minute); err != nil {
			return nil, err
		}
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	d.step("%d pods are Running (and the Job's 2 ran to completion):", want)
	if err := printNodes(ctx, d.out, cs, pods.Items); err != nil {
		return nil, err
	}
	return pickTargets(pods.Items), nil
}

func createShop(ctx context.Context, cs kubernetes.Interface) error {
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	if err := devcluster.WaitForServiceAccount(ctx, cs, ns, time.Minute); err != nil {
		return err
	}
	if err := devcluster.CreateWorkload(ctx, cs, devcluster.Workload{Namespace: ns, DeploymentReplicas: 12, StatefulSetReplicas: 3}); err != nil {
		return err
	}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, devcluster.Deployment(ns, "api", 6), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating deployment api: %w", err)
	}
	for _, pdb := range []struct{ name, min string }{{"api", "50%"}, {"db", "3"}} {
		if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, devcluster.PDB(ns, pdb.name, pdb.name, pdb.min, ""), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating PDB %s: %w", pdb.name, err)
		}
	}
	if _, err := cs.BatchV1().Jobs(ns).Create(ctx, devcluster.Job(ns, "report", 2), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating job report: %w", err)
	}
	return nil
}

// pickTargets chooses the nodes to drain: db-0's node first, then the
// nodes with the most pods that hold no db pod.
func pickTargets(pods []corev1.Pod) []string {
	count := map[string]int{}
	hasDB := map[string]bool{}
	first := ""
	for _, p := range pods {
		count[p.Spec.NodeName]++
		if p.Labels[devcluster.AppLabel] == "db" {
			hasDB[p.Spec.NodeName] = true
			if p.Name == "db-0" {
				first = p.Spec.NodeName
			}
		}
	}
	var others []string
	for n := range count {
		if !hasDB[n] {
			others = append(others, n)
		}
	}
	sort.Slice(others, func(i, j int) bool {
		if count[others[i]] != count[others[j]] {
			return count[others[i]] > count[others[j]]
		}
		return others[i] < others[j]
	})
	return append([]string{first}, others[:drains-1]...)
}

// drain requests the drains and follows them: until the tight PDB has held
// the first node for a while, then explains it, relaxes the PDB, and
// follows to the end.
func (d *demo) drain(ctx context.Context, targets []string) error {
	blocked := targets[0]
	d.step("draining %s (requester %q); the live view follows", strings.Join(targets, ", "), Requester)
	for _, node := range targets {
		nd := &v1alpha1.NodeDrain{
			ObjectMeta: metav1.ObjectMeta{Name: node},
			Spec: v1alpha1.NodeDrainSpec{NodeName: node, Mode: v1alpha1.ModeMaintenance,
				Requesters: []v1alpha1.Requester{{Name: Requester, Reason: "vacate demo"}}},
		}
		if err := d.cl.Create(ctx, nd); err != nil {
			return fmt.Errorf("requesting the drain of %s: %w", node, err)
		}
	}
	f := progress.NewFollower(d.out, clock.RealClock{}, targets)
	heldLongEnough := func(t *progress.Tracker) bool {
		for _, n := range t.Nodes() {
			if n.Name != blocked && !n.Ended() {
				return false
			}
		}
		m := t.Node(blocked).Met["PodDisruptionBudget "+ns+"/db"]
		return m != nil && m.Held(time.Now()) >= blockedFor
	}
	if err := f.Until(ctx, d.cl, 3*time.Minute, heldLongEnough); err != nil {
		return fmt.Errorf("following the drains: %w", err)
	}
	if f.Tracker.Done() {
		return fmt.Errorf("every drain ended, but the PDB %s/db should have held %s", ns, blocked)
	}

	d.step("%s is stuck. vacate explain %s says:", blocked, blocked)
	if err := d.explain(ctx, blocked); err != nil {
		return err
	}
	d.step("doing what it suggests: relaxing PDB %s/db to minAvailable 2", ns)
	if err := d.relaxPDB(ctx); err != nil {
		return err
	}
	if err := f.Until(ctx, d.cl, 3*time.Minute, nil); err != nil {
		return fmt.Errorf("following the drains: %w", err)
	}
	return d.finish(f.Tracker)
}

func (d *demo) explain(ctx context.Context, node string) error {
	nd := &v1alpha1.NodeDrain{}
	if err := d.cl.Get(ctx, types.NamespacedName{Name: node}, nd); err != nil {
		return fmt.Errorf("reading NodeDrain %s: %w", node, err)
	}
	in, err := explain.Read(ctx, d.c.Client, nd)
	if err != nil {
		return err
	}
	in.Now = time.Now()
	return explain.Explain(in).Write(indent(d.out), in.Now)
}

func (d *demo) relaxPDB(ctx context.Context) error {
	pdb, err := d.c.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "db", metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading PDB %s/db: %w", ns, err)
	}
	two := intstr.FromInt32(2)
	pdb.Spec.MinAvailable = &two
	if _, err := d.c.Client.PolicyV1().PodDisruptionBudgets(ns).Update(ctx, pdb, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("relaxing PDB %s/db: %w", ns, err)
	}
	return nil
}

// finish prints the summary and writes the report.
func (d *demo) finish(t *progress.Tracker) error {
	now := time.Now()
	d.step("summary")
	fmt.Fprintln(d.out)
	if err := t.Summary(d.out, now); err != nil {
		return err
	}
	fmt.Fprintln(d.out)
	drained, failed, _ := t.Counts()
	path, err := d.writeReport(t.Report(now))
	if err != nil {
		return err
	}
	d.step("%d of %d drained, %d failed; report: %s", drained, len(t.Nodes()), failed, path)
	if failed > 0 {
		return fmt.Errorf("%d drain(s) failed", failed)
	}
	return nil
}

func (d *demo) writeReport(r progress.Report) (string, error) {
	dir := d.opts.ReportDir
	if dir == "" {
		cache, err := devcluster.CacheDir()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(cache, "demo")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating the report directory: %w", err)
	}
	path := filepath.Join(dir, "report-"+r.Finished.Format("20060102T150405Z")+".json")
	f, err := os.Create(path)
	if err != nil {
		return "", fmt.Errorf("creating the report: %w", err)
	}
	if err := r.WriteJSON(f); err != nil {
		f.Close()
		return "", fmt.Errorf("writing the report: %w", err)
	}
	return path, f.Close()
}

// keep leaves a vacate controller running against the kept cluster, as a
// detached `vacate-dev controller`, and says how to use the CLI on it.
func (d *demo) keep(ctx context.Context) error {
	exe, err := d.executable()
	if err != nil {
		return err
	}
	logPath := filepath.Join(d.c.Dir, "controller-kept.log")
	// The log's path names the cluster's directory, so `vacate-dev down`
	// finds and stops this process with the cluster's own.
	cmd := exec.Command(exe, "controller", "--name", ClusterName, "--log-file", logPath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the vacate controller: %w", err)
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	if err := devcluster.Attach(d.c.Dir, devcluster.ComponentState{Name: "vacate-controller", PID: pid, Binary: exe, Log: logPath}); err != nil {
		return fmt.Errorf("recording the vacate controller with the cluster: %w", err)
	}
	drained := d.drained(ctx)
	idle := d.idleNode(ctx, drained)
	fmt.Fprintf(d.out, `
The cluster keeps running, with a vacate controller (pid %d, log %s).
Try the CLI on it:
  export KUBECONFIG=%s
  vacate status -o wide
  vacate plan %s
  vacate drain %s --wait
  vacate explain %s
  vacate cancel %s --requester %s    # give back the nodes the demo drained
Stop it all with:
  vacate-dev down --name %s
`, pid, logPath, d.c.Kubeconfig, idle, idle, idle, strings.Join(drained, " "), Requester, ClusterName)
	return nil
}

// drained names the nodes the demo drained.
// idleNode is the node the kept cluster's hint drains: the first the demo
// did not drain, and one without a pod of the StatefulSet db if there is
// one. A StatefulSet's pod comes back under the name of the pod evicted,
// and the PDB's controller may count the new pod as disrupted (the old
// one's entry in status.disruptedPods) for up to two minutes: a drain of
// another db pod's node would wait that long for the PDB.
func (d *demo) idleNode(ctx context.Context, drained []string) string {
	pods := &corev1.PodList{}
	hasDB := map[string]bool{}
	if err := d.cl.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{devcluster.AppLabel: "db"}); err == nil {
		for _, p := range pods.Items {
			hasDB[p.Spec.NodeName] = true
		}
	}
	idle := ""
	for i := 0; i < d.opts.Nodes; i++ {
		n := fmt.Sprintf("node-%d", i)
		switch {
		case slices.Contains(drained, n):
		case !hasDB[n]:
			return n
		case idle == "":
			idle = n
		}
	}
	if idle == "" {
		idle = "node-0"
	}
	return idle
}

func (d *demo) drained(ctx context.Context) []string {
	list := &v1alpha1.NodeDrainList{}
	if err := d.cl.List(ctx, list); err != nil {
		return nil
	}
	names := []string{}
	for _, nd := range list.Items {
		names = append(names, nd.Name)
	}
	sort.Strings(names)
	return names
}

// printNodes shows each node's zone and the pods it runs, by workload.
func printNodes(ctx context.Context, out io.Writer, cs kubernetes.Interface, pods []corev1.Pod) error {
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	perNode := map[string]map[string]int{}
	for _, p := range pods {
		if perNode[p.Spec.NodeName] == nil {
			perNode[p.Spec.NodeName] = map[string]int{}
		}
		perNode[p.Spec.NodeName][p.Labels[devcluster.AppLabel]]++
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tZONE\tREADY\tPODS")
	for _, n := range nodes.Items {
		apps := perNode[n.Name]
		names := make([]string, 0, len(apps))
		total := 0
		for app, k := range apps {
			names = append(names, fmt.Sprintf("%s×%d", app, k))
			total += k
		}
		sort.Strings(names)
		fmt.Fprintf(tw, "%s\t%s\t%t\t%d: %s\n", n.Name, n.Labels[devcluster.ZoneLabel], devcluster.NodeReady(&n), total, strings.Join(names, " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	return nil
}

// indent prefixes lines so they read as detail.
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
