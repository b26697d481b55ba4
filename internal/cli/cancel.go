package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spf13/cobra"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/requests"
)

type cancelOptions struct {
	flags   *genericclioptions.ConfigFlags
	streams Streams
	targets
	requester requesterFlag
	wait      bool
	timeout   time.Duration
	dryRun    dryRun
}

func newCancelCommand(flags *genericclioptions.ConfigFlags, s Streams) *cobra.Command {
	o := &cancelOptions{flags: flags, streams: s}
	cmd := &cobra.Command{
		Use:   "cancel NODE... | --selector SELECTOR",
		Short: "Withdraw your drain requests; the last one out restores the node",
		Long: `Removes your requester entry from each node's NodeDrain. Other requesters
(another person, a taint, the agent) keep the drain going. When you were the
last, the NodeDrain is deleted and vacate undoes what it did: it uncordons the
node if, and only if, vacate cordoned it. Pods that already left stay where
they were rescheduled.

By default waits for the restore and shows it (--wait=false returns at once).`,
		Example: `  # Stop the drain of node-1 and give the node back
  vacate cancel node-1

  # Withdraw the request a pipeline made under its own requester name
  vacate cancel node-1 --requester ci:upgrade-pipeline

  # What would happen, writing nothing
  vacate cancel --selector pool=batch --dry-run`,
		ValidArgsFunction: completeNodes(flags),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), args)
		},
	}
	f := cmd.Flags()
	o.targets.addFlag(f, "cancel for")
	o.requester.addFlag(f, "the requester name to withdraw (default: cli:<your user name>)")
	f.BoolVarP(&o.wait, "wait", "w", true, "wait for the restore and show it")
	f.DurationVar(&o.timeout, "timeout", 2*time.Minute, "how long to wait for the restore (0: as long as it takes)")
	addDryRun(f, &o.dryRun, "none, client (say what would be withdrawn and whether the node would be restored; write nothing) or server (send the withdrawal as a server-side dry run; nothing is stored)",
		dryRunClient, dryRunServer)
	return cmd
}

func (o *cancelOptions) run(ctx context.Context, args []string) error {
	if err := o.targets.check("cancel", "the nodes whose drain to cancel", args); err != nil {
		return err
	}
	if err := o.requester.check(); err != nil {
		return err
	}
	if o.timeout < 0 {
		return argsError{fmt.Sprintf("--timeout %s: must not be negative", o.timeout)}
	}
	s, err := connect(ctx, o.flags)
	if err != nil {
		return err
	}
	nodes, err := s.nodeNames(ctx, args, o.selector)
	if err != nil {
		return err
	}
	requester, err := o.requester.resolve(ctx, s, o.flags)
	if err != nil {
		return err
	}
	// Withdraw everywhere first, then wait for the restores together, so a
	// slow restore never leaves later nodes requested.
	var notMine []string
	var restoring []restore
	for _, node := range nodes {
		r, mine, err := o.cancel(ctx, s, node, requester)
		if err != nil {
			return err
		}
		if !mine {
			notMine = append(notMine, node)
		}
		if r != nil {
			restoring = append(restoring, *r)
		}
	}
	if o.wait && !o.dryRun.any() {
		for _, r := range restoring {
			if err := o.showRestore(ctx, s, r); err != nil {
				return err
			}
		}
	}
	if len(notMine) > 0 {
		return fmt.Errorf("%s did not request the drain of %s; nothing changed there (see 'vacate status')", requester, strings.Join(notMine, ", "))
	}
	return nil
}

// restore is a drain whose NodeDrain was deleted, to be undone.
type restore struct {
	drain   *v1alpha1.NodeDrain
	evicted int32 // before the undo reset the counts
}

