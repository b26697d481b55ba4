package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/utils/clock"

	"github.com/spf13/cobra"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/explain"
	"github.com/vacate-dev/vacate/internal/progress"
)

type statusOptions struct {
	flags   *genericclioptions.ConfigFlags
	streams Streams
	clock   clock.WithTicker
	output  string
	watch   bool
}

// outputFormats are the values of -o.
var outputFormats = []string{"wide", "json", "yaml", "name"}

func newStatusCommand(flags *genericclioptions.ConfigFlags, s Streams, clk clock.WithTicker) *cobra.Command {
	o := &statusOptions{flags: flags, streams: s, clock: clk}
	cmd := &cobra.Command{
		Use:   "status [NODE...]",
		Short: "Show drains: phase, progress, blockers and who asked",
		Long: `Lists the NodeDrains of the cluster, or of the named nodes, as a table:
phase, pods evicted of those that must leave, pods blocked, requesters, age.
-o wide adds the mode, the policy, how long the drain took and what holds it.
-o json|yaml prints the objects; --watch prints a row again whenever a drain
changes.`,
		Example: `  # All drains
  vacate status

  # Two nodes, with what holds them
  vacate status node-1 node-2 -o wide

  # Follow every change, as kubectl get --watch does
  vacate status --watch

  # For scripts
  vacate status node-1 -o json | jq .status.phase`,
		ValidArgsFunction: completeNodes(flags),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), args)
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "output format: "+strings.Join(outputFormats, ", ")+" (default: a table)")
	cmd.Flags().BoolVarP(&o.watch, "watch", "w", false, "after listing, print each drain again when it changes")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(outputFormats, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func (o *statusOptions) run(ctx context.Context, args []string) error {
	if o.output != "" && !slices.Contains(outputFormats, o.output) {
		return argsError{fmt.Sprintf("-o %q: must be one of %s", o.output, strings.Join(outputFormats, ", "))}
	}
	s, err := connect(ctx, o.flags)
	if err != nil {
		return err
	}
	var drains []v1alpha1.NodeDrain
	if len(args) == 0 {
		list := &v1alpha1.NodeDrainList{}
		if err := s.client.List(ctx, list); err != nil {
			return s.explain(err, "listing NodeDrains")
		}
		drains = list.Items
	} else {
		for _, name := range dedupe(args) {
			nd := &v1alpha1.NodeDrain{}
			err := s.client.Get(ctx, types.NamespacedName{Name: name}, nd)
			if apierrors.IsNotFound(err) {
				if _, nerr := s.node(ctx, name); nerr != nil {
					return nerr
				}
				return fmt.Errorf("node %s has no drain; start one with 'vacate drain %s', or preview it with 'vacate plan %s'", name, name, name)
			}
			if err != nil {
				return s.explain(err, "reading NodeDrain "+name)
			}
			drains = append(drains, *nd)
		}
	}
	sort.Slice(drains, func(i, j int) bool { return drains[i].Name < drains[j].Name })
	p := o.printer(len(args) == 1)
	if err := p.list(drains); err != nil {
		return err
	}
	if o.output == "" || o.output == "wide" {
		o.warnUnreported(ctx, s, drains)
	}
	if !o.watch {
		return nil
	}
	return o.watchChanges(ctx, s, args, p)
}

// warnUnreported warns, on the error stream, about running drains'
// Evacuations whose provider names no reporter: anyone allowed to write
// evacuations/status can complete them.
func (o *statusOptions) warnUnreported(ctx context.Context, s *session, drains []v1alpha1.NodeDrain) {
	for i := range drains {
		nd := &drains[i]
		if nd.Ended() || len(nd.Spec.Requesters) == 0 {
			continue
		}
		for _, f := range explain.Unreported(nd, nodeEvacuations(ctx, s, nd.Name)) {
			fmt.Fprintf(o.streams.Err, "warning: %s: %s; %s\n", f.Subject, f.Cause, f.Fix)
		}
	}
}

// watchChanges prints a drain again whenever it changes, until interrupted.
func (o *statusOptions) watchChanges(ctx context.Context, s *session, only []string, p *drainPrinter) error {
	events := make(chan watch.Event, 64)
	errc := make(chan error, 1)
	go func() { errc <- progress.WatchDrains(ctx, s.client, events) }()
	seen := map[string]string{} // name -> resourceVersion printed
	for {
		select {
		case ev := <-events:
			nd, ok := ev.Object.(*v1alpha1.NodeDrain)
			if !ok || (len(only) > 0 && !slices.Contains(only, nd.Name)) || seen[nd.Name] == nd.ResourceVersion {
				continue
			}
			if seen[nd.Name] == "" && ev.Type == watch.Added && p.listed[nd.Name] == nd.ResourceVersion {
				seen[nd.Name] = nd.ResourceVersion // the list printed it already
				continue
			}
			seen[nd.Name] = nd.ResourceVersion
			if ev.Type == watch.Deleted {
				nd.Status.Phase = "Deleted"
				delete(seen, nd.Name)
			}
			if err := p.row(nd); err != nil {
				return err
			}
		case err := <-errc:
			if err != nil {
				return s.explain(err, "watching NodeDrains")
			}
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// drainPrinter prints drains as a table, or as objects.
type drainPrinter struct {
	out    io.Writer
	clock  clock.WithTicker
	format string
	single bool
	watch  bool
	cols   *columns
	// printer prints objects for -o json|yaml.
	printer printers.ResourcePrinter
	listed  map[string]string // name -> resourceVersion of the first listing
}

func (o *statusOptions) printer(single bool) *drainPrinter {
	return &drainPrinter{out: o.streams.Out, clock: o.clock, format: o.output, single: single && !o.watch, watch: o.watch,
		cols: &columns{}, listed: map[string]string{}}
}

func (p *drainPrinter) list(drains []v1alpha1.NodeDrain) error {
	for _, nd := range drains {
		p.listed[nd.Name] = nd.ResourceVersion
	}
	switch p.format {
	case "json", "yaml":
		var obj runtime.Object
		if p.single && len(drains) == 1 {
			obj = typed(&drains[0])
		} else {
			list := &v1alpha1.NodeDrainList{Items: drains}
			list.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("NodeDrainList"))
			for i := range list.Items {
				typed(&list.Items[i])
			}
			obj = list
		}
		return p.objectPrinter().PrintObj(obj, p.out)
	case "name":
		for i := range drains {
			if err := p.row(&drains[i]); err != nil {
				return err
			}
		}
		return nil
	}
	if len(drains) == 0 {
		fmt.Fprintln(p.out, "No drains. Start one with 'vacate drain NODE'.")
		return nil
	}
	header := []string{"NODE", "PHASE", "EVICTED/TOTAL", "BLOCKED", "REQUESTERS", "AGE"}
	if p.format == "wide" {
		header = append(header, "MODE", "POLICY", "TOOK", "WHY")
	}
	rows := [][]string{header}
	for i := range drains {
		rows = append(rows, p.fields(&drains[i]))
	}
	if p.watch { // rows printed later line up with the table
		p.cols.fit([]string{"", "Queued #10 WaitingForPDBHeadroom"})
	}
	for _, r := range rows {
		p.cols.fit(r)
	}
	for _, r := range rows {
		if err := p.cols.print(p.out, r); err != nil {
			return err
		}
	}
	return nil
}

// columns pads table cells to widths that only grow, so the rows printed
// by --watch line up with the table above them.
type columns struct{ widths []int }

func (c *columns) fit(fields []string) {
	for i, f := range fields {
		if i >= len(c.widths) {
			c.widths = append(c.widths, 0)
		}
		c.widths[i] = max(c.widths[i], len(f))
	}
}

func (c *columns) print(w io.Writer, fields []string) error {
	c.fit(fields)
	var b strings.Builder
	for i, f := range fields {
		if i == len(fields)-1 {
			b.WriteString(f)
			break
		}
		fmt.Fprintf(&b, "%-*s   ", c.widths[i], f)
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// row prints one drain after the listing, in the chosen format.
func (p *drainPrinter) row(nd *v1alpha1.NodeDrain) error {
	switch p.format {
	case "json", "yaml":
		return p.objectPrinter().PrintObj(typed(nd), p.out)
	case "name":
		_, err := fmt.Fprintf(p.out, "nodedrain.%s/%s\n", v1alpha1.GroupVersion.Group, nd.Name)
		return err
	}
	return p.cols.print(p.out, p.fields(nd))
}

// objectPrinter is one printer for the whole run: the YAML printer
// separates the documents it prints with "---".
func (p *drainPrinter) objectPrinter() printers.ResourcePrinter {
	if p.printer == nil {
		p.printer = &printers.JSONPrinter{}
		if p.format == "yaml" {
			p.printer = &printers.YAMLPrinter{}
		}
	}
	return p.printer
}

// fields are a drain's table cells.
func (p *drainPrinter) fields(nd *v1alpha1.NodeDrain) []string {
	now := p.clock.Now()
	fields := []string{nd.Name, phaseCell(nd), fmt.Sprintf("%d/%d", nd.Status.Evicted, nd.Status.Total),
		fmt.Sprint(nd.Status.Blocked), requesterList(nd), progress.Duration(now.Sub(nd.CreationTimestamp.Time))}
	if p.format == "wide" {
		took := "-"
		if nd.Status.StartTime != nil {
			end := now
			if nd.Status.CompletionTime != nil {
				end = nd.Status.CompletionTime.Time
			}
			took = progress.Duration(end.Sub(nd.Status.StartTime.Time))
		}
		policy := nd.Spec.PolicyName
		if policy == "" {
			policy = "(default)"
		}
		fields = append(fields, string(nd.Spec.Mode), policy, took, why(nd))
	}
	return fields
}

// phaseCell is the drain's phase; for a drain waiting for admission,
// "Queued", its place in the queue and the reason, such as
// "Queued #2 WaitingForSlot"; for a drain that ended and runs again, why,
// such as "Evicting (again: PodsArrived)".
func phaseCell(nd *v1alpha1.NodeDrain) (cell string) {
	phase := string(nd.Status.Phase)
	if phase == "" {
		phase = string(v1alpha1.PhasePending)
	}
	if r := nd.Status.Run; r != nil && r.Reason != "" && !nd.Ended() && len(nd.Spec.Requesters) > 0 {
		defer func() { cell += " (again: " + r.Reason + ")" }()
	}
	c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionAdmitted)
	if nd.Status.Phase != v1alpha1.PhasePending || c == nil || c.Status != "False" || len(nd.Spec.Requesters) == 0 {
		return phase
	}
	if nd.Status.QueuePosition > 0 {
		return fmt.Sprintf("Queued #%d %s", nd.Status.QueuePosition, c.Reason)
	}
	return "Queued " + c.Reason
}

// why is the one thing that holds the drain, or "-".
func why(nd *v1alpha1.NodeDrain) string {
	if len(nd.Status.Blockers) > 0 {
		b := nd.Status.Blockers[0]
		s := b.Pod + ": " + b.Reason
		if b.Holder != "" {
			s = b.Pod + " held by " + b.Holder
		}
		if n := int(nd.Status.Blocked) - 1; n > 0 {
			s += fmt.Sprintf(" (+%d more)", n)
		}
		return s
	}
	for _, t := range []string{v1alpha1.ConditionAdmitted, v1alpha1.ConditionCordoned} {
		if c := meta.FindStatusCondition(nd.Status.Conditions, t); c != nil && c.Status != "True" {
			return c.Reason + ": " + c.Message
		}
	}
	if nd.Status.Phase == v1alpha1.PhaseFailed {
		if c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionDrained); c != nil {
			return c.Message
		}
	}
	if r := nd.Status.Run; r != nil && r.Reason != "" && !nd.Ended() {
		return "running again: " + r.Message
	}
	return "-"
}

// typed sets the drain's apiVersion and kind, which printers require.
func typed(nd *v1alpha1.NodeDrain) *v1alpha1.NodeDrain {
	nd.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("NodeDrain"))
	return nd
}
