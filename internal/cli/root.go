// Package cli is the vacate command line.
package cli

import (
	"bytes"
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
  vacate cancel node-1`,
	}
	SetUp(root, s)
	if strings.HasPrefix(filepath.Base(os.Args[0]), "kubectl-") {
		asKubectlPlugin(root)
	}
	flags.AddFlags(root.PersistentFlags())
	addLogFlags(root.PersistentFlags())
	root.PersistentFlags().Lookup("namespace").Usage = "accepted as kubectl accepts it; vacate's objects (NodeDrains, DrainPolicies, Evacuations, nodes) are cluster-scoped, so it changes nothing"
	connectionFlagsInUsage(root)
	root.AddCommand(
		newDrainCommand(flags, s, clk),
		newCancelCommand(flags, s),
		newStatusCommand(flags, s, clk),
		newPlanCommand(flags, s, clk),
		newExplainCommand(flags, s, clk),
		newReleaseCommand(flags, s, clk),
		newManifestsCommand(s),
		newVersionCommand(flags, s, clk),
		newUninstallCommand(flags, s, clk),
		newDevToolCommand("dev", nil),
		newDevToolCommand("demo", []string{"demo"}),
	)
	addCompletionExamples(root)
	if root.Annotations[cobra.CommandDisplayNameAnnotation] != "" {
		pluginExamples(root)
	}
	return root
}

// connectionFlagsInUsage replaces, in the usage of every subcommand, the
// long list of kubectl's connection flags by one line that points to the
// root's help. It wraps cobra's default usage function rather than setting
// a usage template: a template would link text/template, whose reflection
// keeps every exported method of every type in the binary (tens of MB).
func connectionFlagsInUsage(root *cobra.Command) {
	usage := root.UsageFunc()
	root.SetUsageFunc(func(c *cobra.Command) error {
		var b bytes.Buffer
		out := c.OutOrStderr()
		c.SetOut(&b)
		err := usage(c)
		c.SetOut(out)
		text := b.String()
		if start := strings.Index(text, "\n\nGlobal Flags:\n"); start >= 0 {
			end := strings.Index(text[start+2:], "\n\n")
			if end < 0 {
				end = len(text) - 1 // the block ends the usage, before its last newline
			} else {
				end += start + 2
			}
			text = text[:start] + fmt.Sprintf("\n\nConnection flags (--kubeconfig, --context, --user, --request-timeout, ...): see '%s --help'.",
				c.Root().DisplayName()) + text[end:]
		}
		if _, werr := io.WriteString(out, text); err == nil {
			err = werr
		}
		return err
	})
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
	return Execute(ctx, NewRootCommand(s, clk), args, s)
}

// SetUp gives a root command vacate's conventions: the streams, no usage
// text or error printed by cobra (Execute prints one line), flag errors as
// usage errors. The development command (internal/dev/devcli) uses it too.
func SetUp(root *cobra.Command, s Streams) {
	root.SilenceUsage, root.SilenceErrors = true, true
	root.SetIn(s.In)
	root.SetOut(s.Out)
	root.SetErr(s.Err)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
}

// Execute runs a command tree set up by SetUp with args and returns its exit
// code: errors are printed as one line; usage errors exit ExitUsage, an
// exitError its code, others ExitError.
func Execute(ctx context.Context, root *cobra.Command, args []string, s Streams) int {
	root.SetArgs(args)
	completing := len(args) > 0 && (args[0] == cobra.ShellCompRequestCmd || args[0] == cobra.ShellCompNoDescRequestCmd)
	if _, _, err := root.Find(args); err != nil && !completing { // unknown command
		fmt.Fprintf(s.Err, "error: %v; see '%s --help'\n", err, root.Name())
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
// (NoArgs, AsGroup and the commands' own), which cobra returns as they are.
func isCobraUsageError(err error) bool {
	var ae argsError
	return errors.As(err, &ae)
}

// argsError is returned by our Args validators.
type argsError struct{ msg string }

func (e argsError) Error() string { return e.msg }

// UsageError is an error in how the command was called: Execute exits
// ExitUsage with it.
func UsageError(msg string) error { return argsError{msg} }

// NoArgs rejects positional arguments with a usage error.
func NoArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return argsError{fmt.Sprintf("%q takes no arguments, got %q; see %q", cmd.CommandPath(), args, cmd.CommandPath()+" --help")}
	}
	return nil
}

// AsGroup makes a command that only holds subcommands reject an unknown
// subcommand as a usage error (cobra would show the help and exit 0).
func AsGroup(cmd *cobra.Command) *cobra.Command {
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if len(args) > 0 {
			return argsError{fmt.Sprintf("unknown command %q for %q; see '%s --help'", args[0], c.CommandPath(), c.CommandPath())}
		}
		return c.Help()
	}
	return cmd
}
