package monitoring

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/agent/app"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/doubles/logindtest"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/operator"
	"github.com/vacate-dev/vacate/internal/requests"
	"github.com/vacate-dev/vacate/internal/schedule"
	"github.com/vacate-dev/vacate/pkg/evacuation"
)

// scrapeTimeout bounds the wait for every metric to be served once the
// scenario is in place: the state metrics follow the cache, which follows
// the cluster within a second.
const scrapeTimeout = time.Minute

// targetLabels are labels Prometheus adds when it scrapes (the
// ServiceMonitor's and PodMonitor's), which no /metrics serves.
var targetLabels = []string{"job", "instance", "namespace", "pod", "service", "endpoint", "container"}

// wanted is a metric an expression reads, and where the expression is.
type wanted struct {
	where string
	sel   selector
}

// TestMetricsServed: every metric the dashboard and the alerts read is
// served by a real vacate-controller on the dev cluster while it drains a
// node whose pods a PodDisruptionBudget and an evacuation hold, with a
// second drain queued behind it and a deleted node held by the finalizer
// vacate.dev/drain; and every agent metric by a real vacate-agent that
// saw a reboot through logind and held it until its node was Drained. The
// label names their selectors match on are served too.
func TestMetricsServed(t *testing.T) {
	start := time.Now()
	var ctrlWant, agentWant []wanted
	for _, p := range parseAll(t) {
		for _, s := range selectors(p.node) {
			w := wanted{p.where, s}
			if strings.HasPrefix(s.name, agentPrefix) || (s.matcher != nil && strings.HasPrefix(s.matcher.Value, agentPrefix)) {
				agentWant = append(agentWant, w)
			} else {
				ctrlWant = append(ctrlWant, w)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	c := testenv.Start(t)
	t.Logf("dev cluster up after %s", sinceStart(start))
	addr := testutil.FreeAddr(t)
	cl := testenv.Controller(t, c, func(o *operator.Options) { o.MetricsAddr = addr })

	drainBlockedAndQueued(t, c, cl)
	t.Logf("scenario ready after %s", sinceStart(start))
	served := waitServed(t, "vacate-controller", "http://"+addr+"/metrics", ctrlWant, false)

	agentAddr := runAgentThroughReboot(t, c)
	agentServed := waitServed(t, "vacate-agent", "http://"+agentAddr+"/metrics", agentWant, true)

	read, agentRead := families(served, ctrlWant), families(agentServed, agentWant)
	t.Logf("%d selectors read %d metric families, all served: %d of the %d vacate-controller serves, %d of the %d vacate-agent serves; %s in all",
		len(ctrlWant)+len(agentWant), len(read)+len(agentRead), len(read), len(served), len(agentRead), len(agentServed), sinceStart(start))
	t.Logf("vacate-controller: %s", strings.Join(read, " "))
	t.Logf("vacate-agent: %s", strings.Join(agentRead, " "))
}

// drainBlockedAndQueued sets the scene: a policy of one drain at a time
// with timeouts.drain and onNodeDelete Drain; a node whose drain evicts
// one pod and is then held by a PDB that allows no disruption and by an
// evacuation in progress; a second drain that waits for the slot; and the
// second node deleted, held by the finalizer.
func drainBlockedAndQueued(t *testing.T, c *devcluster.Cluster, cl client.Client) {
	t.Helper()
	ctx := testenv.Context(t)
	cs := c.Client
	pool := map[string]string{"vacate.dev/test": "monitoring"}
	create(t, cl, &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "monitoring"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: pool},
		Triggers:     v1alpha1.Triggers{OnNodeDelete: "Drain"},
		Concurrency:  v1alpha1.Concurrency{MaxParallelNodes: ptr.To(intstr.FromInt32(1))},
		Timeouts:     v1alpha1.Timeouts{Drain: &metav1.Duration{Duration: time.Hour}},
	}})
	nodes := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "mon", Count: 3, Labels: pool})
	target, queued := nodes[0], nodes[1]
	ns := testenv.Namespace(t, c)

	t.Logf("on %s: web (2 pods, PDB maxUnavailable 0), store (protected by EvacuationProvider store) and free", target)
	for app, replicas := range map[string]int32{"web": 2, "store": 1, "free": 1} {
		d := devcluster.Deployment(ns, app, replicas)
		// Replacements wait for the node rather than land elsewhere.
		d.Spec.Template.Spec.NodeSelector = map[string]string{devcluster.HostnameLabel: target}
		if _, err := cs.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, devcluster.PDB(ns, "web", "web", "", "0"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.WaitForPodsReady(ctx, cs, ns, labels.Everything(), 4, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.WaitForPDB(ctx, cs, ns, "web", 2, time.Minute); err != nil {
		t.Fatal(err)
	}
	create(t, cl, &v1alpha1.EvacuationProvider{ObjectMeta: metav1.ObjectMeta{Name: "store"}, Spec: v1alpha1.EvacuationProviderSpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{devcluster.AppLabel: "store"}},
	}})
	testenv.RunManager(t, c, func(mgr ctrl.Manager) error {
		r := &evacuation.Runner{Client: mgr.GetClient(), Name: "store", Provider: copying{}, Heartbeat: time.Second}
		return r.SetupWithManager(mgr)
	})

	request(t, cl, target)
	testenv.WaitForDrain(t, cl, target, "blocked by the PDB and the evacuation, the free pod evicted", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		reasons := map[string]bool{}
		for _, b := range nd.Status.Blockers {
			reasons[b.Reason] = true
		}
		blocked := meta.IsStatusConditionTrue(nd.Status.Conditions, v1alpha1.ConditionBlocked)
		return blocked && reasons[v1alpha1.BlockerEvacuation] && len(reasons) >= 2 && nd.Status.Evicted >= 1 &&
			len(nd.Status.Hooks) == 1 && nd.Status.Hooks[0].Phase == string(v1alpha1.EvacuationInProgress)
	}, testenv.DescribeDrain)

	t.Logf("%s requested: it waits for the slot; then deleted, it is held by %s", queued, v1alpha1.FinalizerDrain)
	request(t, cl, queued)
	testenv.WaitForDrain(t, cl, queued, "waiting for the slot", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionAdmitted)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == schedule.WaitingForSlot
	}, testenv.DescribeDrain)
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, queued, metav1.GetOptions{})
		return err == nil && controllerutil.ContainsFinalizer(n, v1alpha1.FinalizerDrain), nil
	})
	if err != nil {
		t.Fatalf("the finalizer %s never came on node %s: %v", v1alpha1.FinalizerDrain, queued, err)
	}
	if err := cs.CoreV1().Nodes().Delete(ctx, queued, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// copying is an evacuation provider that is always still copying.
type copying struct{}

func (copying) Evacuate(_ context.Context, node string, _ v1alpha1.DrainMode) (evacuation.Progress, error) {
	return evacuation.Progress{Remaining: 42, Message: "copying replicas off " + node}, nil
}

func (copying) Cancel(context.Context, string) (evacuation.Progress, error) {
	return evacuation.Progress{Done: true, Message: "nothing was moved"}, nil
}

// runAgentThroughReboot runs vacate-agent (its app, in this process) on a
// node of its own against a stand-in logind that allows less delay than
// the agent wants (a problem it reports), emits a reboot, and waits until
// the agent releases its lock: the node is Drained and the notice done.
// It returns the agent's metrics address.
func runAgentThroughReboot(t *testing.T, c *devcluster.Cluster) string {
	t.Helper()
	node := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "monagent", Count: 1})[0]
	bus := logindtest.StartBus(t)
	ld := logindtest.StartConfig(t, bus, logindtest.Config{InhibitDelayMax: time.Minute})
	addr := testutil.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, app.Options{Kubeconfig: c.Kubeconfig, Node: node, Logind: true, DBusAddress: bus,
			ShutdownWant: 2 * time.Minute, PoweroffMode: string(v1alpha1.ModeDecommission), Cloud: app.CloudNone,
			AWSRebalance: "cordon", AzureFreeze: "cordon", MetricsAddr: addr}, logr.Discard())
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("vacate-agent: %v", err)
		}
	})
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer wcancel()
	if err := ld.WaitHeld(wctx, 1); err != nil {
		t.Fatalf("the agent holds no delay lock: %v", err)
	}
	t.Logf("a reboot of %s: the agent holds it until the node is Drained", node)
	ld.EmitPrepareForShutdown(true, "reboot")
	if err := ld.WaitReleased(wctx); err != nil {
		t.Fatalf("the agent never released its lock: %v", err)
	}
	return addr
}

