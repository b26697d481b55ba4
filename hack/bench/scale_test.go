package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func TestParseSizes(t *testing.T) {
	got, err := parseSizes("1000, 10000,30000")
	if err != nil || len(got) != 3 || got[0] != 1000 || got[2] != 30000 {
		t.Errorf("parseSizes = %v, %v", got, err)
	}
	for _, bad := range []string{"", "1000,1000", "10000,1000", "0", "x"} {
		if _, err := parseSizes(bad); err == nil {
			t.Errorf("parseSizes(%q): no error", bad)
		}
	}
}

// TestWorkloadFor grows a workload in steps: the objects already made stay,
// the pods added get the recipe's split, and the total is what was asked.
func TestWorkloadFor(t *testing.T) {
	r := recipe{perDeploy: 45, stsSize: 30}
	w := workloadFor(r, workload{}, 1000)
	if w.pods() != 1000 || w.deploys != 20 {
		t.Fatalf("1,000 pods: %d Deployments, StatefulSets %v (%d pods)", w.deploys, w.sts, w.pods())
	}
	w2 := workloadFor(r, w, 10000)
	if w2.pods() != 10000 {
		t.Errorf("grown to 10,000: %d pods", w2.pods())
	}
	if w2.deploys < w.deploys || len(w2.sts) < len(w.sts) {
		t.Errorf("growing dropped objects: %+v from %+v", w2, w)
	}
	for i, n := range w.sts {
		if w2.sts[i] != n {
			t.Errorf("StatefulSet db-%d resized from %d to %d", i, n, w2.sts[i])
		}
	}
	if behind := float64(w2.deploys*45) / 10000; behind < 0.9 {
		t.Errorf("only %.0f%% of the pods behind PDBs", 100*behind)
	}
	if w3 := workloadFor(r, w2, 5000); w3.pods() != w2.pods() {
		t.Errorf("shrinking is not growing: %d pods from %d", w3.pods(), w2.pods())
	}
	one := r
	one.pods = 480
	d, sts := one.split()
	if w := workloadFor(r, workload{}, 480); w.deploys != d || len(w.sts) != len(sts) {
		t.Errorf("from nothing, workloadFor differs from the recipe's split: %+v against %d, %v", w, d, sts)
	}
}

func TestNumJSON(t *testing.T) {
	in := []num{num(math.NaN()), 1.5, 0}
	b, err := json.Marshal(in)
	if err != nil || string(b) != "[null,1.5,0]" {
		t.Fatalf("Marshal = %s, %v", b, err)
	}
	var out []num
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if !math.IsNaN(float64(out[0])) || out[1] != 1.5 || out[2] != 0 {
		t.Errorf("round trip = %v", out)
	}
}

func TestScaleTargets(t *testing.T) {
	phase := func(pods int, idleRSS, idleCPU, peak, cpu float64) scalePhase {
		return scalePhase{Pods: pods, IdleRSS: num(idleRSS), IdleCPU: num(idleCPU), Drains: []scaleDrain{
			{Driver: vacateParallel, Figures: map[string]num{figPeakRSS: num(peak), figCPUPerEviction: num(cpu)}}}}
	}
	lines := strings.Join(scaleTargets([]scalePhase{phase(1000, 40, 0.002, 50, 3), phase(30000, 200, 0.02, 260, 6)}), "\n")
	for _, want := range []string{
		"at 30000 pods <= 100 MB: 272.6 MB (260.0 MiB): NO",
		"within 20% of the 1000-pod figure (50.0 MiB): +420%: NO",
		"40.0 -> 200.0 MiB, +400%: NO",
		"at 1000 pods < 1% of a core: 0.20%: yes",
		"at 30000 pods < 1% of a core: 2.00%: NO",
		"3.0 -> 6.0 ms, +100%: NO",
	} {
		if !strings.Contains(lines, want) {
			t.Errorf("targets lack %q:\n%s", want, lines)
		}
	}
	flat := strings.Join(scaleTargets([]scalePhase{phase(1000, 40, 0.002, 50, 3), phase(30000, 44, 0.003, 55, 3.3)}), "\n")
	if strings.Contains(flat, "NO") {
		t.Errorf("a flat line fails a target:\n%s", flat)
	}
}

func TestParseStatusKB(t *testing.T) {
	status := "Name:\tvacate-controller\nVmPeak:\t 1300000 kB\nVmHWM:\t   98304 kB\nVmRSS:\t   65536 kB\n"
	for field, want := range map[string]int64{"VmHWM": 98304, "VmRSS": 65536} {
		got, err := parseStatusKB(strings.NewReader(status), field)
		if err != nil || got != want {
			t.Errorf("%s = %d, %v; want %d", field, got, err, want)
		}
	}
	if _, err := parseStatusKB(strings.NewReader(status), "VmSwap"); err == nil {
		t.Error("a missing field: no error")
	}
}
