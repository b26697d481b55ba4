// Package cli is the vacate command line.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// Exit codes of the vacate command.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

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
func NewRootCommand(s Streams) *cobra.Command {
	root := &cobra.Command{
		Use:   "vacate",
		Short: "Take nodes away safely: drain, evacuate data, explain, undo",
		Long: `vacate drains Kubernetes nodes through the Eviction API with every
PodDisruptionBudget respected, lets stateful systems move their data off a
node before its pods go, explains every stuck pod, and undoes exactly what it
did when a drain is cancelled.`,
		Example: `  # Start a local dev cluster and point kubectl at it
  vacate dev up
  eval "$(vacate dev env)"

  # Run the demo on a throwaway cluster
  vacate demo`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(s.In)
	root.SetOut(s.Out)
	root.SetErr(s.Err)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newDevCommand(s), newDemoCommand(s))
	return root
}

// Main runs the vacate command and returns its exit code. Ctrl-C cancels the
// context, so commands stop what they started before returning.
func Main(args []string, s Streams) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := NewRootCommand(s)
	root.SetArgs(args)
	if _, _, err := root.Find(args); err != nil { // unknown command
		fmt.Fprintf(s.Err, "error: %v; see 'vacate --help'\n", err)
		return ExitUsage
	}
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	fmt.Fprintf(s.Err, "error: %v\n", err)
	var ue usageError
	if errors.As(err, &ue) || isCobraUsageError(err) {
		return ExitUsage
	}
	return ExitError
}

// isCobraUsageError recognises cobra's own argument errors, which it returns
// as plain errors from Args validators and unknown commands.
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