// cancel withdraws the requester from one node's drain. It returns the
// restore to wait for when the NodeDrain was deleted, and false when the
// drain exists with other requesters but not this one.
func (o *cancelOptions) cancel(ctx context.Context, s *session, node, requester string) (*restore, bool, error) {
	out := o.streams.Out
	nd := &v1alpha1.NodeDrain{}
	err := s.client.Get(ctx, types.NamespacedName{Name: node}, nd)
	if apierrors.IsNotFound(err) {
		fmt.Fprintf(out, "nodedrain/%s: no drain requested; nothing to cancel\n", node)
		return nil, true, nil
	}
	if err != nil {
		return nil, false, s.explain(err, "reading NodeDrain "+node)
	}
	evicted := nd.Status.Evicted
	if o.dryRun.client() {
		return o.wouldCancel(nd, requester), hasRequester(nd, requester) || len(nd.Spec.Requesters) == 0, nil
	}
	if o.dryRun.server() {
		return nil, hasRequester(nd, requester) || len(nd.Spec.Requesters) == 0, o.serverDryRun(ctx, s, nd, requester)
	}
	c := client.Client(s.client)
	switch {
	case len(nd.Spec.Requesters) == 0:
		// Nobody wants it (an earlier cancel was interrupted): remove it.
		fmt.Fprintf(out, "nodedrain/%s: no requester is left; deleting it\n", node)
	case !hasRequester(nd, requester):
		fmt.Fprintf(out, "nodedrain/%s: %s is not a requester (requesters: %s)\n", node, requester, requesterList(nd))
		return nil, false, nil
	default:
		if nd, err = requests.Withdraw(ctx, c, nd, requester); err != nil {
			return nil, false, s.explain(err, "withdrawing the request on NodeDrain "+node)
		}
		if len(nd.Spec.Requesters) > 0 {
			fmt.Fprintf(out, "nodedrain/%s: request of %s withdrawn; the drain goes on for %s\n", node, requester, requesterList(nd))
			return nil, true, nil
		}
	}
	deleted, err := requests.DeleteIfIdle(ctx, c, nd)
	if err != nil {
		return nil, false, s.explain(err, "deleting NodeDrain "+node)
	}
	if !deleted {
		fmt.Fprintf(out, "nodedrain/%s: request of %s withdrawn; %s joined meanwhile, so the drain goes on\n", node, requester, requesterList(nd))
		return nil, true, nil
	}
	fmt.Fprintf(out, "nodedrain/%s: request of %s withdrawn; it was the last: restoring the node\n", node, requester)
	return &restore{drain: nd, evicted: evicted}, true, nil
}

// serverDryRun sends the withdrawal, and the deletion of a drain left
// without requesters, as server-side dry runs: the API server checks them
// (RBAC, the admission policies) and stores nothing.
func (o *cancelOptions) serverDryRun(ctx context.Context, s *session, nd *v1alpha1.NodeDrain, requester string) error {
	out := o.streams.Out
	if i := requests.Index(nd, requester); i >= 0 {
		if err := s.client.Patch(ctx, nd, requests.WithdrawPatch(i, requester), client.DryRunAll); err != nil {
			return s.explain(err, "withdrawing the request on NodeDrain "+nd.Name+" (server dry run)")
		}
	} else if len(nd.Spec.Requesters) > 0 {
		fmt.Fprintf(out, "nodedrain/%s: %s is not a requester (requesters: %s)\n", nd.Name, requester, requesterList(nd))
		return nil
	}
	if len(nd.Spec.Requesters) > 0 {
		fmt.Fprintf(out, "nodedrain/%s: the request of %s would be withdrawn; the drain would go on for %s (server dry run: nothing was changed)\n",
			nd.Name, requester, requesterList(nd))
		return nil
	}
	if err := s.client.Delete(ctx, nd, client.Preconditions{UID: &nd.UID}, client.DryRunAll); err != nil {
		return s.explain(err, "deleting NodeDrain "+nd.Name+" (server dry run)")
	}
	fmt.Fprintf(out, "nodedrain/%s: the request of %s would be withdrawn; it is the last: the node would be restored (server dry run: nothing was changed)\n", nd.Name, requester)
	return nil
}

