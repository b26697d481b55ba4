package main

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"
)

// driverResult is every run of one driver.
type driverResult struct {
	row    string
	driver driver
	runs   []figures
}

// figure is one line of the report: how to read it from a run.
type figure struct {
	name string
	unit string
	get  func(figures) float64
	prec int
}

// Figures the scale mode's plot and targets read by name.
const (
	figCPUPerEviction = "drainer CPU per eviction"
	figPeakRSS        = "drainer peak RSS"
)

// label is the figure's name with its unit, as the tables print it.
func (fg figure) label() string {
	if fg.unit == "" {
		return fg.name
	}
	return fg.name + " (" + fg.unit + ")"
}

var raceFigures = []figure{
	{"wall time", "s", func(f figures) float64 { return f.wall }, 1},
	{"pods emptied", "", func(f figures) float64 { return float64(f.podsEmptied) }, 0},
	{"pods emptied per second", "/s", func(f figures) float64 { return float64(f.podsEmptied) / f.wall }, 1},
	{"evictions accepted", "", func(f figures) float64 { return float64(f.evictions) }, 0},
	{"evictions per pod emptied", "", func(f figures) float64 { return f.evictionsPerPod }, 2},
	{"PDB violations", "", func(f figures) float64 { return float64(f.violations) }, 0},
	{"drainer API requests per pod emptied", "", func(f figures) float64 { return f.requestsPerPod }, 2},
	{"drainer event writes", "", func(f figures) float64 { return float64(f.eventWrites) }, 0},
	{"event writes, share of the drainer's requests", "%", func(f figures) float64 { return share(f.eventWrites, f.requests) }, 1},
	{"idle budget, mean over PDBs", "% of wall", func(f figures) float64 { return f.idleMean }, 1},
	{"idle budget, worst PDB", "% of wall", func(f figures) float64 { return f.idleMax }, 1},
	{"PDB allows -> next eviction p50", "ms", func(f figures) float64 { return f.allowP50 }, 0},
	{"PDB allows -> next eviction p95", "ms", func(f figures) float64 { return f.allowP95 }, 0},
	{"accepted eviction call p50", "ms", func(f figures) float64 { return f.callP50 }, 0},
	{"accepted eviction call p95", "ms", func(f figures) float64 { return f.callP95 }, 0},
	{"drainer CPU", "s", func(f figures) float64 { return f.cpu }, 2},
	{figCPUPerEviction, "ms", func(f figures) float64 { return f.cpuPerEviction }, 1},
	{"controller CPU idle before the drain", "cores", func(f figures) float64 { return f.idleCPU }, 3},
	{"controller CPU per eviction above idle", "ms", func(f figures) float64 { return f.cpuAboveIdle }, 1},
	{figPeakRSS, "MiB", func(f figures) float64 { return f.rss }, 1},
}

var firstFigures = []figure{
	{"first eviction p50", "ms", func(f figures) float64 { return f.firstP50 }, 0},
	{"first eviction p95", "ms", func(f figures) float64 { return f.firstP95 }, 0},
	{"drains measured", "", func(f figures) float64 { return float64(f.firstN) }, 0},
	{"controller CPU", "s", func(f figures) float64 { return f.cpu }, 2},
	{"controller peak RSS", "MiB", func(f figures) float64 { return f.rss }, 1},
}

// report prints, per row, each figure of each driver as min / median / max
// over its runs.
func report(out io.Writer, results []driverResult) {
	for i := 0; i < len(results); {
		j := i
		for j < len(results) && results[j].row == results[i].row {
			j++
		}
		printRow(out, results[i:j])
		i = j
	}
}

