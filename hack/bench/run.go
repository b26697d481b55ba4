package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/operator"
)

// figures are what one run measured; docs/performance.md defines each.
type figures struct {
	wall            float64 // seconds, from the drain's start to the last pod gone
	podsEmptied     int
	evictions       int // accepted, by the drainer
	evictionsPerPod float64
	violations      int
	requests        int // the drainer's, in the drain's time
	requestsPerPod  float64
	topRequests     string
	eventWrites     int     // the drainer's creates and patches of events, in the drain's time
	cpu             float64 // the drainer's CPU seconds in the drain's time
	cpuPerEviction  float64 // ms
	idleCPU         float64 // cores: the controller's CPU before the drain, with nothing to do
	cpuAboveIdle    float64 // ms per eviction, less the idle rate over the drain's time
	rss             float64 // MiB
	idleMean        float64 // % of wall time, mean over PDBs with waiting pods
	idleMax         float64 // % of wall time, worst PDB
	allowP50        float64 // ms from a PDB allowing a disruption to the drainer's next eviction
	allowP95        float64
	callP50         float64 // ms the API server took to answer an accepted eviction
	callP95         float64
	firstP50        float64 // ms from a NodeDrain's creation to its first eviction
	firstP95        float64
	firstN          int
}

func (f figures) summary() string {
	if f.firstN > 0 {
		return fmt.Sprintf("first eviction p50 %.0f ms, p95 %.0f ms over %d drains; %d requests; CPU %.2f s; peak RSS %.1f MiB",
			f.firstP50, f.firstP95, f.firstN, f.requests, f.cpu, f.rss)
	}
	return fmt.Sprintf("wall %.1f s; %d evictions for %d pods; %d PDB violations; %.2f requests/pod (%s); %d event writes (%.1f%% of %d requests); CPU %.2f s; RSS %.1f MiB; idle budget mean %.1f%% max %.1f%%; allow->evict p50 %.0f ms p95 %.0f ms",
		f.wall, f.evictions, f.podsEmptied, f.violations, f.requestsPerPod, f.topRequests, f.eventWrites, share(f.eventWrites, f.requests), f.requests,
		f.cpu, f.rss, f.idleMean, f.idleMax, f.allowP50, f.allowP95)
}

// runOnce starts a fresh cluster from the recipe, drains with d and measures.
// A failed run's cluster directory (logs, audit log) is kept and named in
// the error; with -keep, every run's is.
func (b *bench) runOnce(ctx context.Context, d driver) (_ figures, err error) {
	dir, err := os.MkdirTemp("", "vacate-bench-")
	if err != nil {
		return figures{}, err
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w (logs kept in %s)", err, dir)
			return
		}
		if b.keep {
			fmt.Fprintf(b.out, "cluster directory kept: %s\n", dir)
			return
		}
		_ = os.RemoveAll(dir)
	}()
	opts := b.clusterOptions(dir)
	began := time.Now()
	c, err := devcluster.Up(ctx, opts)
	if err != nil {
		return figures{}, err
	}
	defer c.Stop()
	e, err := b.prepare(ctx, c)
	if err != nil {
		return figures{}, err
	}
	fmt.Fprintf(b.out, "[%s] cluster and workload ready in %s; draining %d nodes\n", d.name, time.Since(began).Round(time.Second), len(e.targets))
	idle := math.NaN()
	if d.policy != nil {
		p, err := d.policy(e)
		if err != nil {
			return figures{}, err
		}
		if err := e.cl.Create(ctx, p); err != nil {
			return figures{}, fmt.Errorf("creating DrainPolicy: %w", err)
		}
		if e.ctrl, err = startController(ctx, e); err != nil {
			return figures{}, err
		}
		defer e.ctrl.stop()
		if !d.first { // the first-eviction row reports no CPU per eviction
			if idle, err = idleCPU(e.ctrl, 5*time.Second, 10*time.Second); err != nil {
				return figures{}, err
			}
		}
	}
	return b.measureDrain(ctx, e, d, idle, dir)
}

