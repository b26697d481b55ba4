package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spf13/cobra"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/nodedrain"
)

type cancelOptions struct {
	flags     *genericclioptions.ConfigFlags
	streams   Streams
	selector  string
	requester string
	wait      bool
	timeout   time.Duration
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
  vacate cancel node-1 --requester ci:upgrade-pipeline`,
		ValidArgsFunction: completeNodes(flags),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), args)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.selector, "selector", "l", "", "cancel for the nodes with these labels instead of naming them")
	f.StringVar(&o.requester, "requester", "", "the requester name to withdraw (default: cli:<your user name>)")
	f.BoolVarP(&o.wait, "wait", "w", true, "wait for the restore and show it")
	f.DurationVar(&o.timeout, "timeout", 2*time.Minute, "how long to wait for the restore")
	return cmd
}

func (o *cancelOptions) run(ctx context.Context, args []string) error {
	switch {
	case len(args) == 0 && o.selector == "":
		return argsError{"name the nodes whose drain to cancel, or pass --selector; see 'vacate cancel --help'"}
	case len(args) > 0 && o.selector != "":
		return argsError{"name the nodes or pass --selector, not both"}
	case o.requester != "" && !validRequester.MatchString(o.requester):
		return argsError{fmt.Sprintf("--requester %q: use letters, digits and . _ : @ / - (starting with a letter or digit)", o.requester)}
	}
	s, err := connect(ctx, o.flags)
	if err != nil {
		return err
	}
	nodes, err := s.nodeNames(ctx, args, o.selector)
	if err != nil {
		return err
	}
	requester := o.requester
	if requester == "" {
		if requester, err = s.whoAmI(ctx, o.flags); err != nil {
			return err
		}
	}
	var notMine []string
	for _, node := range nodes {
		mine, err := o.cancel(ctx, s, node, requester)
		if err != nil {
			return err
		}
		if !mine {
			notMine = append(notMine, node)
		}
	}
	if len(notMine) > 0 {
		return fmt.Errorf("%s did not request the drain of %s; nothing changed there (see 'vacate status')", requester, strings.Join(notMine, ", "))
	}
	return nil
}

// cancel withdraws the requester from one node's drain. It returns false
// when the drain exists but the requester is not among its requesters.
func (o *cancelOptions) cancel(ctx context.Context, s *session, node, requester string) (bool, error) {
	out := o.streams.Out
	nd := &v1alpha1.NodeDrain{}
	err := s.client.Get(ctx, types.NamespacedName{Name: node}, nd)
	if apierrors.IsNotFound(err) {
		fmt.Fprintf(out, "nodedrain/%s: no drain requested; nothing to cancel\n", node)
		return true, nil
	}
	if err != nil {
		return false, s.explain(err, "reading NodeDrain "+node)
	}
	if !hasRequester(nd, requester) {
		fmt.Fprintf(out, "nodedrain/%s: %s is not a requester (requesters: %s)\n", node, requester, requesterList(nd))
		return false, nil
	}
	evicted := nd.Status.Evicted // the undo resets the counts
	if nd, err = o.withdraw(ctx, s, nd, requester); err != nil {
		return false, err
	}
	if len(nd.Spec.Requesters) > 0 {
		fmt.Fprintf(out, "nodedrain/%s: request of %s withdrawn; the drain goes on for %s\n", node, requester, requesterList(nd))
		return true, nil
	}
	if err := deleteIfIdle(ctx, s, nd); err != nil {
		return false, err
	}
	fmt.Fprintf(out, "nodedrain/%s: request of %s withdrawn; it was the last: restoring the node\n", node, requester)
	if !o.wait {
		return true, nil
	}
	return true, o.showRestore(ctx, s, nd, evicted)
}

// withdraw removes the requester's entry: by applying the drain without it
// under the requester's field manager (which owns the entry when vacate
// drain added it), else, for an entry someone wrote another way, by a JSON
// patch that tests the entry is still the one it removes.
func (o *cancelOptions) withdraw(ctx context.Context, s *session, nd *v1alpha1.NodeDrain, requester string) (*v1alpha1.NodeDrain, error) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(),
		"kind":       "NodeDrain",
		"metadata":   map[string]any{"name": nd.Name, "uid": string(nd.UID)},
		"spec":       map[string]any{"nodeName": nd.Spec.NodeName},
	}}
	if err := s.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(fieldManager(requester))); err != nil {
		return nil, s.explain(err, "withdrawing the request on NodeDrain "+nd.Name)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := s.client.Get(ctx, types.NamespacedName{Name: nd.Name}, nd); err != nil {
			return false, s.explain(err, "reading NodeDrain "+nd.Name)
		}
		i := requesterIndex(nd, requester)
		if i < 0 {
			return true, nil
		}
		ops, _ := json.Marshal([]map[string]any{
			{"op": "test", "path": fmt.Sprintf("/spec/requesters/%d/name", i), "value": requester},
			{"op": "remove", "path": fmt.Sprintf("/spec/requesters/%d", i)},
		})
		err := s.client.Patch(ctx, nd, client.RawPatch(types.JSONPatchType, ops))
		if apierrors.IsInvalid(err) || apierrors.IsConflict(err) || isTestFailed(err) {
			return false, nil // the list changed under us: look again
		}
		if err != nil {
			return false, s.explain(err, "withdrawing the request on NodeDrain "+nd.Name)
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("withdrawing %s from NodeDrain %s: %w", requester, nd.Name, err)
	}
	return nd, nil
}

// isTestFailed recognises a JSON patch whose test operation failed: the API
// server answers 422 (handled as Invalid) or, for some versions, 500 with
// a StatusReasonInternalError; both mean the list moved.
func isTestFailed(err error) bool {
	return apierrors.IsInternalError(err) || apierrors.IsBadRequest(err)
}

// deleteIfIdle deletes a NodeDrain that has no requester left, so the
// controller undoes the drain and releases it. The preconditions make sure
// nobody joined the drain in between; if someone did, it stays.
func deleteIfIdle(ctx context.Context, s *session, nd *v1alpha1.NodeDrain) error {
	for range 10 {
		uid, rv := nd.UID, nd.ResourceVersion
		err := s.client.Delete(ctx, nd, client.Preconditions{UID: &uid, ResourceVersion: &rv})
		switch {
		case err == nil, apierrors.IsNotFound(err):
			return nil
		case !apierrors.IsConflict(err):
			return s.explain(err, "deleting NodeDrain "+nd.Name)
		}
		if err := s.client.Get(ctx, types.NamespacedName{Name: nd.Name}, nd); err != nil {
			return client.IgnoreNotFound(s.explain(err, "reading NodeDrain "+nd.Name))
		}
		if len(nd.Spec.Requesters) > 0 {
			return nil // someone joined: the drain goes on for them
		}
	}
	return fmt.Errorf("NodeDrain %s kept changing; cancel again", nd.Name)
}

// showRestore waits until the NodeDrain is gone (the controller undid the
// drain and released its finalizer) and says what became of the node.
func (o *cancelOptions) showRestore(ctx context.Context, s *session, nd *v1alpha1.NodeDrain, evicted int32) error {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, o.timeout, true, func(ctx context.Context) (bool, error) {
		err := s.client.Get(ctx, types.NamespacedName{Name: nd.Name}, &v1alpha1.NodeDrain{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, s.explain(err, "reading NodeDrain "+nd.Name)
	})
	if err != nil {
		return exitError{code: ExitTimeout, err: fmt.Errorf("NodeDrain %s is not restored after %s: is the vacate controller running? (%v)", nd.Name, o.timeout, err)}
	}
	node, err := s.node(ctx, nd.Spec.NodeName)
	if err != nil {
		return err
	}
	switch {
	case node.Spec.Unschedulable:
		fmt.Fprintf(o.streams.Out, "node/%s: restored; left cordoned because vacate did not cordon it (someone else did)\n", node.Name)
	case node.Annotations[nodedrain.AnnotationCordonedBy] != "":
		fmt.Fprintf(o.streams.Out, "node/%s: restored; still annotated %s=%s\n", node.Name, nodedrain.AnnotationCordonedBy, node.Annotations[nodedrain.AnnotationCordonedBy])
	default:
		fmt.Fprintf(o.streams.Out, "node/%s: restored: schedulable again; %d pod(s) that left stay where they were rescheduled\n", node.Name, evicted)
	}
	return nil
}

func requesterIndex(nd *v1alpha1.NodeDrain, name string) int {
	for i, r := range nd.Spec.Requesters {
		if r.Name == name {
			return i
		}
	}
	return -1
}

func hasRequester(nd *v1alpha1.NodeDrain, name string) bool { return requesterIndex(nd, name) >= 0 }

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
