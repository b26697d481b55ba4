// Package cli is the vacate command line.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/utils/clock"
)

// Exit codes of the vacate command.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
	// ExitTimeout: the wait ended before the drains did; they go on.
	ExitTimeout = 3
)

// exitError ends the command with a chosen exit code.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

// usageError marks errors in how the command was called.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// Streams are the command's input and outputs, injected for tests.
type Streams struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
}

// NewRootCommand builds the vacate command tree.
func NewRootCommand(s Streams, clk clock.WithTicker) *cobra.Command {
	flags := newConfigFlags()
	root := &cobra.Command{
		Use:   "vacate",
		Short: "Take nodes away safely: drain, evacuate data, explain, undo",
		Long: `vacate drains Kubernetes nodes through the Eviction API with every
PodDisruptionBudget respected, lets stateful systems move their data off a
node before its pods go, explains every stuck pod, and undoes exactly what it
did when a drain is cancelled.`,
		Example: `  # Preview, then drain a node and follow it
  vacate plan node-1
  vacate drain node-1 --wait --reason "kernel upgrade"

  # What is happening, and why is it stuck?
  vacate status -o wide
  vacate explain node-1

  # Give the node back
  vacate cancel node-1

  # Try it all on a throwaway local cluster
  vacate demo`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(s.In)
	root.SetOut(s.Out)
	root.SetErr(s.Err)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	if strings.HasPrefix(filepath.Base(os.Args[0]), "kubectl-") {
		asKubectlPlugin(root)
	}
	flags.AddFlags(root.PersistentFlags())
	root.SetUsageTemplate(strings.Replace(root.UsageTemplate(),
		"\n\nGlobal Flags:\n{{.InheritedFlags.FlagUsages | trimTrailingWhitespaces}}",
		"\n\nConnection flags (--kubeconfig, --context, --user, --request-timeout, ...): see '{{.Root.DisplayName}} --help'.", 1))
	root.AddCommand(
		newDrainCommand(flags, s, clk),
		newCancelCommand(flags, s),
		newStatusCommand(flags, s, clk),
		newPlanCommand(flags, s, clk),
		newExplainCommand(flags, s, clk),
		newReleaseCommand(flags, s, clk),
		newManifestsCommand(s),
		newUninstallCommand(flags, s, clk),
		newDevCommand(s),
		newDemoCommand(s),
	)
	addCompletionExamples(root)
	if root.Annotations[cobra.CommandDisplayNameAnnotation] != "" {
		pluginExamples(root)
	}
	return root
}

// asKubectlPlugin names the command "kubectl vacate" in help and usage, as
// kubectl runs it when it is installed as kubectl-vacate.
func asKubectlPlugin(root *cobra.Command) {
	root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl vacate"}
}

// pluginExamples rewrites the examples of every command for the plugin.
func pluginExamples(c *cobra.Command) {
	c.Example = strings.ReplaceAll(c.Example, "  vacate ", "  kubectl vacate ")
	for _, sub := range c.Commands() {
		pluginExamples(sub)
	}
}

// Main runs the vacate command and returns its exit code. Ctrl-C cancels the
// context, so commands stop what they started before returning.
func Main(args []string, s Streams) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, args, s, clock.RealClock{})
}

// Run runs the vacate command with a context and clock and returns its exit
// code.
func Run(ctx context.Context, args []string, s Streams, clk clock.WithTicker) int {
	root := NewRootCommand(s, clk)
	root.SetArgs(args)
	completing := len(args) > 0 && (args[0] == cobra.ShellCompRequestCmd || args[0] == cobra.ShellCompNoDescRequestCmd)
	if _, _, err := root.Find(args); err != nil && !completing { // unknown command
		fmt.Fprintf(s.Err, "error: %v; see 'vacate --help'\n", err)
		return ExitUsage
	}
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	fmt.Fprintf(s.Err, "error: %v\n", err)
	var ue usageError
	var ee exitError
	switch {
	case errors.As(err, &ue) || isCobraUsageError(err):
		return ExitUsage
	case errors.As(err, &ee):
		return ee.code
	}
	return ExitError
}

// isCobraUsageError recognises the argument errors of our Args validators
// (noArgs, asGroup and the commands' own), which cobra returns as they are.
func isCobraUsageError(err error) bool {
	var ae argsError
	return errors.As(err, &ae)
}

// argsError is returned by our Args validators.
type argsError struct{ msg string }

func (e argsError) Error() string { return e.msg }

// noArgs rejects positional arguments with a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return argsError{fmt.Sprintf("%q takes no arguments, got %q; see %q", cmd.CommandPath(), args, cmd.CommandPath()+" --help")}
	}
	return nil
}

// asGroup makes a command that only holds subcommands reject an unknown
// subcommand as a usage error (cobra would show the help and exit 0).
func asGroup(cmd *cobra.Command) *cobra.Command {
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if len(args) > 0 {
			return argsError{fmt.Sprintf("unknown command %q for %q; see '%s --help'", args[0], c.CommandPath(), c.CommandPath())}
		}
		return c.Help()
	}
	return cmd
}
