package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/vacate-dev/vacate/internal/dev/devcluster"
)

// scaleConfig is the scale mode (-scale): one cluster of -nodes nodes whose
// workload grows through sizes; at each size vacate-controller starts anew,
// is measured idle, then drains fresh nodes; at the last size kubectl and the
// tight client drain fresh nodes of their own too. Fresh clusters per run
// (the default mode) cost a setup of every pod per run, which at 30,000 pods
// on two cores is most of an hour.
type scaleConfig struct {
	sizes   []int         // Deployment and StatefulSet pods to grow to, in order
	settle  time.Duration // from the controller's caches synced to the idle window
	window  time.Duration // the idle window
	compare bool          // run the other drivers at the last size
	results string        // where to write the results as JSON ("" = nowhere)
	plot    string        // where to write the plot as PNG ("" = nowhere)
	before  string        // an earlier run's results, drawn dashed on the plot
	label   string        // this run's name on the plot, when before is set
	beforeL string        // the earlier run's
}

// num is a figure in the results file: NaN (not measured) is null.
type num float64

func (n num) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(n)) || math.IsInf(float64(n), 0) {
		return []byte("null"), nil
	}
	return []byte(strconv.FormatFloat(float64(n), 'g', -1, 64)), nil
}

func (n *num) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*n = num(math.NaN())
		return nil
	}
	v, err := strconv.ParseFloat(string(b), 64)
	*n = num(v)
	return err
}

// scalePhase is what one size measured.
type scalePhase struct {
	Pods        int     `json:"pods"`        // Deployment and StatefulSet pods
	ClusterPods int     `json:"clusterPods"` // with the DaemonSets' pods
	GrowSeconds float64 `json:"growSeconds"` // creating the pods added until all were ready
	// StartSeconds is from vacate-controller's start until it leads with
	// its caches synced and its workers started.
	StartSeconds float64 `json:"startSeconds"`
	StartPeakRSS num     `json:"startPeakRSS"` // MiB, VmHWM at the end of the idle window: the start's lists
	IdleRSS      num     `json:"idleRSS"`      // MiB, VmRSS at the end of the idle window
	IdleCPU      num     `json:"idleCPU"`      // cores, over the idle window
	// IdleNodeUpdates are the nodes' changes the API server sent a watch
	// during the idle window, per second: kwok's heartbeats, which every
	// watcher of nodes decodes.
	IdleNodeUpdates num `json:"idleNodeUpdates"`
	Drains          []scaleDrain
}

// scaleDrain is one drain of a phase: its driver and every figure of
// raceFigures by name.
type scaleDrain struct {
	Driver  string         `json:"driver"`
	Figures map[string]num `json:"figures"`
	f       figures
}

// figure returns a figure of the phase's drain by driver, NaN when it did
// not run.
func (ph scalePhase) figure(driver, name string) float64 {
	for _, d := range ph.Drains {
		if d.Driver == driver {
			if v, ok := d.Figures[name]; ok {
				return float64(v)
			}
		}
	}
	return math.NaN()
}

func newScaleDrain(driver string, f figures) scaleDrain {
	d := scaleDrain{Driver: driver, Figures: map[string]num{}, f: f}
	for _, fg := range raceFigures {
		d.Figures[fg.name] = num(fg.get(f))
	}
	return d
}

// parseSizes reads "1000,10000,30000": increasing positive counts.
func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("%q: want positive pod counts, comma separated", s)
		}
		if len(out) > 0 && v <= out[len(out)-1] {
			return nil, fmt.Errorf("%q: sizes must increase", s)
		}
		out = append(out, v)
	}
	return out, nil
}