// waitServed scrapes url until every wanted metric is served, with the
// label names its selector matches on, and fails the test naming the
// panels and alerts whose metrics are missing if that does not happen in
// time. It returns the families served last.
func waitServed(t *testing.T, who, url string, want []wanted, agent bool) map[string]*dto.MetricFamily {
	t.Helper()
	var fams map[string]*dto.MetricFamily
	var missing []string
	var scrapeErr error
	_ = wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, scrapeTimeout, true, func(context.Context) (bool, error) {
		got, err := scrape(url)
		if scrapeErr = err; err != nil {
			return false, nil
		}
		fams, missing = got, missingFrom(got, want, agent)
		return len(missing) == 0, nil
	})
	if fams == nil {
		t.Fatalf("scraping %s at %s: %v", who, url, scrapeErr)
	}
	for _, m := range missing {
		t.Errorf("%s does not serve what it reads: %s", who, m)
	}
	return fams
}

// missingFrom says, for each wanted metric that fams lack (or whose
// selector matches on a label its series lack), which and where.
func missingFrom(fams map[string]*dto.MetricFamily, want []wanted, agent bool) []string {
	var out []string
	for _, w := range want {
		names := namesMatching(fams, w.sel)
		if len(names) == 0 {
			out = append(out, fmt.Sprintf("%s: no metric %s", w.where, w.sel))
			continue
		}
		for _, l := range w.sel.labels {
			if slices.Contains(targetLabels, l) || (agent && l == "node") {
				continue
			}
			if !slices.ContainsFunc(names, func(n string) bool { return hasLabel(fams, n, l) }) {
				out = append(out, fmt.Sprintf("%s: %s has no label %s", w.where, w.sel, l))
			}
		}
	}
	return out
}

