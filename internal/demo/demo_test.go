package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vacate-dev/vacate/internal/devcluster"
	"github.com/vacate-dev/vacate/internal/progress"
)

// TestDemoRunsAndCleansUp runs the whole demo on its own cluster and checks
// what it prints, the report it writes, and that it leaves nothing running.
func TestDemoRunsAndCleansUp(t *testing.T) {
	clusters := t.TempDir()
	t.Setenv(devcluster.EnvClustersDir, clusters)
	reports := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := Run(ctx, &out, Options{ReportDir: reports}); err != nil {
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
		"stopping the dev cluster",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("demo output lacks %q", want)
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
	if pids := devcluster.ProcessesUsing(filepath.Join(clusters, ClusterName)); len(pids) > 0 {
		t.Errorf("processes left running after the demo: %v", pids)
	}
}