// runScale grows one cluster through sc.sizes and measures at each size.
func (b *bench) runScale(ctx context.Context, sc scaleConfig) (err error) {
	drained, err := b.r.drainCount()
	if err != nil {
		return err
	}
	if need := drained * (len(sc.sizes) + 2); need > b.r.nodes {
		return fmt.Errorf("-drain %d at %d sizes and two more drivers needs %d fresh nodes; -nodes is %d", drained, len(sc.sizes), need, b.r.nodes)
	}
	all := allRows(drained, 0)
	vacate, _ := driverNamed(all, vacateParallel)
	others := []string{kubectlMany, tightClient}

	dir, err := os.MkdirTemp("", "vacate-bench-scale-")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil || b.keep {
			fmt.Fprintf(b.out, "cluster directory kept: %s\n", dir)
			return
		}
		_ = os.RemoveAll(dir)
	}()
	last := b.r
	last.pods = sc.sizes[len(sc.sizes)-1]
	fmt.Fprintf(b.out, "scale: %d nodes, pods %v, drain %d fresh nodes at each size; at the last size: %s\n", b.r.nodes, sc.sizes, drained, last)
	fmt.Fprintf(b.out, "vacate-controller flags: %s\n", strings.Join(controllerFlags("<its own user>", b.r.ctrlFlags), " "))
	began := time.Now()
	c, err := devcluster.Up(ctx, b.clusterOptions(dir))
	if err != nil {
		return err
	}
	defer c.Stop()
	e, err := b.scaleEnv(ctx, c)
	if err != nil {
		return err
	}
	fmt.Fprintf(b.out, "cluster up, %d nodes Ready in %s\n", len(e.nodes), time.Since(began).Round(time.Second))
	p, err := vacate.policy(&env{r: b.r, targets: make([]string, drained)})
	if err != nil {
		return err
	}
	if err := e.cl.Create(ctx, p); err != nil {
		return fmt.Errorf("creating DrainPolicy: %w", err)
	}
	fresh := e.nodes // nodes no drain has touched yet
	next := func() []string { t := fresh[:drained]; fresh = fresh[drained:]; return t }

	var have workload
	var phases []scalePhase
	for i, size := range sc.sizes {
		t0 := time.Now()
		if have, err = grow(ctx, c.Client, b.r, have, size); err != nil {
			return fmt.Errorf("growing to %d pods: %w", size, err)
		}
		ph := scalePhase{Pods: have.pods(), ClusterPods: have.pods() + b.r.daemonSets*b.r.nodes, GrowSeconds: time.Since(t0).Seconds()}
		fmt.Fprintf(b.out, "[%d pods] grown to %d pods (%d with DaemonSets') in %s; %d Deployments, %d StatefulSets\n",
			size, ph.Pods, ph.ClusterPods, time.Since(t0).Round(time.Second), have.deploys, len(have.sts))
		e.targets = next()
		if err := b.scaleVacate(ctx, e, vacate, sc, &ph, dir); err != nil {
			return fmt.Errorf("at %d pods: %w", size, err)
		}
		if sc.compare && i == len(sc.sizes)-1 {
			for _, name := range others {
				d, _ := driverNamed(all, name)
				if err := waitReady(ctx, c.Client, ph.ClusterPods, have.deploys, b.r); err != nil {
					return err
				}
				e.targets = next()
				fmt.Fprintf(b.out, "[%d pods] %s drains %s..%s\n", size, d.name, e.targets[0], e.targets[len(e.targets)-1])
				f, err := b.measureDrain(ctx, e, d, math.NaN(), dir)
				if err != nil {
					// A driver that gives up (kubectl drain exits on an
					// eviction the API server timed out) is reported, and
					// the others still run.
					if ctx.Err() != nil {
						return err
					}
					fmt.Fprintf(b.out, "[%d pods] %s failed: %v\n", size, d.name, err)
					continue
				}
				fmt.Fprintf(b.out, "[%d pods] %s: %s\n", size, d.name, f.summary())
				ph.Drains = append(ph.Drains, newScaleDrain(d.name, f))
			}
		}
		phases = append(phases, ph)
		// Written after every size: a run that fails later keeps these.
		if err := writeScaleOutputs(sc, phases); err != nil {
			return err
		}
	}
	fmt.Fprintf(b.out, "\nscale run took %s\n\n", time.Since(began).Round(time.Second))
	reportScale(b.out, phases)
	return nil
}

// plotOnly reads -scale-results and prints its report and draws -plot, for
// a results file written by an earlier run.
func plotOnly(out io.Writer, sc scaleConfig) error {
	b, err := os.ReadFile(sc.results)
	if err != nil {
		return err
	}
	var phases []scalePhase
	if err := json.Unmarshal(b, &phases); err != nil {
		return fmt.Errorf("reading %s: %w", sc.results, err)
	}
	reportScale(out, phases)
	sc.results = ""
	return writeScaleOutputs(sc, phases)
}

// scaleEnv installs the CRDs and users and creates the nodes.
func (b *bench) scaleEnv(ctx context.Context, c *devcluster.Cluster) (*env, error) {
	if err := devcluster.InstallCRDs(ctx, c.RESTConfig); err != nil {
		return nil, err
	}
	kcs, err := users(ctx, c)
	if err != nil {
		return nil, err
	}
	names, err := setupNodes(ctx, c.Client, b.r)
	if err != nil {
		return nil, err
	}
	return b.envOf(c, names, kcs)
}

