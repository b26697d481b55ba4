package testutil

import (
	"os"
	"os/exec"
	"testing"
)

// BuildProgram builds the Go program pkg (an import path, or a directory
// relative to the test's) into the file out, and returns out. It builds as
// releases are built (CGO_ENABLED=0, -trimpath: internal/image, hack/dist):
// the tests then run the binaries users run, and share the build cache
// with `make images`, whose amd64 build would otherwise compile every
// dependency once more.
func BuildProgram(t testing.TB, pkg, out string) string {
	t.Helper()
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", pkg, err, b)
	}
	return out
}
