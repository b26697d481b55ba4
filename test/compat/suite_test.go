package compat

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// makeVar is the value of a `NAME := value` line of the Makefile, with
// make's $$ unescaped.
func makeVar(t *testing.T, makefile, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + `\s*:=\s*(.*)$`).FindStringSubmatch(makefile)
	if m == nil {
		t.Fatalf("the Makefile sets no %s", name)
	}
	return strings.ReplaceAll(strings.TrimSpace(m[1]), "$$", "$")
}

// testNames are the Test functions of the package in dir.
func testNames(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no tests in %s (%v)", dir, err)
	}
	re := regexp.MustCompile(`(?m)^func (Test\w+)\(t \*testing\.T\)`)
	var names []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			names = append(names, m[1])
		}
	}
	return names
}

// TestCompatRunCoversTheSuite keeps the Makefile's COMPAT_RUN honest: every
// test of test/rbac (each admission policy and RBAC rule is proven there)
// and of test/compat is in the compatibility suite, every test the pattern
// names by its full name exists, and the suite keeps a drain under PDBs, an
// Evacuation, a hook and the chart installing.
func TestCompatRunCoversTheSuite(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	run := makeVar(t, string(mk), "COMPAT_RUN")
	re, err := regexp.Compile(run)
	if err != nil {
		t.Fatalf("COMPAT_RUN %q: %v", run, err)
	}
	pkgs := strings.Fields(makeVar(t, string(mk), "COMPAT_PKGS"))
	all := map[string]bool{}
	for _, p := range pkgs {
		for _, n := range testNames(t, filepath.Join("../..", p)) {
			all[n] = true
		}
	}
	for _, whole := range []string{"test/rbac", "test/compat"} {
		for _, n := range testNames(t, filepath.Join("../..", whole)) {
			if !re.MatchString(n) {
				t.Errorf("%s of %s is not in COMPAT_RUN", n, whole)
			}
		}
	}
	for _, n := range regexp.MustCompile(`Test[A-Z]\w*`).FindAllString(run, -1) {
		if strings.HasSuffix(n, "Test") || !regexp.MustCompile(`\b`+n+`[|)]`).MatchString(run) {
			continue // a prefix, such as Test(Hook|...)
		}
		if !all[n] {
			t.Errorf("COMPAT_RUN names %s, which no package of COMPAT_PKGS (%v) has", n, pkgs)
		}
	}
	for what, n := range map[string]string{
		"a drain under PDBs, resumed after a kill": "TestResumeAfterKillMidEvictions",
		"an Evacuation":                     "TestResumeAfterKillMidEvacuation",
		"a hook verifying its caller":       "TestHookedDrainProvesItsCaller",
		"the chart installing and draining": "TestChartInstallDrainsAsItsServiceAccount",
		"a surge under a PDB":               "TestSurgeOneReplicaKeepsAPodReady",
	} {
		if !re.MatchString(n) {
			t.Errorf("the compatibility suite lacks %s (%s)", what, n)
		}
	}
}
