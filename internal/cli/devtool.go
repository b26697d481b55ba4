package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
)

// DevProgram is the development command (cmd/vacate-dev): the dev cluster,
// the demo and the reference workloads. The vacate that users install does
// not carry them; `vacate dev ...` and `vacate demo` run it when it is there.
const DevProgram = "vacate-dev"

// newDevToolCommand is a hidden command that hands its arguments, after
// prefix, to vacate-dev: `vacate dev up` runs `vacate-dev up`, `vacate demo`
// runs `vacate-dev demo`, as the design's local interfaces name them.
func newDevToolCommand(use string, prefix []string) *cobra.Command {
	return &cobra.Command{
		Use:                use,
		Short:              "Development tools (" + DevProgram + "), for a vacate checkout",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(_ *cobra.Command, args []string) error {
			return runDevTool(append(append([]string{}, prefix...), args...))
		},
	}
}

// runDevTool replaces this process with vacate-dev and args, so its exit
// code, output and signals (Ctrl-C) are vacate-dev's own. It returns only
// when vacate-dev cannot be found or started.
func runDevTool(args []string) error {
	path, err := findDevTool()
	if err != nil {
		return err
	}
	argv := append([]string{path}, args...)
	if err := syscall.Exec(path, argv, os.Environ()); err != nil {
		return fmt.Errorf("running %s: %w", path, err)
	}
	return nil
}

// errNoDevTool: vacate-dev is neither next to this program nor on PATH.
var errNoDevTool = errors.New("the development tools are not part of this vacate")

// findDevTool looks for vacate-dev next to this program (make build puts
// bin/vacate-dev beside bin/vacate), then on PATH.
func findDevTool() (string, error) {
	if self, err := os.Executable(); err == nil {
		if resolved, err := filepath.EvalSymlinks(self); err == nil {
			self = resolved
		}
		next := filepath.Join(filepath.Dir(self), DevProgram)
		if info, err := os.Stat(next); err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
			return next, nil
		}
	}
	if path, err := exec.LookPath(DevProgram); err == nil {
		return path, nil
	}
	return "", fmt.Errorf("%w: 'vacate dev' and 'vacate demo' run %s, found neither next to vacate nor on PATH; "+
		"in a vacate checkout run 'make build' (it puts bin/%s next to bin/vacate) or 'go run ./cmd/%s --help'",
		errNoDevTool, DevProgram, DevProgram, DevProgram)
}
