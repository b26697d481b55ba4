package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// TestKubectlPlugin installs the binary as kubectl-vacate, as `make install`
// does, and runs it through the real kubectl: kubectl finds it, and its help
// speaks of "kubectl vacate".
func TestKubectlPlugin(t *testing.T) {
	c := testenv.Start(t)
	testenv.Controller(t, c)
	dir := filepath.Dir(testutil.ProgramAs(t, "github.com/vacate-dev/vacate/cmd/vacate", "kubectl-vacate"))
	kubectl := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(c.Binaries[devcluster.Kubectl], args...)
		cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "KUBECONFIG="+c.Kubeconfig)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if out := kubectl("plugin", "list"); !strings.Contains(out, filepath.Join(dir, "kubectl-vacate")) {
		t.Errorf("kubectl plugin list does not find kubectl-vacate:\n%s", out)
	}
	out := kubectl("vacate", "drain", "--help")
	for _, want := range []string{"kubectl vacate drain NODE... | --selector SELECTOR [flags]", "  kubectl vacate drain node-1 --wait"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl vacate drain --help lacks %q:\n%s", want, out)
		}
	}
	// Through kubectl, with the kubeconfig kubectl was given.
	if out := kubectl("vacate", "status"); !strings.Contains(out, "NODE") && !strings.Contains(out, "No drains") {
		t.Errorf("kubectl vacate status printed:\n%s", out)
	}
}
