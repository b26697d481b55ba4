package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/progress"
	"github.com/vacate-dev/vacate/internal/providers"
)

type releaseOptions struct {
	flags    *genericclioptions.ConfigFlags
	streams  Streams
	clock    clock.PassiveClock
	provider string
	reason   string
	yes      bool
	dryRun   dryRun
	wait     bool
	timeout  time.Duration
}

func newReleaseCommand(flags *genericclioptions.ConfigFlags, s Streams, clk clock.PassiveClock) *cobra.Command {
	o := &releaseOptions{flags: flags, streams: s, clock: clk}
	cmd := &cobra.Command{
		Use:   "release NODE --provider NAME [--reason TEXT] [--yes] [--dry-run]",
		Short: "Let a drain go on without a provider's evacuation (audited; its data may not have moved)",
		Long: `A pod an evacuation protects stays on its node until that evacuation is
Completed, even when its EvacuationProvider is deleted, narrowed or broken:
its data may not have moved yet. When the provider cannot finish (it was
uninstalled, its data is lost, or the data was moved some other way),
release is the only way to let those pods go without it.

Shows the node's Evacuation for the provider: the provider's state (deleted,
stale, its last word) and the pods it still protects on the node. Then, once
you confirm (on a terminal; --yes otherwise), records on the Evacuation who
released it (your user, as the API server knows you), why (--reason) and
when. The controller counts it as done, evicts the pods, records an
EvacuationReleased event on the NodeDrain and shows the evacuation as
Released in its status. A release cannot be changed or withdrawn.

Prefer to restore the provider (re-create it, or let it finish) when its
data still matters; 'vacate explain NODE' shows both ways.`,
		Example: `  # See what would be released, writing nothing
  vacate release node-1 --provider volumes --dry-run

  # The volume provider was uninstalled and its replicas are elsewhere: let the pods go
  vacate release node-1 --provider volumes --reason "INC-42: replicas rebuilt from backup"`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return argsError{fmt.Sprintf("release takes one node, got %d; see 'vacate release --help'", len(args))}
			}
			return nil
		},
		ValidArgsFunction: completeNodes(flags),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), args[0])
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.provider, "provider", "", "the EvacuationProvider whose evacuation to release (required)")
	_ = cmd.RegisterFlagCompletionFunc("provider", completeProviders(flags))
	f.StringVar(&o.reason, "reason", "", "why, for the record (a ticket, an incident); kept on the Evacuation and in the drain's status and event")
	f.BoolVarP(&o.yes, "yes", "y", false, "release without asking (needed when stdin is not a terminal)")
	addDryRun(f, &o.dryRun, "none, client (show what would be released; write nothing) or server (also check the release with the API server, its RBAC and admission policies, in a server-side dry run; nothing is stored)",
		dryRunClient, dryRunServer)
	f.BoolVarP(&o.wait, "wait", "w", true, "wait until the drain shows the evacuation Released, and show it")
	f.DurationVar(&o.timeout, "timeout", 30*time.Second, "how long to wait for the drain to show the release (0: as long as it takes)")
	return cmd
}

// notReleasableError: there is nothing the release may release; it says
// why and what to look at instead.
type notReleasableError struct{ msg string }

func (e notReleasableError) Error() string { return e.msg }

// releaseTarget is what a release reads before it writes.
type releaseTarget struct {
	node     *corev1.Node
	drain    *v1alpha1.NodeDrain
	ev       *v1alpha1.Evacuation
	provider *v1alpha1.EvacuationProvider // nil: gone
	held     []string                     // protected pods still on the node, namespace/name
}

