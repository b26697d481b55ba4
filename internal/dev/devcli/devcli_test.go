package devcli

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/spf13/cobra"

	"github.com/vacate-dev/vacate/internal/cli"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/evictionrequest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemovePrograms()
	os.Exit(code)
}

// run calls vacate-dev in process and returns its exit code and outputs.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Main(args, Streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
	return code, out.String(), errOut.String()
}

// vacate calls the user CLI in process and returns its exit code and
// outputs.
func vacate(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := cli.Main(args, Streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
	return code, out.String(), errOut.String()
}

// buildDev builds vacate-dev once for the package.
func buildDev(t *testing.T) string {
	t.Helper()
	return testutil.Program(t, "github.com/vacate-dev/vacate/cmd/"+cli.DevProgram)
}

// TestDevUpStatusEnvDown drives vacate-dev as a person would: up prints a
// kubeconfig that kubectl can use, status and env describe the cluster, and
// down leaves no process behind.
func TestDevUpStatusEnvDown(t *testing.T) {
	clusters := t.TempDir()
	t.Setenv(devcluster.EnvClustersDir, clusters)
	dir := filepath.Join(clusters, "clitest")
	t.Cleanup(func() { _, _ = devcluster.Down(dir) })

	kubeconfig := devUp(t, dir)
	// The processes outlive the command (it detached them).
	st, err := devcluster.ReadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Components) != 5 || !st.Running() {
		t.Fatalf("want 5 running components, state has %d (running=%t)", len(st.Components), st.Running())
	}
	checkKubectlSeesANode(t, st, kubeconfig)

	// The CLI on a cluster without vacate says what to install.
	code, _, errOut := vacate(t, "status", "--kubeconfig", kubeconfig)
	if code != cli.ExitError || !strings.Contains(errOut, "vacate is not installed in the cluster at") || !strings.Contains(errOut, "vacate manifests crds | kubectl apply -f -") {
		t.Errorf("vacate status without vacate installed: exit %d %q, want exit 1 saying what to install", code, errOut)
	}
	checkDevControllerDrains(t, clusters, dir, kubeconfig)
	checkDevStatus(t)

	code, out, _ := run(t, "env", "--name", "clitest")
	if code != cli.ExitOK || out != "export KUBECONFIG="+kubeconfig+"\n" {
		t.Errorf("dev env = %d %q, want 0 %q", code, out, "export KUBECONFIG="+kubeconfig+"\n")
	}
	code, _, errOut = run(t, "up", "--name", "clitest")
	if code != cli.ExitError || !strings.Contains(errOut, "already running") {
		t.Errorf("second dev up = %d %q, want exit 1 saying it is already running", code, errOut)
	}
	checkDevDown(t, dir)
}