// scaleVacate starts vacate-controller, measures it idle, has it drain
// e.targets, and stops it.
func (b *bench) scaleVacate(ctx context.Context, e *env, d driver, sc scaleConfig, ph *scalePhase, dir string) (err error) {
	t0 := time.Now()
	if e.ctrl, err = startController(ctx, e); err != nil {
		return err
	}
	defer func() {
		e.ctrl.stop()
		// Keep each size's log: the next start truncates it.
		_ = os.Rename(e.ctrl.log, strings.TrimSuffix(e.ctrl.log, ".log")+fmt.Sprintf("-%d.log", ph.Pods))
		e.ctrl = nil
	}()
	ph.StartSeconds = time.Since(t0).Seconds()
	updates := make(chan float64, 1)
	go func() { updates <- nodeUpdates(ctx, e.c.Client, sc.settle, sc.window) }()
	idle, err := idleCPU(e.ctrl, sc.settle, sc.window)
	if err != nil {
		return err
	}
	ph.IdleNodeUpdates = num(<-updates)
	pid := e.ctrl.pid()
	rss, err1 := currentRSS(pid)
	hwm, err2 := peakRSS(pid)
	if err := firstErr(err1, err2, resetPeakRSS(pid)); err != nil {
		return err
	}
	ph.IdleCPU, ph.IdleRSS, ph.StartPeakRSS = num(idle), num(float64(rss)/1024), num(float64(hwm)/1024)
	fmt.Fprintf(b.out, "[%d pods] vacate-controller synced in %.1f s; idle over %s: %.4f cores, RSS %.1f MiB (peak since its start %.1f MiB), %.1f node updates a second; draining %s..%s\n",
		ph.Pods, ph.StartSeconds, sc.window, idle, ph.IdleRSS, ph.StartPeakRSS, float64(ph.IdleNodeUpdates), e.targets[0], e.targets[len(e.targets)-1])
	// drainWithVacate reads VmHWM at the end: the peak since the reset.
	f, err := b.measureDrain(ctx, e, d, idle, dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(b.out, "[%d pods] %s: %s\n", ph.Pods, d.name, f.summary())
	ph.Drains = append(ph.Drains, newScaleDrain(d.name, f))
	return nil
}

// nodeUpdates counts, after settle, the changes of nodes a watch of them
// sees over window, per second; NaN if the watch failed.
func nodeUpdates(ctx context.Context, cs kubernetes.Interface, settle, window time.Duration) float64 {
	time.Sleep(settle)
	ctx, cancel := context.WithTimeout(ctx, window)
	defer cancel()
	w, err := cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return math.NaN()
	}
	defer w.Stop()
	n := 0
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return float64(n) / window.Seconds()
			}
			if ev.Type == watch.Modified {
				n++
			}
		case <-ctx.Done():
			return float64(n) / window.Seconds()
		}
	}
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// driverNamed finds a driver of the rows by name.
func driverNamed(rows []row, name string) (driver, bool) {
	for _, r := range rows {
		for _, d := range r.drivers {
			if d.name == name {
				return d, true
			}
		}
	}
	return driver{}, false
}

