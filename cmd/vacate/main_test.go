package main

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// devOnly are the packages of the development tools, the tests and
// benchmarks, and of the other programs (the controller, the agent,
// vacate-hook): the vacate users install must not carry them (cmd/vacate-dev
// carries the development tools).
var devOnly = append([]string{
	// the controller and its webhook
	"github.com/vacate-dev/vacate/internal/controller",
	"github.com/vacate-dev/vacate/internal/operator",
	"github.com/vacate-dev/vacate/internal/webhook",
	"github.com/vacate-dev/vacate/internal/serving",
	"github.com/vacate-dev/vacate/internal/eviction",
	"github.com/vacate-dev/vacate/internal/metrics",
	// the other programs
	"github.com/vacate-dev/vacate/internal/agent",
	"github.com/vacate-dev/vacate/internal/sidecar",
}, devTooling...)

// maxPluginBytes bounds the kubectl plugin users download.
const maxPluginBytes = 40 << 20

// devTooling are the packages no shipped program may carry: development,
// tests, benchmarks and examples. internal/dev holds every package that
// only they use.
var devTooling = []string{
	"github.com/vacate-dev/vacate/internal/dev",
	"github.com/vacate-dev/vacate/examples",
	"github.com/vacate-dev/vacate/hack",
	"github.com/vacate-dev/vacate/test",
}

// testHarnesses are test harnesses no shipped program may link: they start
// control planes, write certificates, fake clusters or run tests.
// (k8s.io/client-go/testing is not one of them: client-go's own typed
// clients link it, through k8s.io/client-go/gentype.)
var testHarnesses = []string{
	"testing",
	"sigs.k8s.io/controller-runtime/pkg/envtest",
	"sigs.k8s.io/controller-runtime/pkg/internal/testing",
	"sigs.k8s.io/controller-runtime/pkg/client/fake",
	"k8s.io/client-go/kubernetes/fake",
	"k8s.io/client-go/dynamic/fake",
}

// TestUserCLIHasNoDevelopmentCode: neither vacate nor internal/cli depends
// on a devOnly package, no other shipped program (the controller, the
// agent, vacate-hook) on development tooling, and none on a test harness.
// Each devOnly entry and each test harness must exist (a renamed package
// would otherwise drop out of the guard unnoticed).
func TestUserCLIHasNoDevelopmentCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-e", "-f", "{{.ImportPath}} {{if .Error}}missing{{end}}", "../../...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list ../../...: %v\n%s", err, out)
	}
	for _, p := range devOnly {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(p) + `(/\S*)? $`).Match(out) {
			t.Errorf("devOnly names %s, which is no package of this module (nor a folder of one)", p)
		}
	}
	for _, h := range testHarnesses {
		if out, err := exec.Command("go", "list", h+"/...").Output(); err != nil || len(strings.Fields(string(out))) == 0 {
			t.Errorf("testHarnesses names %s, which is no package (nor a folder of packages) this module can import: %v", h, err)
		}
	}
	userBanned := append(slices.Clone(devOnly), testHarnesses...)
	programBanned := append(slices.Clone(devTooling), testHarnesses...)
	for _, tc := range []struct {
		pkg    string
		banned []string
	}{
		{".", userBanned},
		{"../../internal/cli", userBanned},
		{"../vacate-controller", programBanned},
		{"../vacate-agent", programBanned},
		{"../vacate-hook", programBanned},
	} {
		out, err := exec.Command("go", "list", "-deps", tc.pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", tc.pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if slices.ContainsFunc(tc.banned, func(p string) bool { return dep == p || strings.HasPrefix(dep, p+"/") }) {
				t.Errorf("%s depends on %s, which it must not ship", tc.pkg, dep)
			}
		}
	}
}

// TestPluginArchiveIsSmallAndUserOnly builds the kubectl plugin archive for
// this platform as `make dist` does: it holds kubectl-vacate and the
// license and the completion helper only, and the binary is under 40 MB.
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
	if len(sizes) != 3 || sizes["LICENSE"] == 0 || sizes["kubectl-vacate"] == 0 || sizes["kubectl_complete-vacate"] == 0 {
		t.Fatalf("the archive holds %v, want kubectl-vacate, kubectl_complete-vacate and LICENSE", sizes)
	}
	mb := float64(sizes["kubectl-vacate"]) / 1e6
	t.Logf("kubectl-vacate for %s: %.1f MB (%d bytes)", platform, mb, sizes["kubectl-vacate"])
	if sizes["kubectl-vacate"] >= maxPluginBytes {
		t.Errorf("kubectl-vacate is %d bytes, want under %d (40 MiB)", sizes["kubectl-vacate"], maxPluginBytes)
	}
	if platform == "linux/amd64" {
		checkDocumentedSize(t, mb)
	}
}

// documentedSize is the figure docs/cli.md gives for the plugin.
var documentedSize = regexp.MustCompile(`(\d+\.\d) MB for linux/amd64`)

// checkDocumentedSize (issue 44): docs/cli.md states the size of the
// plugin for linux/amd64 within 1 MB of what make dist builds.
func checkDocumentedSize(t *testing.T, mb float64) {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := documentedSize.FindAllSubmatch(doc, -1)
	if len(m) != 1 {
		t.Fatalf("docs/cli.md states the plugin's size %d times (%q), want once", len(m), documentedSize)
	}
	stated, err := strconv.ParseFloat(string(m[0][1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(stated-mb) > 1 {
		t.Errorf("docs/cli.md says the plugin is %.1f MB for linux/amd64; make dist builds %.1f MB: correct the figure", stated, mb)
	}
}