func printRow(out io.Writer, rs []driverResult) {
	figs := raceFigures
	if rs[0].driver.first {
		figs = firstFigures
	}
	fmt.Fprintf(out, "== %s (min / median / max over runs)\n", rs[0].row)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprint(tw, "FIGURE")
	for _, r := range rs {
		fmt.Fprintf(tw, "\t%s (%d runs)", r.driver.name, len(r.runs))
	}
	fmt.Fprintln(tw)
	for _, fg := range figs {
		fmt.Fprint(tw, fg.label())
		for _, r := range rs {
			xs := make([]float64, len(r.runs))
			for k, f := range r.runs {
				xs[k] = fg.get(f)
			}
			fmt.Fprintf(tw, "\t%s", formatSpread(spreadOf(xs), fg.prec))
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush()
	fmt.Fprintln(out)
}

// formatSpread renders "min / median / max", or one value when all agree,
// or "-" when nothing was measured.
func formatSpread(s spread, prec int) string {
	if math.IsNaN(s.median) {
		return "-"
	}
	if s.min == s.max {
		return fmt.Sprintf("%.*f", prec, s.min)
	}
	return fmt.Sprintf("%.*f / %.*f / %.*f", prec, s.min, prec, s.median, prec, s.max)
}

// Driver names the target check looks up.
const (
	vacateSerial   = "vacate maxParallelNodes=1"
	vacateParallel = "vacate maxParallelNodes=N"
	kubectlSerial  = "kubectl drain, one node after another"
	kubectlOne     = "kubectl drain n1 ... nN"
	kubectlMany    = "N kubectl drain at once"
	tightClient    = "tight client"
	vacateNoBatch  = "vacate maxParallelNodes=N, batchWindow 0s"
	firstDefault   = "first eviction, default batch window"
	firstZero      = "first eviction, batchWindow 0s"
)

// defaultBatchWindow is DrainPolicy's concurrency.batchWindow default.
const defaultBatchWindow = 2000.0 // ms

// checkTargets prints each target of issue 13 against the medians measured,
// met or not; a target whose drivers did not run is left out.
func checkTargets(out io.Writer, results []driverResult) {
	med := func(driver string, get func(figures) float64) float64 {
		for _, r := range results {
			if r.driver.name == driver {
				xs := make([]float64, len(r.runs))
				for i, f := range r.runs {
					xs[i] = get(f)
				}
				return spreadOf(xs).median
			}
		}
		return math.NaN()
	}
	wall := func(f figures) float64 { return f.wall }
	fmt.Fprintln(out, "== targets (medians)")
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tMEASURED\tMET")
	line := func(target string, measured float64, format string, met bool) {
		if math.IsNaN(measured) {
			return
		}
		fmt.Fprintf(tw, "%s\t"+format+"\t%s\n", target, measured, yesNo(met))
	}
	v := med(vacateParallel, wall)
	for _, other := range []string{kubectlOne, kubectlMany, tightClient} {
		o := med(other, wall)
		if !math.IsNaN(o) {
			line(fmt.Sprintf("%s wall <= %s wall (%.1f s)", vacateParallel, other, o), v, "%.1f s", v <= o)
		}
	}
	if nb, o := med(vacateNoBatch, wall), med(tightClient, wall); !math.IsNaN(o) {
		line(fmt.Sprintf("%s wall <= %s wall (%.1f s)", vacateNoBatch, tightClient, o), nb, "%.1f s", nb <= o)
	}
	if s, k := med(vacateSerial, wall), med(kubectlSerial, wall); !math.IsNaN(k) {
		line(fmt.Sprintf("%s wall <= kubectl one node after another (%.1f s)", vacateSerial, k), s, "%.1f s", s <= k)
	}
	for _, d := range []string{vacateSerial, vacateParallel} {
		line(d+": idle budget mean <= 5% of wall", med(d, func(f figures) float64 { return f.idleMean }), "%.1f%%", med(d, func(f figures) float64 { return f.idleMean }) <= 5)
		p50 := med(d, func(f figures) float64 { return f.allowP50 })
		line(d+": PDB allows -> eviction p50 <= 50 ms", p50, "%.0f ms", p50 <= 50)
		rq := med(d, func(f figures) float64 { return f.requestsPerPod })
		line(d+": controller requests per pod emptied <= 3", rq, "%.2f", rq <= 3)
		vi := med(d, func(f figures) float64 { return float64(f.violations) })
		line(d+": PDB violations = 0", vi, "%.0f", vi == 0)
		ep := med(d, func(f figures) float64 { return f.evictionsPerPod })
		line(d+": evictions per pod emptied = 1.00", ep, "%.2f", math.Abs(ep-1) < 0.005)
		rss := med(d, func(f figures) float64 { return f.rss })
		line(d+": controller peak RSS <= 100 MB (at 10,000 pods)", rss, "%.1f MiB", rss*1.048576 <= 100)
	}
	fd := med(firstDefault, func(f figures) float64 { return f.firstP50 })
	line(fmt.Sprintf("first eviction p50 <= batch window + 100 ms (%.0f ms)", defaultBatchWindow+100), fd, "%.0f ms", fd <= defaultBatchWindow+100)
	fz := med(firstZero, func(f figures) float64 { return f.firstP50 })
	line("first eviction p50, window 0s, <= 100 ms", fz, "%.0f ms", fz <= 100)
	_ = tw.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "NO"
}
