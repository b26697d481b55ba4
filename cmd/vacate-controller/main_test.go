package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// tzdataSymbol is a symbol only the time/tzdata package brings into a
// binary: its init, which registers the embedded zone database with the
// time package.
const tzdataSymbol = "time/tzdata.init"

// TestEmbedsTimeZoneData builds the controller binary and checks its symbol
// table for time/tzdata: maintenance windows name time zones, and a minimal
// container image has no /usr/share/zoneinfo, so without the embedded data
// time.LoadLocation fails there and no window can be read.
func TestEmbedsTimeZoneData(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the controller binary")
	}
	bin := filepath.Join(t.TempDir(), "vacate-controller")
	testutil.BuildProgram(t, ".", bin)
	out, err := exec.Command("go", "tool", "nm", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool nm: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), tzdataSymbol) {
		t.Fatalf("vacate-controller has no %s in its symbol table: time zone data is not embedded (import _ \"time/tzdata\" in main.go)", tzdataSymbol)
	}
}

// TestVersionFlag runs the binary the tests build (stamped with
// testutil.ProgramVersion, as a release is with its own) with --version.
func TestVersionFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the controller binary")
	}
	bin := testutil.BuildProgram(t, ".", filepath.Join(t.TempDir(), "vacate-controller"))
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("vacate-controller --version: %v\n%s", err, out)
	}
	if want := "vacate-controller " + testutil.ProgramVersion; !strings.HasPrefix(string(out), want) {
		t.Errorf("vacate-controller --version printed %q, want it to start with %q", out, want)
	}
}