// clusterOptions are the dev cluster's options for a bench in dir: the
// drainers' reads audited, kwok's parallelism and kube-controller-manager's
// and kube-scheduler's QPS from the flags.
func (b *bench) clusterOptions(dir string) devcluster.Options {
	opts := devcluster.Options{Name: "bench", Dir: dir, AuditReadsOf: []string{controllerUser, kubectlUser, tightUser},
		KwokParallelism: b.kwokPar}
	opts.ExtraArgs = map[string][]string{}
	if b.kcmQPS > 0 {
		opts.ExtraArgs[devcluster.KubeControllerManager] = []string{
			fmt.Sprintf("--kube-api-qps=%d", b.kcmQPS), fmt.Sprintf("--kube-api-burst=%d", 2*b.kcmQPS)}
	}
	if b.schedQPS > 0 {
		opts.ExtraArgs[devcluster.KubeScheduler] = []string{
			fmt.Sprintf("--kube-api-qps=%d", b.schedQPS), fmt.Sprintf("--kube-api-burst=%d", 2*b.schedQPS)}
	}
	return opts
}

// measureDrain drains e.targets with d, with vacate-controller (if d uses
// it) already running and idle its CPU rate before, and measures the drain;
// with -keep, it writes the timeline and events into dir.
func (b *bench) measureDrain(ctx context.Context, e *env, d driver, idle float64, dir string) (figures, error) {
	rec, err := record(ctx, e.c.Client, e.targets)
	if err != nil {
		return figures{}, err
	}
	defer rec.close()
	waiters, err := rec.initial()
	if err != nil {
		return figures{}, err
	}
	start := time.Now()
	u, err := d.drain(ctx, e)
	if err != nil {
		return figures{}, err
	}
	end := time.Now()
	if !d.first { // the first-eviction row undoes its drains: pods come back
		if end, err = rec.waitEmpty(ctx, 10*time.Minute); err != nil {
			return figures{}, err
		}
	}
	time.Sleep(time.Second) // the audit log is written as requests complete; let the last lines land
	reqs, err := readAudit(e.c.AuditLog)
	if err != nil {
		return figures{}, err
	}
	f := measureRun(d, rec, waiters, reqs, u, start, end)
	printTimeline(b.out, rec, waiters, reqs, d.user, start, end)
	f.idleCPU, f.cpuAboveIdle = idle, math.NaN()
	if u.seconds > 0 && f.evictions > 0 && !math.IsNaN(idle) {
		f.cpuAboveIdle = (u.cpu - idle*u.seconds) * 1000 / float64(f.evictions)
	}
	if b.keep {
		dumpTimeline(filepath.Join(dir, "timeline.json"), rec, waiters, start, end)
		dumpEvents(ctx, filepath.Join(dir, "events.txt"), e.c.Client)
	}
	return f, nil
}

// dumpEvents writes the events vacate-controller reported, by reason, and
// each one, for a look afterwards.
func dumpEvents(ctx context.Context, path string, cs kubernetes.Interface) {
	list, err := cs.EventsV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		_ = os.WriteFile(path, []byte(err.Error()+"\n"), 0o644)
		return
	}
	byReason := map[string]int{}
	var lines []string
	for _, ev := range list.Items {
		if ev.ReportingController != "vacate-controller" {
			continue
		}
		n := 1
		if ev.Series != nil {
			n = int(ev.Series.Count)
		}
		byReason[ev.Reason] += n
		lines = append(lines, fmt.Sprintf("%s %s %s/%s x%d: %s", ev.EventTime.Format(time.RFC3339Nano), ev.Reason,
			ev.Regarding.Kind, ev.Regarding.Name, n, ev.Note))
	}
	sort.Strings(lines)
	var out strings.Builder
	for reason, n := range byReason {
		fmt.Fprintf(&out, "%6d %s\n", n, reason)
	}
	out.WriteString("\n" + strings.Join(lines, "\n") + "\n")
	_ = os.WriteFile(path, []byte(out.String()), 0o644)
}

// dumpTimeline writes what the run measured from, for a look afterwards.
func dumpTimeline(path string, rec *recorder, waiters []waiter, start, end time.Time) {
	states, cordoned, _ := rec.snapshot()
	type st struct {
		At                                  time.Time
		Allowed, Healthy, Desired, Expected int32
	}
	type wt struct {
		Pod         string
		PDBs        []string
		From, Until time.Time
	}
	out := struct {
		Start, End time.Time
		Cordoned   map[string]time.Time
		PDBs       map[string][]st
		Waiters    []wt
	}{Start: start, End: end, Cordoned: cordoned, PDBs: map[string][]st{}}
	for k, ss := range states {
		for _, s := range ss {
			out.PDBs[k] = append(out.PDBs[k], st{s.at, s.allowed, s.healthy, s.desired, s.expected})
		}
	}
	for _, w := range waiters {
		out.Waiters = append(out.Waiters, wt{w.pod, w.pdbs, w.from, w.until})
	}
	b, _ := json.MarshalIndent(out, "", " ")
	_ = os.WriteFile(path, b, 0o644)
}