func (o *releaseOptions) run(ctx context.Context, node string) error {
	if o.provider == "" {
		return argsError{"name the provider whose evacuation to release with --provider NAME; 'vacate explain " + node + "' names it"}
	}
	if o.timeout < 0 {
		return argsError{fmt.Sprintf("--timeout %s: must not be negative", o.timeout)}
	}
	s, err := connect(ctx, o.flags)
	if err != nil {
		return err
	}
	t, err := o.read(ctx, s, node)
	if err != nil {
		return err
	}
	by, err := releaser(ctx, s, o.flags)
	if err != nil {
		return err
	}
	o.show(t, by)
	if o.dryRun.client() {
		fmt.Fprintf(o.streams.Out, "dry run: nothing written; --dry-run=server also asks the API server whether it would accept the release of evacuation/%s\n", t.ev.Name)
		return nil
	}
	if !o.dryRun.any() {
		if err := o.confirm(t.ev.Name); err != nil {
			return err
		}
		// What was shown may have changed while the person read it.
		if t, err = o.read(ctx, s, node); err != nil {
			return err
		}
	}
	rel := v1alpha1.EvacuationRelease{By: by, Reason: o.reason, Time: metav1.NewTime(o.clock.Now()).Rfc3339Copy()}
	if err := o.write(ctx, s, t, rel); err != nil {
		return err
	}
	out := o.streams.Out
	if o.dryRun.server() {
		fmt.Fprintf(out, "dry run: nothing written (the API server accepted the release of evacuation/%s in a server-side dry run)\n", t.ev.Name)
		return nil
	}
	fmt.Fprintf(out, "evacuation/%s released by %s", t.ev.Name, by)
	if o.reason != "" {
		fmt.Fprintf(out, ": %s", o.reason)
	}
	fmt.Fprintln(out)
	if !o.wait {
		return nil
	}
	return o.showReleased(ctx, s, t)
}

// read finds the node's Evacuation for the provider and checks that there
// is something to release: it belongs to the node's running drain, and is
// neither Completed nor released already.
func (o *releaseOptions) read(ctx context.Context, s *session, node string) (*releaseTarget, error) {
	n, err := s.node(ctx, node)
	if err != nil {
		return nil, err
	}
	t := &releaseTarget{node: n, drain: &v1alpha1.NodeDrain{}, ev: &v1alpha1.Evacuation{}}
	err = s.client.Get(ctx, types.NamespacedName{Name: node}, t.drain)
	if apierrors.IsNotFound(err) {
		return nil, notReleasableError{fmt.Sprintf("node %s has no drain, so no evacuation holds its pods: nothing to release ('vacate status' lists the drains)", node)}
	}
	if err != nil {
		return nil, s.explain(err, "reading NodeDrain "+node)
	}
	// Found by its spec, not its name.
	list := &v1alpha1.EvacuationList{}
	if err := s.client.List(ctx, list); err != nil {
		return nil, s.explain(err, "listing Evacuations")
	}
	found := false
	for i := range list.Items {
		if ev := &list.Items[i]; ev.Spec.NodeName == node && ev.Spec.Provider == o.provider && !ev.ForEviction() {
			t.ev, found = ev, true
		}
	}
	if !found {
		return nil, o.noEvacuation(list, node)
	}
	if err := releasable(t); err != nil {
		return nil, err
	}
	if t.provider, err = o.readProvider(ctx, s); err != nil {
		return nil, err
	}
	if t.held, err = heldOnNode(ctx, s, t.ev, node); err != nil {
		return nil, err
	}
	return t, nil
}

// noEvacuation says that the provider has no Evacuation on the node, and
// which providers do.
func (o *releaseOptions) noEvacuation(list *v1alpha1.EvacuationList, node string) error {
	var there []string
	for _, ev := range list.Items {
		if ev.Spec.NodeName == node {
			there = append(there, ev.Spec.Provider)
		}
	}
	sort.Strings(there)
	others := "there is none"
	if len(there) > 0 {
		others = "evacuations there: " + strings.Join(there, ", ")
	}
	return notReleasableError{fmt.Sprintf("no Evacuation of provider %q on node %s (%s); 'vacate explain %s' names what holds its pods", o.provider, node, others, node)}
}

