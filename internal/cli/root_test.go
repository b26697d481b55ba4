package cli

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
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
	code, _, errOut = run(alone, "no-such-command")
	if code != ExitUsage || !strings.HasPrefix(errOut, "error: unknown command \"no-such-command\" for \"vacate\"") {
		t.Errorf("vacate no-such-command: exit %d %q, want %d", code, errOut, ExitUsage)
	}
}
