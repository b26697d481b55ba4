package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/dev/traffic"
	"github.com/vacate-dev/vacate/internal/progress"
)

// TestMain: the demo's web servers are this test binary.
func TestMain(m *testing.M) {
	traffic.MaybeServe()
	code := m.Run()
	testutil.RemovePrograms()
	os.Exit(code)
}

// TestDemo runs the whole demo on its own cluster, with --keep (one run
// is most of what the package costs), and checks what it prints, the
// report it writes, that the kept cluster has a working vacate controller
// (the CLI drains a node on it), and that `vacate dev down` (the user CLI
// handing over to vacate-dev beside it) stops everything, the controller
// included. TestDemoInterruptedCleansUp covers the run without --keep
// stopping its cluster.
func TestDemo(t *testing.T) {
	clusters := t.TempDir()
	t.Setenv(devcluster.EnvClustersDir, clusters)
	dir := filepath.Join(clusters, ClusterName)
	t.Cleanup(func() { _, _ = devcluster.Down(dir) })
	reports := t.TempDir()
	bin, dev := buildTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := Run(ctx, &out, Options{Keep: true, ReportDir: reports, Executable: dev}); err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out.String())
	}
	got := out.String()
	t.Logf("demo output:\n%s", got)
	if n := len(regexp.MustCompile(`(?m)^node-\d\s+zone-[ab]\s+true\s+\d+: `).FindAllString(got, -1)); n != 8 {
		t.Errorf("demo shows %d Ready nodes, want 8", n)
	}
	for _, want := range []string{
		"29 pods are Running",
		"is stuck. vacate explain",
		"why:  PDB shop/db allows 0 disruptions even with all 3 of its pods healthy: minAvailable 3 never allows an eviction",
		"do:   relax the PDB (kubectl edit pdb -n shop db; now minAvailable 3)",
		"relaxing PDB shop/db to minAvailable 2",
		"NODE    RESULT   EVICTED  TOOK  BLOCKERS MET",
		"3 of 3 drained, 0 failed; report: " + reports,
		"The cluster keeps running, with a vacate controller",
		"volumes after the drains: 6 of 6 with every replica's checksum right, 0 still on node-",
		"gets a spot preemption notice",
		"before its deadline (requester agent:gcp-preempted, mode Decommission): the VM may go",
		"the notice is withdrawn, and vacate-agent gives node-",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	// The endpoint-aware scene shows both rows and says what the gate did
	// (internal/dev/servedrain's test holds it to 0 failed requests).
	for _, row := range []string{`kubectl drain:\s+\d+ of\s+\d+ requests failed`, `vacate, readiness gate:\s+\d+ of\s+\d+ requests failed`} {
		if !regexp.MustCompile(row).MatchString(got) {
			t.Errorf("demo output lacks the endpoint-aware row %q", row)
		}
	}
	// The broker on a drained node handed every message to its peers.
	m := regexp.MustCompile(`messages after the drains: broker-0 holds (\d+), broker-1 holds (\d+), broker-2 holds (\d+) \(3000 published\)`).FindStringSubmatch(got)
	if m == nil || (m[1] != "0" && m[2] != "0" && m[3] != "0") {
		t.Errorf("no broker was emptied by the drain: %v", m)
	} else {
		total := 0
		for _, n := range m[1:] {
			v, _ := strconv.Atoi(n)
			total += v
		}
		if total != 3000 {
			t.Errorf("brokers hold %d messages after the drain, 3000 were published", total)
		}
	}
	for _, want := range []string{`Evacuation pod/shop/broker-`, `Evacuation node-`} {
		if !strings.Contains(got, want) {
			t.Errorf("the progress lines do not show evacuations (%q)", want)
		}
	}
	// Not a terminal: progress comes as lines, one per change.
	if !regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ node-\d Drained \d+/\d+ "in \d+s"$`).MatchString(got) {
		t.Error("demo output lacks the line-mode Drained lines")
	}

	files, err := filepath.Glob(filepath.Join(reports, "report-*.json"))
	if err != nil || len(files) != 1 {
		t.Fatalf("want one report file in %s, got %v (%v)", reports, files, err)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var r progress.Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, b)
	}
	heldByDB := 0
	for _, n := range r.Nodes {
		if n.Result != "Drained" || n.Evicted != n.Total || n.Total == 0 {
			t.Errorf("report: node %s %s %d/%d, want Drained with every pod evicted", n.Node, n.Result, n.Evicted, n.Total)
		}
		for _, b := range n.BlockersMet {
			if b.Holder == "PodDisruptionBudget shop/db" {
				heldByDB++
				if b.HeldSeconds < blockedFor.Seconds() || len(b.Pods) != 1 || b.Pods[0] != "shop/db-0" {
					t.Errorf("report: PDB shop/db held %v for %.1fs, want shop/db-0 for at least %s", b.Pods, b.HeldSeconds, blockedFor)
				}
			}
		}
	}
	if len(r.Nodes) != drains || heldByDB != 1 {
		t.Errorf("report has %d nodes (want %d), %d held by PDB shop/db (want 1)", len(r.Nodes), drains, heldByDB)
	}
	checkKept(t, bin, dir, got)
}

// buildTools builds vacate and vacate-dev (the program the demo runs its
// helper processes with) into one directory, as make build does, and
// returns their paths.
func buildTools(t *testing.T) (vacate, vacateDev string) {
	t.Helper()
	return testutil.Program(t, "github.com/vacate-dev/vacate/cmd/vacate"), testutil.Program(t, "github.com/vacate-dev/vacate/cmd/vacate-dev")
}

// checkKept: after a run with --keep, the cluster in dir has a vacate
// controller, the CLI (bin) drains a node on it as the output says, and
// `vacate dev down` stops everything, the controller included.
func checkKept(t *testing.T, bin, dir, got string) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^  export KUBECONFIG=(\S+)$`).FindStringSubmatch(got)
	idle := regexp.MustCompile(`(?m)^  vacate drain (node-\d) --wait$`).FindStringSubmatch(got)
	if m == nil || idle == nil {
		t.Fatalf("demo --keep does not say how to use the cluster:\n%s", got)
	}
	vacate := func(args ...string) (string, error) {
		cmd := exec.Command(bin, append(args, "--kubeconfig", m[1])...)
		b, err := cmd.CombinedOutput()
		t.Logf("$ vacate %s\n%s", strings.Join(args, " "), b)
		return string(b), err
	}
	if _, err := vacate("drain", idle[1], "--wait", "--timeout", "1m"); err != nil {
		t.Fatalf("drain on the kept cluster: %v", err)
	}
	if _, err := vacate("cancel", idle[1]); err != nil {
		t.Fatalf("cancel on the kept cluster: %v", err)
	}
	controllers := 0
	for _, pid := range devcluster.ProcessesUsing(dir) {
		if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.Contains(string(cmdline), "vacate-dev\x00controller\x00") {
			controllers++
		}
	}
	if controllers != 1 {
		t.Errorf("%d kept controller processes, want 1", controllers)
	}
	down := exec.Command(bin, "dev", "down", "--name", ClusterName)
	if b, err := down.CombinedOutput(); err != nil {
		t.Fatalf("dev down: %v\n%s", err, b)
	}
	if pids := devcluster.ProcessesUsing(dir); len(pids) > 0 {
		t.Errorf("processes left after dev down: %v", pids)
	}
}