// releasable refuses an Evacuation that the node's running drain does not
// wait for: another drain's or node's, one whose drain ended or is being
// undone, one Completed, or one already released.
func releasable(t *releaseTarget) error {
	ev, nd := t.ev, t.drain
	node := nd.Spec.NodeName
	refuse := func(format string, args ...any) error {
		return notReleasableError{fmt.Sprintf("Evacuation %s ", ev.Name) + fmt.Sprintf(format, args...)}
	}
	switch {
	case ev.Spec.DrainUID != string(nd.UID) || (ev.Spec.NodeUID != "" && ev.Spec.NodeUID != string(t.node.UID)):
		return refuse("belongs to no running drain of node %s (an earlier drain, or the node before it was re-created, left it): nothing to release", node)
	case !nd.Requested():
		return refuse("belongs to a drain of node %s that is being cancelled and undone: nothing to release", node)
	case ev.Spec.Release != nil:
		r := ev.Spec.Release
		msg := fmt.Sprintf("was already released by %s at %s", r.By, r.Time.UTC().Format(time.RFC3339))
		if r.Reason != "" {
			msg += ": " + r.Reason
		}
		return refuse("%s; a release cannot be changed or withdrawn", msg)
	case ev.Generation > 0 && ev.CurrentPhase() == v1alpha1.EvacuationCompleted:
		return refuse("is Completed: provider %s moved its data; nothing to release", ev.Spec.Provider)
	case nd.Ended():
		return refuse("belongs to a drain of node %s that ended %s: a release changes nothing ('vacate explain %s')", node, nd.Status.Phase, node)
	}
	return nil
}

// readProvider reads the provider; nil when it is gone.
func (o *releaseOptions) readProvider(ctx context.Context, s *session) (*v1alpha1.EvacuationProvider, error) {
	p := &v1alpha1.EvacuationProvider{}
	err := s.client.Get(ctx, types.NamespacedName{Name: o.provider}, p)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, s.explain(err, "reading EvacuationProvider "+o.provider)
	}
	return p, nil
}