// wouldCancel says what cancel would do, writing nothing (--dry-run=client).
func (o *cancelOptions) wouldCancel(nd *v1alpha1.NodeDrain, requester string) *restore {
	out := o.streams.Out
	node := nd.Name
	switch {
	case len(nd.Spec.Requesters) == 0:
		fmt.Fprintf(out, "nodedrain/%s: no requester is left; it would be deleted and the node restored (dry run)\n", node)
	case !hasRequester(nd, requester):
		fmt.Fprintf(out, "nodedrain/%s: %s is not a requester (requesters: %s); nothing would change (dry run)\n", node, requester, requesterList(nd))
	case len(nd.Spec.Requesters) == 1:
		fmt.Fprintf(out, "nodedrain/%s: the request of %s would be withdrawn; it is the last: the node would be restored (dry run)\n", node, requester)
	default:
		others := otherRequesters(nd, requester)
		fmt.Fprintf(out, "nodedrain/%s: the request of %s would be withdrawn; the drain would go on for %s (dry run)\n", node, requester, strings.Join(others, ", "))
	}
	return nil
}

// showRestore waits until the NodeDrain is gone (the controller undid the
// drain and released its finalizer) and says what became of the node.
func (o *cancelOptions) showRestore(ctx context.Context, s *session, r restore) error {
	nd := r.drain
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if o.timeout > 0 {
		wctx, cancel = context.WithTimeout(ctx, o.timeout)
	}
	defer cancel()
	err := waitGone(wctx, s, nd.Name)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return exitError{code: ExitTimeout, err: fmt.Errorf("stopped waiting for the restore of %s; vacate goes on with it in the cluster", nd.Spec.NodeName)}
	case wctx.Err() != nil:
		return exitError{code: ExitTimeout, err: fmt.Errorf("NodeDrain %s is still there after %s: is the vacate controller running? ('vacate status %s')", nd.Name, o.timeout, nd.Name)}
	default:
		return s.explain(err, "watching NodeDrain "+nd.Name)
	}
	node, err := s.node(ctx, nd.Spec.NodeName)
	if err != nil {
		return err
	}
	switch {
	case node.Annotations[v1alpha1.AnnotationCordonedBy] != "":
		fmt.Fprintf(o.streams.Out, "node/%s: restored; still annotated %s=%s\n", node.Name, v1alpha1.AnnotationCordonedBy, node.Annotations[v1alpha1.AnnotationCordonedBy])
	case node.Spec.Unschedulable:
		fmt.Fprintf(o.streams.Out, "node/%s: restored; left cordoned because vacate did not cordon it (someone else did)\n", node.Name)
	default:
		fmt.Fprintf(o.streams.Out, "node/%s: restored: schedulable again; %d pod(s) that left stay where they were rescheduled\n", node.Name, r.evicted)
	}
	return nil
}

// waitGone waits, watching (client-go's watch tools: a list, then a watch
// from it, listed again when it ends), until the NodeDrain name is gone.
func waitGone(ctx context.Context, s *session, name string) error {
	byName := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = byName
			list := &v1alpha1.NodeDrainList{}
			return list, s.client.List(ctx, list, &client.ListOptions{Raw: &opts})
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = byName
			return s.client.Watch(ctx, &v1alpha1.NodeDrainList{}, &client.ListOptions{Raw: &opts})
		},
	}
	gone := func(store cache.Store) (bool, error) {
		_, exists, err := store.GetByKey(name)
		return !exists, err
	}
	_, err := watchtools.UntilWithSync(ctx, lw, &v1alpha1.NodeDrain{}, gone, func(ev watch.Event) (bool, error) {
		return ev.Type == watch.Deleted, nil
	})
	return err
}

func hasRequester(nd *v1alpha1.NodeDrain, name string) bool { return requests.Index(nd, name) >= 0 }

func requesterList(nd *v1alpha1.NodeDrain) string {
	if len(nd.Spec.Requesters) == 0 {
		return "none"
	}
	names := make([]string, 0, len(nd.Spec.Requesters))
	for _, r := range nd.Spec.Requesters {
		names = append(names, r.Name)
	}
	return strings.Join(names, ", ")
}
