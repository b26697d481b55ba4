package demo

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vacate-dev/vacate/internal/devcluster"
)

// TestDemoRunsAndCleansUp runs the whole demo on its own cluster and checks
// what it prints and that it leaves nothing running.
func TestDemoRunsAndCleansUp(t *testing.T) {
	clusters := t.TempDir()
	t.Setenv(devcluster.EnvClustersDir, clusters)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := Run(ctx, &out, Options{}); err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out.String())
	}
	got := out.String()
	t.Logf("demo output:\n%s", got)
	if n := len(regexp.MustCompile(`(?m)^node-\d\s+zone-[ab]\s+true\s+\d+$`).FindAllString(got, -1)); n != 5 {
		t.Errorf("demo shows %d Ready nodes, want 5", n)
	}
	for _, want := range []string{"all 14 pods are Running", "PDB web allows 1 disruption(s) (6 of 6 healthy)", "stopping the dev cluster"} {
		if !strings.Contains(got, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	if n := len(regexp.MustCompile(`(?m)\s127\.\d+\.\d+\.\d+\s+Running$`).FindAllString(got, -1)); n != 14 {
		t.Errorf("demo lists %d running pods with loopback IPs, want 14", n)
	}
	if pids := devcluster.ProcessesUsing(filepath.Join(clusters, ClusterName)); len(pids) > 0 {
		t.Errorf("processes left running after the demo: %v", pids)
	}
}