// namesMatching are the served series names a selector reads: a
// histogram's or summary's _bucket, _sum and _count series belong to its
// family.
func namesMatching(fams map[string]*dto.MetricFamily, s selector) []string {
	var out []string
	for _, series := range servedSeriesNames(fams) {
		if (s.matcher == nil && series == s.name) || (s.matcher != nil && s.matcher.Matches(series)) {
			out = append(out, series)
		}
	}
	return out
}

// servedSeriesNames are the names of every series fams serve.
func servedSeriesNames(fams map[string]*dto.MetricFamily) []string {
	var out []string
	for name, f := range fams {
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			out = append(out, name+"_bucket", name+"_sum", name+"_count")
		case dto.MetricType_SUMMARY:
			out = append(out, name, name+"_sum", name+"_count")
		default:
			out = append(out, name)
		}
	}
	return out
}

// hasLabel reports whether some series of the family of series name
// carries label l (le on a histogram's buckets, quantile on a summary's).
func hasLabel(fams map[string]*dto.MetricFamily, name, l string) bool {
	f := fams[name]
	if f == nil {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		f = fams[base]
		if f == nil {
			return false
		}
		if (l == "le" && strings.HasSuffix(name, "_bucket")) || (l == "quantile" && f.GetType() == dto.MetricType_SUMMARY) {
			return true
		}
	}
	for _, m := range f.GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == l {
				return true
			}
		}
	}
	return false
}

// scrape reads url's Prometheus text exposition.
func scrape(url string) (map[string]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("%s: %s", resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// families are the metric families the wanted selectors read in fams (a
// histogram's _bucket, _sum and _count are one family).
func families(fams map[string]*dto.MetricFamily, want []wanted) []string {
	set := map[string]bool{}
	for _, w := range want {
		for _, series := range namesMatching(fams, w.sel) {
			if fams[series] == nil {
				series = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(series, "_bucket"), "_sum"), "_count")
			}
			set[series] = true
		}
	}
	return keys(set)
}

// create creates obj and deletes it when the test ends.
func create(t *testing.T, cl client.Client, obj client.Object) {
	t.Helper()
	if err := cl.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %s: %v", obj.GetName(), err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), obj) })
}

// request asks for node's drain, as the CLI does, and withdraws it when
// the test ends.
func request(t *testing.T, cl client.Client, node string) {
	t.Helper()
	if err := requests.Apply(testenv.Context(t), cl, node, v1alpha1.Requester{Name: "cli:monitoring", Reason: "dashboard test"}, "", ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cl.Delete(context.Background(), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: node}})
	})
}
