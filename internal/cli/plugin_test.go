package cli

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	// kubectl completes the plugin's commands, flags and the cluster's
	// names through kubectl_complete-vacate beside it (as `make install`,
	// the archives and krew put it).
	helper, err := os.ReadFile(filepath.Join("..", "..", "config", "plugin", "kubectl_complete-vacate"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kubectl_complete-vacate"), helper, 0o755); err != nil {
		t.Fatal(err)
	}
	policy := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "completion-fast"}}
	if err := testenv.DrainClient(t, c).Create(testenv.Context(t), policy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testenv.DrainClient(t, c).Delete(context.Background(), policy) })
	for _, cc := range []struct {
		args []string
		want string
	}{
		{[]string{"vacate", "dr"}, "drain"},
		{[]string{"vacate", "drain", "--mode", ""}, "Decommission"},
		{[]string{"vacate", "drain", "--policy", "completion-"}, "completion-fast"},
	} {
		out := kubectl(append([]string{"__complete"}, cc.args...)...)
		var offered []string // each line: a candidate, a tab and its description
		for _, line := range strings.Split(out, "\n") {
			offered = append(offered, strings.SplitN(line, "\t", 2)[0])
		}
		if !slices.Contains(offered, cc.want) {
			t.Errorf("kubectl __complete %s offers\n%s\nwant %q", strings.Join(cc.args, " "), out, cc.want)
		}
	}
	// Through kubectl, with the kubeconfig kubectl was given, and with
	// kubectl's -n typed by habit, before or after the command.
	for _, args := range [][]string{{"vacate", "status"}, {"vacate", "-n", "kube-system", "status"}, {"vacate", "status", "--namespace", "default"}} {
		if out := kubectl(args...); !strings.Contains(out, "NODE") && !strings.Contains(out, "No drains") {
			t.Errorf("kubectl %s printed:\n%s", strings.Join(args, " "), out)
		}
	}
}