// devUp runs 'vacate-dev up' for the cluster clitest, whose directory is
// dir, and returns the kubeconfig it printed, which must be in dir.
func devUp(t *testing.T, dir string) string {
	t.Helper()
	code, out, errOut := run(t, "up", "--name", "clitest")
	if code != cli.ExitOK {
		t.Fatalf("dev up exited %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	t.Logf("dev up:\n%s", out)
	m := regexp.MustCompile(`(?m)^kubeconfig: (\S+)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("dev up printed no kubeconfig path:\n%s", out)
	}
	kubeconfig := m[1]
	if !strings.HasPrefix(kubeconfig, dir) {
		t.Errorf("kubeconfig %s is not in the cluster directory %s", kubeconfig, dir)
	}
	return kubeconfig
}

// checkKubectlSeesANode creates a node through the kubeconfig and checks it
// shows Ready in `kubectl get nodes`, run with the cluster's own kubectl.
func checkKubectlSeesANode(t *testing.T, st devcluster.State, kubeconfig string) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	if _, err := cs.CoreV1().Nodes().Create(ctx, devcluster.SimulatedNode("cli-node-0", "zone-a", 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := devcluster.WaitForNodesReady(ctx, cs, []string{"cli-node-0"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	kubectl := exec.Command(st.Binaries[devcluster.Kubectl], "get", "nodes")
	kubectl.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	got, err := kubectl.CombinedOutput()
	if err != nil {
		t.Fatalf("KUBECONFIG=%s kubectl get nodes: %v\n%s", kubeconfig, err, got)
	}
	t.Logf("kubectl get nodes:\n%s", got)
	if !regexp.MustCompile(`cli-node-0\s+Ready`).Match(got) {
		t.Errorf("kubectl get nodes does not show cli-node-0 Ready:\n%s", got)
	}
}

// checkDevControllerDrains runs `vacate-dev controller`, which installs the
// CRDs and runs the controller until stopped, and checks the CLI then
// drains the node and the controller stops on SIGINT. It sets
// process-wide loggers, so it runs as its own process, as people run it.
func checkDevControllerDrains(t *testing.T, clusters, dir, kubeconfig string) {
	t.Helper()
	bin := buildDev(t)
	ctl := exec.Command(bin, "controller", "--name", "clitest", "--log-file", filepath.Join(dir, "controller.log"))
	ctl.Env = append(os.Environ(), devcluster.EnvClustersDir+"="+clusters)
	var ctlErr bytes.Buffer
	ctl.Stderr = &ctlErr
	if err := ctl.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctl.Process.Kill() })
	deadline := time.Now().Add(time.Minute)
	for code, _, _ := vacate(t, "status", "--kubeconfig", kubeconfig); code != cli.ExitOK && time.Now().Before(deadline); code, _, _ = vacate(t, "status", "--kubeconfig", kubeconfig) {
		time.Sleep(200 * time.Millisecond)
	}
	if code, out, errOut := vacate(t, "drain", "cli-node-0", "--wait", "--timeout", "1m", "--kubeconfig", kubeconfig); code != cli.ExitOK || !strings.Contains(out, "cli-node-0 Drained 0/0") {
		t.Errorf("drain with dev controller: exit %d\n%s%s", code, out, errOut)
	}
	if err := ctl.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := ctl.Wait(); err != nil {
		t.Errorf("dev controller exited with %v: %s", err, ctlErr.String())
	}
}

// checkDevStatus checks `vacate-dev status` shows every component running
// and the API server ready.
func checkDevStatus(t *testing.T) {
	t.Helper()
	code, out, _ := run(t, "status", "--name", "clitest")
	t.Logf("dev status:\n%s", out)
	if code != cli.ExitOK {
		t.Fatalf("dev status exited %d", code)
	}
	for _, comp := range []string{devcluster.Etcd, devcluster.KubeAPIServer, devcluster.KubeControllerManager, devcluster.KubeScheduler, devcluster.Kwok} {
		if !regexp.MustCompile(`(?m)^` + comp + `\s+\d+\s+\d+\s+running`).MatchString(out) {
			t.Errorf("dev status does not show %s running", comp)
		}
	}
	if !strings.Contains(out, ": ready (ok)") {
		t.Errorf("dev status does not show the API server ready")
	}
}

// checkDevDown checks `vacate-dev down` stops the five processes and leaves
// none using dir, and that down and env of the stopped cluster say it is
// not running.
func checkDevDown(t *testing.T, dir string) {
	t.Helper()
	code, out, errOut := run(t, "down", "--name", "clitest")
	t.Logf("dev down:\n%s", out)
	if code != cli.ExitOK {
		t.Fatalf("dev down exited %d: %s", code, errOut)
	}
	if n := strings.Count(out, "stopped "); n != 5 {
		t.Errorf("dev down stopped %d processes, want 5:\n%s", n, out)
	}
	if pids := devcluster.ProcessesUsing(dir); len(pids) > 0 {
		t.Errorf("processes still running after dev down: %v", pids)
	}

	code, out, _ = run(t, "down", "--name", "clitest")
	if code != cli.ExitOK || !strings.Contains(out, "not running") {
		t.Errorf("dev down of a stopped cluster = %d %q, want 0 saying it is not running", code, out)
	}
	code, _, errOut = run(t, "env", "--name", "clitest")
	if code != cli.ExitError || !strings.Contains(errOut, "not running") {
		t.Errorf("dev env of a stopped cluster = %d %q, want exit 1 saying it is not running", code, errOut)
	}
}

// TestDevUpStopsOnInterrupt runs the real vacate-dev: Ctrl-C, both during start
// and once the cluster is up in the foreground, stops every process. The
// cluster in the foreground serves the EvictionRequest API
// (--eviction-request-api), and says so.
func TestDevUpStopsOnInterrupt(t *testing.T) {
	bin := buildDev(t)
	clusters := t.TempDir()

	for _, tc := range []struct {
		name string
		args []string
		// waitFor is the line after which Ctrl-C is sent, once check (if
		// any) has looked at the cluster.
		waitFor  string
		stream   string
		wantCode int
		check    func(t *testing.T, dir, out string)
	}{
		{name: "during-start", waitFor: "started kube-apiserver", stream: "stderr", wantCode: cli.ExitError},
		{name: "foreground", args: []string{"--eviction-request-api"}, waitFor: "press Ctrl-C", stream: "stdout", wantCode: cli.ExitOK, check: checkServesEvictionRequests},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(clusters, tc.name)
			cmd := exec.Command(bin, append([]string{"up", "--foreground", "--name", tc.name}, tc.args...)...)
			cmd.Env = append(os.Environ(), devcluster.EnvClustersDir+"="+clusters)
			stdout, _ := cmd.StdoutPipe()
			stderr, _ := cmd.StderrPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = devcluster.Down(dir) })
			watched, other := stdout, stderr
			if tc.stream == "stderr" {
				watched, other = stderr, stdout
			}
			var otherOut bytes.Buffer
			go func() { _, _ = io.Copy(&otherOut, other) }()
			seen := make(chan string, 1)
			var lines bytes.Buffer
			go func() {
				sc := bufio.NewScanner(watched)
				for sc.Scan() {
					lines.WriteString(sc.Text() + "\n")
					if strings.Contains(sc.Text(), tc.waitFor) {
						seen <- sc.Text()
					}
				}
				close(seen)
			}()
			select {
			case _, ok := <-seen:
				if !ok {
					t.Fatalf("vacate-dev exited before printing %q:\n%s", tc.waitFor, lines.String())
				}
			case <-time.After(3 * time.Minute):
				t.Fatalf("vacate-dev did not print %q in time", tc.waitFor)
			}
			if tc.check != nil {
				tc.check(t, dir, lines.String())
			}
			if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(time.Minute):
				t.Fatal("vacate-dev did not exit within a minute of Ctrl-C")
			}
			if code := cmd.ProcessState.ExitCode(); code != tc.wantCode {
				t.Errorf("exit code %d, want %d", code, tc.wantCode)
			}
			if pids := devcluster.ProcessesUsing(dir); len(pids) > 0 {
				t.Errorf("processes still running after Ctrl-C: %v", pids)
			}
		})
	}
}

// checkServesEvictionRequests checks a cluster started with
// --eviction-request-api: its line says it serves the API, its state records
// it, and discovery finds the API (evictionrequest.Served).
func checkServesEvictionRequests(t *testing.T, dir, out string) {
	t.Helper()
	if want := "serving lifecycle.k8s.io/v1alpha1 (feature gate EvictionRequestAPI)"; !strings.Contains(out, want) {
		t.Errorf("dev up does not say %q:\n%s", want, out)
	}
	st, err := devcluster.ReadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !st.EvictionRequestAPI {
		t.Error("the cluster's state does not record the EvictionRequest API")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", st.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if served, err := evictionrequest.Served(kubernetes.NewForConfigOrDie(cfg).Discovery()); !served || err != nil {
		t.Errorf("the cluster does not serve the EvictionRequest API: %v", err)
	}
}

func TestBadUsageIsExitTwo(t *testing.T) {
	for _, args := range [][]string{
		{"up", "extra"},
		{"up", "--no-such-flag"},
		{"status", "--name"},
		{"no-such-command"},
		{"demo", "--nodes"},
	} {
		code, _, errOut := run(t, args...)
		if code != cli.ExitUsage {
			t.Errorf("vacate-dev %v exited %d, want %d (stderr %q)", args, code, cli.ExitUsage, errOut)
		}
		if !strings.HasPrefix(errOut, "error: ") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("vacate-dev %v: want one error line, got %q", args, errOut)
		}
	}
	code, _, errOut := run(t, "up", "--name", "Bad_Name")
	if code != cli.ExitError || !strings.Contains(errOut, "lower-case") {
		t.Errorf("bad cluster name: exit %d %q", code, errOut)
	}
}

func TestEveryCommandHasExamples(t *testing.T) {
	root := NewRootCommand(Streams{In: strings.NewReader(""), Out: io.Discard, Err: io.Discard})
	var check func(prefix string, cmds []*cobra.Command)
	check = func(prefix string, cmds []*cobra.Command) {
		for _, c := range cmds {
			if c.Hidden || c.Name() == "help" {
				continue
			}
			if c.Runnable() && strings.TrimSpace(c.Example) == "" {
				t.Errorf("%s %s has no examples in its help", prefix, c.Name())
			}
			check(prefix+" "+c.Name(), c.Commands())
		}
	}
	check("vacate-dev", root.Commands())
}