// heldOnNode are the pods the Evacuation protects that are still on the
// node (the same pods: same UIDs), as namespace/name.
func heldOnNode(ctx context.Context, s *session, ev *v1alpha1.Evacuation, node string) ([]string, error) {
	pods, err := s.clientset.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, s.explain(err, "listing the pods on node "+node)
	}
	var out []string
	for _, p := range pods.Items {
		if slices.ContainsFunc(ev.Spec.ProtectedPods, func(pp v1alpha1.ProtectedPod) bool { return pp.UID == string(p.UID) }) {
			out = append(out, p.Namespace+"/"+p.Name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// releaser is the user the API server authenticates the caller as
// (SelfSubjectReview), for the record. Clusters without SelfSubjectReview
// fall back to the kubeconfig's user name, as requester names do.
func releaser(ctx context.Context, s *session, flags *genericclioptions.ConfigFlags) (string, error) {
	review, err := s.clientset.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	switch {
	case err == nil && review.Status.UserInfo.Username != "":
		return review.Status.UserInfo.Username, nil
	case err != nil && !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) && !apierrors.IsMethodNotSupported(err):
		return "", s.explain(err, "asking the API server who you are")
	}
	name, err := s.whoAmI(ctx, flags)
	if err != nil {
		return "", err
	}
	return strings.TrimPrefix(name, "cli:"), nil
}

// show prints what the release lets go, and the warning.
func (o *releaseOptions) show(t *releaseTarget, by string) {
	ev, w, now := t.ev, o.streams.Out, o.clock.Now()
	fmt.Fprintf(w, "Evacuation %s: node %s, provider %s, drain %s (mode %s, stage %s)\n", ev.Name, ev.Spec.NodeName, ev.Spec.Provider,
		ev.Spec.DrainUID, ev.Spec.Mode, providers.StageOf(ev))
	fmt.Fprintf(w, "  provider:  %s\n", providerState(t.provider, ev, now))
	fmt.Fprintf(w, "  status:    %s\n", evacuationState(ev, now))
	for _, h := range t.drain.Status.Hooks {
		if h.Name == ev.Name {
			fmt.Fprintf(w, "  the drain: %s\n", h.Message)
		}
	}
	switch {
	case len(t.held) > 0:
		fmt.Fprintf(w, "  protects:  %d pod(s) still on the node:\n", len(t.held))
		for _, p := range t.held {
			fmt.Fprintf(w, "    %s\n", p)
		}
	default:
		fmt.Fprintf(w, "  protects:  none of its %d pod(s) is still on the node\n", len(ev.Spec.ProtectedPods))
	}
	then := "vacate evicts them without waiting for it"
	if providers.StageOf(ev) == v1alpha1.StageAfterEviction {
		then = "vacate counts the node Drained without waiting for it"
	}
	fmt.Fprintf(w, "WARNING: their data may not have moved: provider %s never reported this evacuation Completed. Once released, %s. "+
		"The release is recorded with your name (%s) and reason, and cannot be withdrawn.\n", ev.Spec.Provider, then, by)
}

// providerState says whether the provider is gone, being deleted, silent
// past its timeout, or reporting.
func providerState(p *v1alpha1.EvacuationProvider, ev *v1alpha1.Evacuation, now time.Time) string {
	switch {
	case p == nil:
		return ev.Spec.Provider + " is gone (deleted): nothing will finish this evacuation unless it is re-created"
	case !p.DeletionTimestamp.IsZero():
		return fmt.Sprintf("%s is being deleted (for %s); its finalizer %s keeps it until this evacuation is finished or released",
			p.Name, progress.Duration(now.Sub(p.DeletionTimestamp.Time)), v1alpha1.FinalizerEvacuations)
	}
	timeout := v1alpha1.DefaultProviderTimeout
	if p.Spec.Timeout != nil {
		timeout = p.Spec.Timeout.Duration
	}
	silent := now.Sub(ev.LastHeard())
	if silent >= timeout {
		return fmt.Sprintf("%s is registered but stale: not heard from for %s (timeout %s)", p.Name, progress.Duration(silent), timeout)
	}
	return fmt.Sprintf("%s is registered and reporting (heard from %s ago): it may still finish; releasing stops waiting for it", p.Name, progress.Duration(silent))
}

// evacuationState is the provider's answer to the current request.
func evacuationState(ev *v1alpha1.Evacuation, now time.Time) string {
	st := ev.Status
	if !ev.Answered() {
		return fmt.Sprintf("not taken up: the provider has not answered this request (asked %s ago)", progress.Duration(now.Sub(ev.CreationTimestamp.Time)))
	}
	msg := string(st.Phase)
	if st.Message != "" {
		msg += ": " + st.Message
	}
	if st.Remaining > 0 {
		msg += fmt.Sprintf(" (%d remaining)", st.Remaining)
	}
	if st.HeartbeatTime != nil {
		msg += fmt.Sprintf("; last heartbeat %s ago", progress.Duration(now.Sub(st.HeartbeatTime.Time)))
	}
	return msg
}

// confirm asks on a terminal, and refuses without one unless --yes.
func (o *releaseOptions) confirm(name string) error {
	if o.yes {
		return nil
	}
	if !isTerminal(o.streams.In) {
		return usageError{fmt.Errorf("not released: stdin is not a terminal to confirm on; pass --yes to release from a script")}
	}
	fmt.Fprintf(o.streams.Out, "Release Evacuation %s? [y/N]: ", name)
	answer, err := bufio.NewReader(o.streams.In).ReadString('\n')
	if err != nil && err != io.EOF {
		return fmt.Errorf("reading your answer: %w", err)
	}
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "y", "yes":
		return nil
	}
	return fmt.Errorf("not released: you did not confirm")
}

func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// write sets spec.release with a JSON patch that first tests the
// Evacuation's UID and the drain (and node) it belongs to, so a release
// never lands on another drain's Evacuation. A refused test or rule is
// explained from a fresh read.
func (o *releaseOptions) write(ctx context.Context, s *session, t *releaseTarget, rel v1alpha1.EvacuationRelease) error {
	ev := t.ev
	ops := []map[string]any{
		{"op": "test", "path": "/metadata/uid", "value": ev.UID},
		{"op": "test", "path": "/spec/drainUID", "value": ev.Spec.DrainUID},
	}
	if ev.Spec.NodeUID != "" {
		ops = append(ops, map[string]any{"op": "test", "path": "/spec/nodeUID", "value": ev.Spec.NodeUID})
	}
	ops = append(ops, map[string]any{"op": "add", "path": "/spec/release", "value": rel})
	data, err := json.Marshal(ops)
	if err != nil {
		return fmt.Errorf("encoding the release of Evacuation %s: %w", ev.Name, err)
	}
	var opts []client.PatchOption
	if o.dryRun.server() {
		opts = append(opts, client.DryRunAll)
	}
	err = s.client.Patch(ctx, ev.DeepCopy(), client.RawPatch(types.JSONPatchType, data), opts...)
	switch {
	case apierrors.IsInvalid(err), apierrors.IsNotFound(err):
		now, rerr := o.read(ctx, s, t.node.Name)
		switch {
		case rerr != nil:
			return rerr // it changed since it was read, and says how
		case now.ev.UID != ev.UID || now.ev.Spec.DrainUID != ev.Spec.DrainUID || now.ev.Spec.NodeUID != ev.Spec.NodeUID:
			return fmt.Errorf("the API server refused the release of Evacuation %s: it was re-created or taken over by another drain since it was read; "+
				"nothing was written: run the release again to see it as it is now", ev.Name)
		}
		return fmt.Errorf("the API server refused the release of Evacuation %s: %s", ev.Name, conflictFields(err))
	case err != nil:
		return s.explain(err, "releasing Evacuation "+ev.Name)
	}
	return nil
}

// showReleased waits until the drain shows the evacuation Released and
// prints that entry of its status.hooks.
func (o *releaseOptions) showReleased(ctx context.Context, s *session, t *releaseTarget) error {
	node, name := t.drain.Name, t.ev.Name
	var entry v1alpha1.HookStatus
	poll := func(ctx context.Context) (bool, error) {
		nd := &v1alpha1.NodeDrain{}
		if err := s.client.Get(ctx, types.NamespacedName{Name: node}, nd); err != nil {
			return false, s.explain(err, "reading NodeDrain "+node)
		}
		for _, h := range nd.Status.Hooks {
			if h.Name == name && h.Phase == v1alpha1.PhaseReleased {
				entry = h
				return true, nil
			}
		}
		return false, nil
	}
	var err error
	if o.timeout > 0 {
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, o.timeout, true, poll)
	} else {
		err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, poll)
	}
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return exitError{code: ExitTimeout, err: fmt.Errorf("stopped waiting; the release of %s is recorded and the controller acts on it", name)}
	case wait.Interrupted(err):
		return exitError{code: ExitTimeout, err: fmt.Errorf("the release of %s is recorded, but the drain of %s has not shown it after %s: is the vacate controller running? ('vacate explain %s')",
			name, node, o.timeout, node)}
	default:
		return err
	}
	fmt.Fprintf(o.streams.Out, "nodedrain/%s: %s %s: %s\n", node, name, entry.Phase, entry.Message)
	next := "the pods it protected are evicted now"
	if providers.StageOf(t.ev) == v1alpha1.StageAfterEviction {
		next = "the drain no longer waits for it"
	}
	fmt.Fprintf(o.streams.Out, "%s; follow with 'vacate status %s --watch'\n", next, node)
	return nil
}
