package cli

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"k8s.io/utils/clock"

	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

func TestEveryCommandHasExamples(t *testing.T) {
	root := NewRootCommand(Streams{In: strings.NewReader(""), Out: io.Discard, Err: io.Discard}, clock.RealClock{})
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
	check("vacate", root.Commands())
}

// TestHelpShowsUserCommandsOnly: the help lists the user commands, not the
// development tools, and a subcommand's help names the connection flags in
// one line instead of listing them.
func TestHelpShowsUserCommandsOnly(t *testing.T) {
	var out bytes.Buffer
	if code := Run(t.Context(), []string{"--help"}, Streams{In: strings.NewReader(""), Out: &out, Err: &out}, clock.RealClock{}); code != ExitOK {
		t.Fatalf("vacate --help exited %d:\n%s", code, out.String())
	}
	for _, want := range []string{"  drain ", "  uninstall ", "  manifests ", "--kubeconfig string"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("vacate --help lacks %q:\n%s", want, out.String())
		}
	}
	for _, unwanted := range []string{"  dev ", "  demo ", "vacate demo"} {
		if strings.Contains(out.String(), unwanted) {
			t.Errorf("vacate --help shows the development tools (%q):\n%s", unwanted, out.String())
		}
	}
	out.Reset()
	if code := Run(t.Context(), []string{"status", "--help"}, Streams{In: strings.NewReader(""), Out: &out, Err: &out}, clock.RealClock{}); code != ExitOK {
		t.Fatalf("vacate status --help exited %d:\n%s", code, out.String())
	}
	help := out.String()
	if !strings.HasSuffix(help, "\n\nConnection flags (--kubeconfig, --context, --user, --request-timeout, ...): see 'vacate --help'.\n") ||
		strings.Contains(help, "--kubeconfig string") || !strings.Contains(help, "  -o, --output string") {
		t.Errorf("vacate status --help: want its own flags, then one line for the connection flags:\n%s", help)
	}
}

// TestDevToolsRunVacateDev: `vacate dev ...` and `vacate demo` hand over to
// vacate-dev found next to vacate (as make build lays them out), with its
// output and exit code; without it they say where the tools are, in one
// line. A command vacate does not know is still a usage error.
func TestDevToolsRunVacateDev(t *testing.T) {
	var dir string
	for _, name := range []string{"vacate", DevProgram} {
		dir = filepath.Dir(testutil.Program(t, "github.com/vacate-dev/vacate/cmd/"+name))
	}
	run := func(bin string, args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "PATH=/nonexistent")
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		_ = cmd.Run()
		return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
	}
	vacate := filepath.Join(dir, "vacate")
	code, _, errOut := run(vacate, "dev", "env", "--name", "no-such-cluster")
	if code != ExitError || errOut != "error: dev cluster \"no-such-cluster\" is not running; start it with `vacate-dev up --name no-such-cluster`\n" {
		t.Errorf("vacate dev env: exit %d %q; want vacate-dev's own error, exit %d", code, errOut, ExitError)
	}
	code, out, _ := run(vacate, "demo", "--help")
	if code != ExitOK || !strings.Contains(out, "vacate-dev demo [flags]") {
		t.Errorf("vacate demo --help: exit %d, want vacate-dev demo's help:\n%s", code, out)
	}
	code, _, errOut = run(vacate, "dev", "up", "--no-such-flag")
	if code != ExitUsage {
		t.Errorf("vacate dev up --no-such-flag: exit %d %q, want %d", code, errOut, ExitUsage)
	}

	alone := testutil.ProgramAs(t, "github.com/vacate-dev/vacate/cmd/vacate", "vacate") // in a folder of its own
	code, _, errOut = run(alone, "dev", "up")
	if code != ExitError || strings.Count(errOut, "\n") != 1 ||
		!strings.Contains(errOut, "the development tools are not part of this vacate: 'vacate dev' and 'vacate demo' run vacate-dev, found neither next to vacate nor on PATH") {
		t.Errorf("vacate dev up without vacate-dev: exit %d %q; want one line saying where the tools are", code, errOut)
	}
	// No kubeconfig: the vacate users install (no vacate-dev at hand) is
	// not told to run 'vacate dev env', which it does not have; a
	// checkout's, next to vacate-dev, is.
	noConfig := []string{"status", "--kubeconfig", filepath.Join(t.TempDir(), "missing")}
	code, _, errOut = run(alone, noConfig...)
	if code != ExitError || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "no cluster to talk to") ||
		!strings.Contains(errOut, "set KUBECONFIG or pass --kubeconfig") || strings.Contains(errOut, "vacate dev") {
		t.Errorf("vacate status without a kubeconfig nor vacate-dev: exit %d %q; want one line, without 'vacate dev'", code, errOut)
	}
	code, _, errOut = run(vacate, noConfig...)
	if code != ExitError || !strings.Contains(errOut, `for the local dev cluster run: eval "$(vacate dev env)"`) {
		t.Errorf("vacate status without a kubeconfig, next to vacate-dev: exit %d %q; want the dev cluster offered", code, errOut)
	}
	code, _, errOut = run(alone, "no-such-command")
	if code != ExitUsage || !strings.HasPrefix(errOut, "error: unknown command \"no-such-command\" for \"vacate\"") {
		t.Errorf("vacate no-such-command: exit %d %q, want %d", code, errOut, ExitUsage)
	}
}

