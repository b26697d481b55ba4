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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"
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
	targets
	output    string
	watch     bool
	noHeaders bool
	sortBy    string
}

func newStatusCommand(flags *genericclioptions.ConfigFlags, s Streams, clk clock.WithTicker) *cobra.Command {
	o := &statusOptions{flags: flags, streams: s, clock: clk}
	cmd := &cobra.Command{
		Use:   "status [NODE...] [-l SELECTOR]",
		Short: "Show drains: phase, progress, blockers and who asked",
		Long: `Lists the NodeDrains of the cluster, of the named nodes, or of the nodes
-l selects, as a table: phase, pods evicted of those that must leave, pods
blocked, requesters, age. -o wide adds the mode, the policy, how long the
drain took and what holds it. -o json|yaml|name|jsonpath=...|custom-columns=...
print the objects as kubectl get does; --watch prints a row again whenever a
drain changes. --no-headers and --sort-by=JSONPATH (a field of the NodeDrain,
such as .status.evicted) work as in kubectl get. A named node without a drain
is an error line, after the others are printed.`,
		Example: `  # All drains
  vacate status

  # Two nodes, with what holds them
  vacate status node-1 node-2 -o wide

  # The drains of a node pool
  vacate status -l pool=batch

  # Follow every change, as kubectl get --watch does
  vacate status --watch

  # For scripts
  vacate status --no-headers --sort-by=.metadata.creationTimestamp
  vacate status node-1 -o jsonpath='{.status.phase}'
  vacate status -o custom-columns=NODE:.metadata.name,PHASE:.status.phase,POLICY:.status.policy`,
		ValidArgsFunction: completeNodes(flags),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), args)
		},
	}
	o.targets.addFlag(cmd.Flags(), "show the drains of")
	cmd.Flags().StringVarP(&o.output, "output", "o", "", outputUsage)
	cmd.Flags().BoolVarP(&o.watch, "watch", "w", false, "after listing, print each drain again when it changes")
	cmd.Flags().BoolVar(&o.noHeaders, "no-headers", false, "print the table (and custom-columns) without its header line")
	cmd.Flags().StringVar(&o.sortBy, "sort-by", "", "sort the drains by this field, a JSONPath expression into the NodeDrain (.status.evicted, '{.metadata.creationTimestamp}'), as kubectl get --sort-by; default: by name")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(outputFormats, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("sort-by", cobra.FixedCompletions(sortFields, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func (o *statusOptions) run(ctx context.Context, args []string) error {
	format, arg, err := parseOutput(o.output, formatWide, formatJSON, formatYAML, formatName, formatJSONPath, formatCustomColumns)
	if err != nil {
		return err
	}
	if len(args) > 0 && o.selector != "" {
		return argsError{"name nodes or give -l/--selector, not both"}
	}
	sorter, err := newDrainSorter(o.sortBy)
	if err != nil {
		return err
	}
	p, err := o.printer(format, arg, len(args) == 1)
	if err != nil {
		return err
	}
	s, err := connect(ctx, o.flags)
	if err != nil {
		return err
	}
	var drains []v1alpha1.NodeDrain
	var missing []error
	var only []string // the nodes asked for; nil: all
	switch {
	case len(args) == 0 && o.selector == "":
		list := &v1alpha1.NodeDrainList{}
		if err := s.client.List(ctx, list); err != nil {
			return s.explain(err, "listing NodeDrains")
		}
		drains = list.Items
	case o.selector != "":
		if only, err = s.nodeNames(ctx, nil, o.selector); err != nil {
			return err
		}
		list := &v1alpha1.NodeDrainList{}
		if err := s.client.List(ctx, list); err != nil {
			return s.explain(err, "listing NodeDrains")
		}
		for _, nd := range list.Items {
			if slices.Contains(only, nd.Name) {
				drains = append(drains, nd)
			}
		}
	default:
		only = dedupe(args)
		for _, name := range only {
			nd := &v1alpha1.NodeDrain{}
			err := s.client.Get(ctx, types.NamespacedName{Name: name}, nd)
			switch {
			case apierrors.IsNotFound(err):
				if _, nerr := s.node(ctx, name); nerr != nil {
					missing = append(missing, nerr)
					continue
				}
				missing = append(missing, fmt.Errorf("node %s has no drain; start one with 'vacate drain %s', or preview it with 'vacate plan %s'", name, name, name))
			case err != nil:
				return s.explain(err, "reading NodeDrain "+name)
			default:
				drains = append(drains, *nd)
			}
		}
	}
	sort.Slice(drains, func(i, j int) bool { return drains[i].Name < drains[j].Name })
	if err := sorter.sort(drains); err != nil {
		return err
	}
	if len(drains) > 0 || len(missing) == 0 {
		if err := p.list(drains); err != nil {
			return err
		}
	}
	if format == "" || format == formatWide {
		o.warnUnreported(ctx, s, drains)
	}
	// As kubectl get: what exists is printed, then an error line for each
	// node that has no drain (the last is the command's error).
	for i, err := range missing {
		if i < len(missing)-1 {
			fmt.Fprintf(o.streams.Err, "error: %v\n", err)
			continue
		}
		return err
	}
	if !o.watch {
		return nil
	}
	return o.watchChanges(ctx, s, only, p)
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

// drainPrinter prints drains as a table (cli-runtime's table printer, as
// kubectl get prints), or as objects.
type drainPrinter struct {
	out    io.Writer
	clock  clock.WithTicker
	format string
	single bool
	// printer prints the objects (json, yaml, name, jsonpath,
	// custom-columns), or the table.
	printer printers.ResourcePrinter
	listed  map[string]string // name -> resourceVersion of the first listing
	// widths, under --watch, are the table's column widths so far: the
	// table printer lays out each printing on its own, so the rows printed
	// later are padded to them to line up with the listing.
	widths []int
	watch  bool
	// noHeaders: no header line, and "No drains" on the error stream, so
	// that a script reads rows only.
	noHeaders bool
	errOut    io.Writer
}

func (o *statusOptions) printer(format, arg string, single bool) (*drainPrinter, error) {
	p := &drainPrinter{out: o.streams.Out, errOut: o.streams.Err, clock: o.clock, format: format, single: single && !o.watch,
		listed: map[string]string{}, watch: o.watch, noHeaders: o.noHeaders}
	var err error
	if p.printer, err = objectPrinter(format, arg); err != nil {
		return nil, err
	}
	if cc, ok := p.printer.(*customColumnsPrinter); ok {
		cc.printed = o.noHeaders // the header counts as printed
	}
	if p.printer == nil {
		p.printer = printers.NewTablePrinter(printers.PrintOptions{Wide: format == formatWide, NoHeaders: o.noHeaders})
	}
	return p, nil
}

func (p *drainPrinter) list(drains []v1alpha1.NodeDrain) error {
	for _, nd := range drains {
		p.listed[nd.Name] = nd.ResourceVersion
	}
	switch p.format {
	case "", formatWide:
		if len(drains) == 0 {
			out := p.out
			if p.noHeaders {
				out = p.errOut
			}
			fmt.Fprintln(out, "No drains. Start one with 'vacate drain NODE'.")
			return nil
		}
		return p.printer.PrintObj(p.table(drains...), p.out)
	case formatName:
		for i := range drains {
			if err := p.printer.PrintObj(typed(&drains[i]), p.out); err != nil {
				return err
			}
		}
		return nil
	}
	if p.single && len(drains) == 1 {
		return p.printer.PrintObj(typed(&drains[0]), p.out)
	}
	list := &v1alpha1.NodeDrainList{Items: drains}
	list.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("NodeDrainList"))
	for i := range list.Items {
		typed(&list.Items[i])
	}
	return p.printer.PrintObj(list, p.out)
}

// row prints one drain after the listing, in the chosen format.
func (p *drainPrinter) row(nd *v1alpha1.NodeDrain) error {
	if p.format == "" || p.format == formatWide {
		return p.printer.PrintObj(p.table(*nd), p.out)
	}
	return p.printer.PrintObj(typed(nd), p.out)
}

// statusColumns are the table's columns; those of priority 1 show with -o
// wide.
var statusColumns = []metav1.TableColumnDefinition{
	{Name: "Node", Type: "string"}, {Name: "Phase", Type: "string"}, {Name: "Evicted/Total", Type: "string"},
	{Name: "Blocked", Type: "integer"}, {Name: "Requesters", Type: "string"}, {Name: "Age", Type: "string"},
	{Name: "Mode", Type: "string", Priority: 1}, {Name: "Policy", Type: "string", Priority: 1},
	{Name: "Took", Type: "string", Priority: 1}, {Name: "Why", Type: "string", Priority: 1},
}

// table is the drains as a table for cli-runtime's table printer.
func (p *drainPrinter) table(drains ...v1alpha1.NodeDrain) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: statusColumns}
	rows := make([][]string, 0, len(drains))
	for i := range drains {
		rows = append(rows, p.fields(&drains[i]))
	}
	if p.watch {
		p.pad(rows)
	}
	for _, r := range rows {
		cells := make([]any, 0, len(r))
		for _, f := range r {
			cells = append(cells, f)
		}
		t.Rows = append(t.Rows, metav1.TableRow{Cells: cells})
	}
	return t
}

// pad widens the cells of rows to the widths of every row printed so far
// (and of the headers, and of a long queued phase), so that rows printed
// one at a time line up.
func (p *drainPrinter) pad(rows [][]string) {
	if p.widths == nil {
		for _, c := range statusColumns {
			p.widths = append(p.widths, len(c.Name))
		}
		p.widths[1] = len("Queued #10 WaitingForPDBHeadroom")
	}
	for _, r := range rows {
		for i, f := range r {
			if i < len(p.widths) {
				p.widths[i] = max(p.widths[i], len(f))
			}
		}
	}
	last := len(statusColumns) - 1 // the last column shown is not padded
	if p.format != formatWide {
		last = 5
	}
	for _, r := range rows {
		for i := range r {
			if i < last {
				r[i] += strings.Repeat(" ", p.widths[i]-len(r[i]))
			}
		}
	}
}

// fields are a drain's table cells, the wide ones included. Ages and
// durations read as kubectl's (duration.HumanDuration).
func (p *drainPrinter) fields(nd *v1alpha1.NodeDrain) []string {
	now := p.clock.Now()
	took := "-"
	if nd.Status.StartTime != nil {
		end := now
		if nd.Status.CompletionTime != nil {
			end = nd.Status.CompletionTime.Time
		}
		took = duration.HumanDuration(end.Sub(nd.Status.StartTime.Time))
	}
	policy := nd.Status.Policy
	switch {
	case policy == "" && nd.Spec.PolicyName != "":
		policy = nd.Spec.PolicyName
	case policy == "":
		policy = "(built-in)"
	}
	return []string{nd.Name, phaseCell(nd), fmt.Sprintf("%d/%d", nd.Status.Evicted, nd.Status.Total),
		fmt.Sprint(nd.Status.Blocked), requesterList(nd), duration.HumanDuration(now.Sub(nd.CreationTimestamp.Time)),
		string(nd.Spec.Mode), policy, took, why(nd)}
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
	c := nd.AdmissionHold()
	if nd.Status.Phase != v1alpha1.PhasePending || c == nil || c.Status != metav1.ConditionFalse || len(nd.Spec.Requesters) == 0 {
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
		switch {
		case b.Reason == v1alpha1.BlockerEvictionRequest: // which responder has the turn, in its words
			s = b.Pod + ": " + v1alpha1.Truncate(b.Detail, 120)
		case b.Holder != "":
			s = b.Pod + " held by " + b.Holder
		}
		if n := int(nd.Status.Blocked) - 1; n > 0 {
			s += fmt.Sprintf(" (+%d more)", n)
		}
		return s
	}
	if c := nd.AdmissionHold(); c != nil { // this run's: the last run's says nothing of it
		return c.Reason + ": " + c.Message
	}
	if c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionCordoned); c != nil && c.Status != "True" {
		return c.Reason + ": " + c.Message
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