// reportScale prints a column per drain (vacate at every size, the others
// at the last), the controller's idle figures, and the targets of issue 45.
func reportScale(out io.Writer, phases []scalePhase) {
	type col struct {
		ph *scalePhase
		d  scaleDrain
	}
	var cols []col
	for i := range phases {
		for _, d := range phases[i].Drains {
			cols = append(cols, col{&phases[i], d})
		}
	}
	fmt.Fprintln(out, "== scale: one cluster grown; each column one drain of fresh nodes")
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprint(tw, "FIGURE")
	for _, c := range cols {
		fmt.Fprintf(tw, "\t%s @ %d pods", c.d.Driver, c.ph.Pods)
	}
	fmt.Fprintln(tw)
	phaseLine := func(name string, prec int, get func(*scalePhase) float64) {
		fmt.Fprint(tw, name)
		for _, c := range cols {
			v := math.NaN()
			if c.d.Driver == vacateParallel {
				v = get(c.ph)
			}
			fmt.Fprintf(tw, "\t%s", formatSpread(spreadOf([]float64{v}), prec))
		}
		fmt.Fprintln(tw)
	}
	phaseLine("cluster pods (with DaemonSets')", 0, func(ph *scalePhase) float64 { return float64(ph.ClusterPods) })
	phaseLine("grow to this size (s)", 0, func(ph *scalePhase) float64 { return ph.GrowSeconds })
	phaseLine("controller start to synced (s)", 1, func(ph *scalePhase) float64 { return ph.StartSeconds })
	phaseLine("controller RSS idle (MiB)", 1, func(ph *scalePhase) float64 { return float64(ph.IdleRSS) })
	phaseLine("controller peak RSS from start to idle (MiB)", 1, func(ph *scalePhase) float64 { return float64(ph.StartPeakRSS) })
	phaseLine("controller CPU idle (% of a core)", 2, func(ph *scalePhase) float64 { return 100 * float64(ph.IdleCPU) })
	phaseLine("node updates a second while idle", 1, func(ph *scalePhase) float64 { return float64(ph.IdleNodeUpdates) })
	for _, fg := range raceFigures {
		fmt.Fprint(tw, fg.label())
		for _, c := range cols {
			v, ok := c.d.Figures[fg.name]
			if !ok { // a results file without it
				v = num(math.NaN())
			}
			fmt.Fprintf(tw, "\t%s", formatSpread(spreadOf([]float64{float64(v)}), fg.prec))
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush()
	fmt.Fprintln(out)
	for _, l := range scaleTargets(phases) {
		fmt.Fprintln(out, l)
	}
}

// scaleTargets are the goals of issue 45, first size against last.
func scaleTargets(phases []scalePhase) []string {
	if len(phases) == 0 {
		return nil
	}
	lo, hi := phases[0], phases[len(phases)-1]
	within := func(a, b float64) bool { return math.Abs(b-a) <= 0.2*a }
	peakLo, peakHi := lo.figure(vacateParallel, figPeakRSS), hi.figure(vacateParallel, figPeakRSS)
	cpuLo, cpuHi := lo.figure(vacateParallel, figCPUPerEviction), hi.figure(vacateParallel, figCPUPerEviction)
	out := []string{"== targets (issue 45)",
		fmt.Sprintf("controller peak RSS during the drain at %d pods <= 100 MB: %.1f MB (%.1f MiB): %s",
			hi.Pods, peakHi*1.048576, peakHi, yesNo(peakHi*1.048576 <= 100)),
		fmt.Sprintf("  and within 20%% of the %d-pod figure (%.1f MiB): %+.0f%%: %s",
			lo.Pods, peakLo, 100*(peakHi/peakLo-1), yesNo(within(peakLo, peakHi))),
		fmt.Sprintf("controller idle RSS within 20%% from %d to %d pods: %.1f -> %.1f MiB, %+.0f%%: %s",
			lo.Pods, hi.Pods, float64(lo.IdleRSS), float64(hi.IdleRSS), 100*(float64(hi.IdleRSS)/float64(lo.IdleRSS)-1),
			yesNo(within(float64(lo.IdleRSS), float64(hi.IdleRSS)))),
	}
	for _, ph := range phases {
		out = append(out, fmt.Sprintf("controller idle CPU at %d pods < 1%% of a core: %.2f%%: %s",
			ph.Pods, 100*float64(ph.IdleCPU), yesNo(float64(ph.IdleCPU) < 0.01)))
	}
	out = append(out, fmt.Sprintf("controller CPU per eviction within 20%% from %d to %d pods: %.1f -> %.1f ms, %+.0f%%: %s",
		lo.Pods, hi.Pods, cpuLo, cpuHi, 100*(cpuHi/cpuLo-1), yesNo(within(cpuLo, cpuHi))))
	return out
}

// writeScaleOutputs writes the results file and the plot.
func writeScaleOutputs(sc scaleConfig, phases []scalePhase) error {
	if sc.results != "" {
		b, err := json.MarshalIndent(phases, "", "  ")
		if err != nil {
			return err
		}
		if err := writeFile(sc.results, append(b, '\n')); err != nil {
			return err
		}
	}
	if sc.plot == "" {
		return nil
	}
	var before []scalePhase
	if sc.before != "" {
		b, err := os.ReadFile(sc.before)
		if err != nil {
			return fmt.Errorf("reading -plot-before: %w", err)
		}
		if err := json.Unmarshal(b, &before); err != nil {
			return fmt.Errorf("reading -plot-before %s: %w", sc.before, err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(sc.plot), 0o755); err != nil {
		return err
	}
	f, err := os.Create(sc.plot)
	if err != nil {
		return err
	}
	if err := writePlot(f, "cluster pods", scalePanels(phases, before, sc.label, sc.beforeL)); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func writeFile(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