// TestKubectlGlobalFlagsAccepted (issue 44): kubectl's global flags that
// people type by habit (-n/--namespace, --cache-dir, -v, --username) are no
// usage error on any command; every object vacate names is cluster-scoped,
// so each command with them does exactly what it does without them (here:
// the same exit code and output, with no cluster to talk to).
func TestKubectlGlobalFlagsAccepted(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	run := func(args ...string) (int, string) {
		var out bytes.Buffer
		code := Run(t.Context(), append(args, "--kubeconfig", missing), Streams{In: strings.NewReader(""), Out: &out, Err: &out}, clock.RealClock{})
		return code, out.String()
	}
	root := NewRootCommand(Streams{In: strings.NewReader(""), Out: io.Discard, Err: io.Discard}, clock.RealClock{})
	var paths [][]string
	var walk func(prefix []string, c *cobra.Command)
	walk = func(prefix []string, c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			path := append(slices.Clone(prefix), sub.Name())
			if sub.Runnable() {
				args := path
				if strings.Contains(sub.Use, "NODE") {
					args = append(slices.Clone(path), "node-1")
				}
				paths = append(paths, args)
			}
			walk(path, sub)
		}
	}
	walk(nil, root)
	if len(paths) < 9 {
		t.Fatalf("found %d commands: %v", len(paths), paths)
	}
	for _, args := range paths {
		wantCode, want := run(args...)
		for _, extra := range [][]string{{"-n", "kube-system"}, {"--namespace=team-a"}, {"--cache-dir", t.TempDir()}, {"-v", "0"}, {"--username", "alice"}} {
			code, got := run(append(slices.Clone(args), extra...)...)
			if code != wantCode || got != want {
				t.Errorf("vacate %s %s: exit %d\n%s\nwithout %s: exit %d\n%s", strings.Join(args, " "), strings.Join(extra, " "), code, got, extra[0], wantCode, want)
			}
		}
		// Before the command too, as kubectl users put them.
		if code, got := run(append([]string{"-n", "kube-system"}, args...)...); code != wantCode || got != want {
			t.Errorf("vacate -n kube-system %s: exit %d\n%s", strings.Join(args, " "), code, got)
		}
	}
}

// TestPolicyHelpSaysTheDefault (issue 44): --policy's help on drain and plan
// says that without it the policy whose nodeSelector matches the node
// governs, before "default" and the built-in defaults.
func TestPolicyHelpSaysTheDefault(t *testing.T) {
	root := NewRootCommand(Streams{In: strings.NewReader(""), Out: io.Discard, Err: io.Discard}, clock.RealClock{})
	for _, name := range []string{"drain", "plan"} {
		cmd, _, err := root.Find([]string{name})
		if err != nil {
			t.Fatal(err)
		}
		usage := cmd.Flags().Lookup("policy").Usage
		match := strings.Index(usage, "the one policy whose nodeSelector matches the node")
		if match < 0 || match > strings.Index(usage, `"default"`) || !strings.Contains(usage, "built-in defaults") {
			t.Errorf("%s --policy: %q; want the nodeSelector rule first, then \"default\", then built-in defaults", name, usage)
		}
	}
}
