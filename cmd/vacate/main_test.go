package main

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// devOnly are the packages of the development tools and of the controller:
// the vacate users install must not carry them (cmd/vacate-dev does).
var devOnly = []string{
	"github.com/vacate-dev/vacate/internal/controller",
	"github.com/vacate-dev/vacate/internal/operator",
	"github.com/vacate-dev/vacate/internal/devcluster",
	"github.com/vacate-dev/vacate/internal/devcli",
	"github.com/vacate-dev/vacate/internal/demo",
	"github.com/vacate-dev/vacate/examples",
}

// maxPluginBytes bounds the kubectl plugin users download.
const maxPluginBytes = 40 << 20

// TestUserCLIHasNoDevelopmentCode: neither vacate nor internal/cli depends
// on the controller, the dev cluster, the demo or the reference workloads.
func TestUserCLIHasNoDevelopmentCode(t *testing.T) {
	for _, pkg := range []string{".", "../../internal/cli"} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if slices.ContainsFunc(devOnly, func(p string) bool { return dep == p || strings.HasPrefix(dep, p+"/") }) {
				t.Errorf("%s depends on %s, a development or controller package", pkg, dep)
			}
		}
	}
}

// TestPluginArchiveIsSmallAndUserOnly builds the kubectl plugin archive for
// this platform as `make dist` does: it holds kubectl-vacate and the
// license only, and the binary is under 40 MB.
func TestPluginArchiveIsSmallAndUserOnly(t *testing.T) {
	out := t.TempDir()
	platform := runtime.GOOS + "/" + runtime.GOARCH
	dist := exec.Command("go", "run", "./hack/dist", "--version", "test", "--out", out, "--platforms", platform)
	dist.Dir = filepath.Join("..", "..")
	if b, err := dist.CombinedOutput(); err != nil {
		t.Fatalf("hack/dist: %v\n%s", err, b)
	}
	f, err := os.Open(filepath.Join(out, fmt.Sprintf("kubectl-vacate_test_%s_%s.tar.gz", runtime.GOOS, runtime.GOARCH)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	sizes := map[string]int64{}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		sizes[h.Name] = h.Size
	}
	if len(sizes) != 2 || sizes["LICENSE"] == 0 || sizes["kubectl-vacate"] == 0 {
		t.Fatalf("the archive holds %v, want kubectl-vacate and LICENSE", sizes)
	}
	t.Logf("kubectl-vacate for %s: %.1f MB", platform, float64(sizes["kubectl-vacate"])/(1<<20))
	if sizes["kubectl-vacate"] >= maxPluginBytes {
		t.Errorf("kubectl-vacate is %d bytes, want under %d (40 MB)", sizes["kubectl-vacate"], maxPluginBytes)
	}
}