// TestDemoInterruptedCleansUp: a demo interrupted (Ctrl-C) once its cluster
// is up stops the cluster and everything it started, and says so.
func TestDemoInterruptedCleansUp(t *testing.T) {
	clusters := t.TempDir()
	t.Setenv(devcluster.EnvClustersDir, clusters)
	_, dev := buildTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	// Interrupted as the controller starts: the cluster is up.
	w := &interruptAt{w: &out, at: "starting the vacate controller", interrupt: cancel}
	err := Run(ctx, w, Options{ReportDir: t.TempDir(), Executable: dev})
	got := out.String()
	t.Logf("demo output:\n%s", got)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("an interrupted demo returned %v, want the interruption", err)
	}
	if !strings.Contains(got, "stopping the dev cluster") {
		t.Error("the interrupted demo does not say it stops the dev cluster")
	}
	if pids := devcluster.ProcessesUsing(filepath.Join(clusters, ClusterName)); len(pids) > 0 {
		t.Errorf("processes left running after the interrupted demo: %v", pids)
	}
}

// interruptAt writes to w and calls interrupt once what it wrote contains at.
type interruptAt struct {
	w         io.Writer
	at        string
	interrupt func()
	seen      strings.Builder
}

func (i *interruptAt) Write(p []byte) (int, error) {
	i.seen.Write(p)
	if i.interrupt != nil && strings.Contains(i.seen.String(), i.at) {
		i.interrupt()
		i.interrupt = nil
	}
	return i.w.Write(p)
}