// prepare installs the CRDs, the users and the recipe's workload.
func (b *bench) prepare(ctx context.Context, c *devcluster.Cluster) (*env, error) {
	if err := devcluster.InstallCRDs(ctx, c.RESTConfig); err != nil {
		return nil, err
	}
	kcs, err := users(ctx, c)
	if err != nil {
		return nil, err
	}
	names, err := setup(ctx, c.Client, b.r)
	if err != nil {
		return nil, err
	}
	n, err := b.r.drainCount()
	if err != nil {
		return nil, err
	}
	e, err := b.envOf(c, names, kcs)
	if err != nil {
		return nil, err
	}
	e.targets = names[:n]
	return e, nil
}

// envOf is the environment of a cluster whose nodes and users are set up:
// a client of vacate's kinds, and the cluster's kubectl.
func (b *bench) envOf(c *devcluster.Cluster, names []string, kcs map[string]string) (*env, error) {
	scheme, err := operator.Scheme()
	if err != nil {
		return nil, err
	}
	cl, err := client.New(c.RESTConfig, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	bins := b.bins
	bins.kubectl = c.Binaries[devcluster.Kubectl]
	return &env{c: c, cl: cl, r: b.r, nodes: names, kubeconfigs: kcs, bins: bins}, nil
}

// measureRun turns what the run recorded into figures.
func measureRun(d driver, rec *recorder, waiters []waiter, reqs []request, u usage, start, end time.Time) figures {
	mine := byUser(reqs, d.user, start, end.Add(time.Second))
	f := figures{wall: end.Sub(start).Seconds(), podsEmptied: len(waiters), requests: len(mine), cpu: u.cpu, rss: u.rss}
	f.topRequests = topCounts(countBy(mine), 3)
	f.eventWrites = eventWrites(mine)
	if f.rss == 0 {
		f.rss = math.NaN()
	}
	var evictions []evictionAt
	var calls []time.Duration
	evictedAt := map[string]time.Time{}
	for _, r := range mine {
		if r.eviction() && r.accepted() {
			f.evictions++
			calls = append(calls, r.done.Sub(r.received))
			key := r.namespace + "/" + r.name
			evictions = append(evictions, evictionAt{pod: key, at: r.done})
			if _, ok := evictedAt[key]; !ok {
				evictedAt[key] = r.done
			}
		}
	}
	if first := firstEvictionDelays(reqs, adminUser); len(first) > 0 && d.first {
		ms := millis(first)
		f.firstN, f.firstP50, f.firstP95 = len(ms), percentile(ms, 50), percentile(ms, 95)
	}
	div := func(a, b float64) float64 {
		if b == 0 {
			return math.NaN()
		}
		return a / b
	}
	states, cordoned, nodeOf := rec.snapshot()
	for i := range waiters {
		waiters[i].from = cordoned[nodeOf[waiters[i].pod]]
		waiters[i].until = evictedAt[waiters[i].pod]
	}
	f.violations = violations(states, start, end)
	f.callP50, f.callP95 = percentile(millis(calls), 50), percentile(millis(calls), 95)
	f.cpuPerEviction = div(f.cpu*1000, float64(f.evictions))
	if d.first {
		return f
	}
	f.evictionsPerPod = div(float64(f.evictions), float64(f.podsEmptied))
	f.requestsPerPod = div(float64(f.requests), float64(f.podsEmptied))
	use := measureBudgets(states, waiters, evictions, start, end)
	var idle []float64
	for _, v := range use.idle {
		idle = append(idle, 100*v.Seconds()/f.wall)
	}
	f.idleMean, f.idleMax = math.NaN(), math.NaN()
	if len(idle) > 0 {
		sum := 0.0
		for _, v := range idle {
			sum += v
		}
		f.idleMean, f.idleMax = sum/float64(len(idle)), percentile(idle, 100)
	}
	delays := millis(use.delays)
	f.allowP50, f.allowP95 = percentile(delays, 50), percentile(delays, 95)
	return f
}

// topCounts renders the n largest counts, "create pods/eviction 120, ...".
func topCounts(m map[string]int, n int) string {
	type kv struct {
		k string
		v int
	}
	var all []kv
	for k, v := range m {
		all = append(all, kv{k, v})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v > all[j].v || (all[i].v == all[j].v && all[i].k < all[j].k) })
	s := ""
	for i, e := range all {
		if i == n {
			break
		}
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %d", e.k, e.v)
	}
	return s
}
