package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/utils/clock"
	"sigs.k8s.io/yaml"

	"github.com/spf13/cobra"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/explain"
	"github.com/vacate-dev/vacate/internal/policy"
	"github.com/vacate-dev/vacate/internal/progress"
)

// HTTP evacuation hook annotations on pods.
const (
	annotationEvacuatePort = "vacate.dev/evacuate-port"
	annotationEvacuatePath = "vacate.dev/evacuate-path"
)

type planOptions struct {
	flags   *genericclioptions.ConfigFlags
	streams Streams
	clock   clock.WithTicker
	targets
	policy string
	output string
}

func newPlanCommand(flags *genericclioptions.ConfigFlags, s Streams, clk clock.WithTicker) *cobra.Command {
	o := &planOptions{flags: flags, streams: s, clock: clk}
	cmd := &cobra.Command{
		Use:   "plan NODE... | --selector SELECTOR",
		Short: "Preview drains without changing anything",
		Long: `A dry run that only reads: for each node, which pods a drain would evict,
leave in place or be blocked by, and why (the same planner the controller
uses, with the same DrainPolicy); which PodDisruptionBudgets would block now
(disruptions allowed against the pods on the node); which evacuation hooks
would run; and an estimate of how long the evictions take.`,
		Example: `  # What would draining node-1 do?
  vacate plan node-1

  # A whole pool, under a stricter policy, as JSON
  vacate plan --selector pool=old --policy strict -o json`,
		ValidArgsFunction: completeNodes(flags),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), args)
		},
	}
	f := cmd.Flags()
	o.targets.addFlag(f, "plan for")
	f.StringVar(&o.policy, "policy", "", "plan with this DrainPolicy (default: the drain's own, else \"default\", else built-in defaults)")
	f.StringVarP(&o.output, "output", "o", "", "output format: json or yaml (default: text)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// NodePlan is the preview of one node's drain, as -o json|yaml prints it.
type NodePlan struct {
	Node   string `json:"node"`
	Policy string `json:"policy"`
	// Cordon says what would happen to the node's schedulability.
	Cordon   string         `json:"cordon"`
	Existing string         `json:"existingDrain,omitempty"`
	Pods     []PodPlan      `json:"pods"`
	PDBs     []PDBPlan      `json:"pdbs"`
	Hooks    []string       `json:"hooks"`
	Estimate Estimate       `json:"estimate"`
	Counts   map[string]int `json:"counts"`
	Blocked  []string       `json:"blocked"`
	// Unreachable are the pods terminating on a node that has not been
	// Ready for timeouts.unreachablePods: reported, not waited on.
	Unreachable []string `json:"unreachable,omitempty"`
}

// PodPlan is one pod's fate.
type PodPlan struct {
	Pod    string   `json:"pod"`
	Action string   `json:"action"`
	Reason string   `json:"reason"`
	Detail string   `json:"detail,omitempty"`
	PDBs   []string `json:"pdbs,omitempty"`
	// BlockedNow: the drain would report this pod as blocked now.
	BlockedNow bool `json:"blockedNow"`
}

// PDBPlan is what a PDB means for the drain.
type PDBPlan struct {
	Name           string   `json:"name"`
	Budget         string   `json:"budget"`
	Allowed        int32    `json:"disruptionsAllowed"`
	CurrentHealthy int32    `json:"currentHealthy"`
	DesiredHealthy int32    `json:"desiredHealthy"`
	ExpectedPods   int32    `json:"expectedPods"`
	OnNode         []string `json:"podsOnNode"`
	BlocksNow      bool     `json:"blocksNow"`
	Rounds         int      `json:"rounds"`
}

// Estimate bounds the time of the evictions.
type Estimate struct {
	Evictions   int     `json:"evictions"`
	Rounds      int     `json:"rounds"`
	LowSeconds  float64 `json:"lowSeconds"`
	HighSeconds float64 `json:"highSeconds"`
	// Finishes is false when the drain cannot finish without a change.
	Finishes bool `json:"finishes"`
}

func (o *planOptions) run(ctx context.Context, args []string) error {
	if err := o.targets.check("plan", "the nodes to plan for", args); err != nil {
		return err
	}
	switch {
	case o.output != "" && o.output != "json" && o.output != "yaml":
		return argsError{fmt.Sprintf("-o %q: must be json or yaml", o.output)}
	}
	s, err := connect(ctx, o.flags)
	if err != nil {
		return err
	}
	nodes, err := s.nodeNames(ctx, args, o.selector)
	if err != nil {
		return err
	}
	pdbList, err := s.clientset.PolicyV1().PodDisruptionBudgets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return s.explain(err, "listing PodDisruptionBudgets")
	}
	pdbs := make([]*policyv1.PodDisruptionBudget, 0, len(pdbList.Items))
	for i := range pdbList.Items {
		pdbs = append(pdbs, &pdbList.Items[i])
	}
	plans := make([]NodePlan, 0, len(nodes))
	for _, name := range nodes {
		p, err := o.planNode(ctx, s, name, pdbs)
		if err != nil {
			return err
		}
		plans = append(plans, p)
	}
	switch o.output {
	case "json":
		enc := json.NewEncoder(o.streams.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(plans)
	case "yaml":
		b, err := yaml.Marshal(plans)
		if err != nil {
			return err
		}
		_, err = o.streams.Out.Write(b)
		return err
	}
	for i, p := range plans {
		if i > 0 {
			fmt.Fprintln(o.streams.Out)
		}
		if err := writePlan(o.streams.Out, p); err != nil {
			return err
		}
	}
	return nil
}

// planNode reads what a drain of the node would meet, and plans it. It
// only reads.
func (o *planOptions) planNode(ctx context.Context, s *session, name string, pdbs []*policyv1.PodDisruptionBudget) (NodePlan, error) {
	node, err := s.node(ctx, name)
	if err != nil {
		return NodePlan{}, err
	}
	np := NodePlan{Node: name, Counts: map[string]int{}, Pods: []PodPlan{}, PDBs: []PDBPlan{}, Hooks: []string{}, Blocked: []string{}}
	policyName := o.policy
	existing := &v1alpha1.NodeDrain{}
	switch err := s.client.Get(ctx, types.NamespacedName{Name: name}, existing); {
	case err == nil:
		np.Existing = fmt.Sprintf("already requested by %s: %s", requesterList(existing), existing.Status.Phase)
		if policyName == "" {
			policyName = existing.Spec.PolicyName
		}
	case !apierrors.IsNotFound(err):
		return NodePlan{}, s.explain(err, "reading NodeDrain "+name)
	}
	pol, err := policy.Resolve(ctx, s.client, policyName, node)
	if policy.IsAmbiguous(err) {
		return NodePlan{}, fmt.Errorf("node %s: %w", name, err)
	}
	if policy.IsNotFound(err) {
		return NodePlan{}, fmt.Errorf("DrainPolicy %q not found in %s; see 'kubectl get drainpolicies'", policyName, s.where)
	}
	if err != nil {
		return NodePlan{}, s.explain(err, "reading the DrainPolicy")
	}
	np.Policy = pol.Describe()
	switch {
	case !node.Spec.Unschedulable:
		np.Cordon = "vacate cordons it (and uncordons it when the drain is cancelled)"
	case node.Annotations[v1alpha1.AnnotationCordonedBy] != "":
		drainName, _, _ := strings.Cut(node.Annotations[v1alpha1.AnnotationCordonedBy], "/") // <drain name>/<drain uid>
		np.Cordon = "already cordoned by vacate (drain " + drainName + ")"
	default:
		np.Cordon = "already cordoned by someone else; vacate leaves it cordoned after the drain"
	}
	podList, err := s.clientset.CoreV1().Pods("").List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", name).String()})
	if err != nil {
		return NodePlan{}, s.explain(err, "listing the pods of node "+name)
	}
	pods := make([]*corev1.Pod, 0, len(podList.Items))
	for i := range podList.Items {
		pods = append(pods, &podList.Items[i])
	}
	plan := drain.New(pods, pdbs, pol.Rules.ForNode(node), o.clock.Now())
	for _, d := range plan.Decisions {
		pp := PodPlan{Pod: d.Key(), Action: string(d.Action), Reason: string(d.Reason), Detail: d.Detail, PDBs: d.PDBs}
		pp.BlockedNow = d.Action == drain.Block || (d.Action == drain.Evict && d.PDBBlocked) ||
			(d.Action == drain.Wait && d.Reason == drain.ReasonWaitCompletion)
		if pp.BlockedNow {
			np.Blocked = append(np.Blocked, d.Key())
		}
		if d.Reason == drain.ReasonUnreachableTerminating {
			np.Unreachable = append(np.Unreachable, d.Key())
		}
		np.Counts[string(d.Action)]++
		np.Pods = append(np.Pods, pp)
		if port := d.Pod.Annotations[annotationEvacuatePort]; port != "" && d.Action != drain.Skip {
			np.Hooks = append(np.Hooks, fmt.Sprintf("HTTP hook of %s (port %s, path %s): not run by this version of vacate", d.Key(), port, d.Pod.Annotations[annotationEvacuatePath]))
		}
	}
	f := drain.NewForecast(plan, pdbs, pol.Grace, pol.PerNode)
	byName := map[string]*policyv1.PodDisruptionBudget{}
	for _, p := range pdbs {
		byName[p.Namespace+"/"+p.Name] = p
	}
	for _, pf := range f.PDBs {
		np.PDBs = append(np.PDBs, PDBPlan{Name: pf.Name, Budget: explain.Budget(byName[pf.Name]), Allowed: pf.Allowed,
			CurrentHealthy: pf.CurrentHealthy, DesiredHealthy: pf.DesiredHealthy, ExpectedPods: pf.ExpectedPods,
			OnNode: pf.OnNode, BlocksNow: pf.Blocks, Rounds: pf.Rounds})
	}
	np.Estimate = Estimate{Evictions: plan.Count(drain.Evict), Rounds: f.Rounds, LowSeconds: f.Low.Seconds(), HighSeconds: f.High.Seconds(),
		Finishes: !f.Stuck && len(np.Blocked) == 0}
	return np, nil
}

func writePlan(w io.Writer, p NodePlan) error {
	fmt.Fprintf(w, "Node %s\n  policy: %s\n  cordon: %s\n", p.Node, p.Policy, p.Cordon)
	if p.Existing != "" {
		fmt.Fprintf(w, "  drain:  %s\n", p.Existing)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  POD\tACTION\tREASON\tDETAIL")
	for _, pp := range p.Pods {
		action := pp.Action
		if pp.BlockedNow {
			action += " (blocked)"
		}
		detail := pp.Detail
		if detail == "" && len(pp.PDBs) > 0 {
			detail = "PDB " + strings.Join(pp.PDBs, ", ")
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", pp.Pod, action, pp.Reason, orDash(detail))
	}
	if len(p.Pods) == 0 {
		fmt.Fprintln(tw, "  (no pods)\t\t\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(p.PDBs) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  PDB\tBUDGET\tALLOWED\tHEALTHY\tON NODE\tVERDICT")
		for _, pdb := range p.PDBs {
			verdict := "ok: all at once"
			switch {
			case pdb.BlocksNow:
				verdict = "BLOCKS NOW: allows no disruption"
			case pdb.Rounds > 1:
				verdict = fmt.Sprintf("%d at a time: %d rounds", pdb.Allowed, pdb.Rounds)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%d/%d (needs %d)\t%d\t%s\n", pdb.Name, pdb.Budget, pdb.Allowed,
				pdb.CurrentHealthy, pdb.ExpectedPods, pdb.DesiredHealthy, len(pdb.OnNode), verdict)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	if len(p.Hooks) == 0 {
		fmt.Fprintln(w, "  evacuation hooks: none")
	} else {
		fmt.Fprintln(w, "  evacuation hooks:")
		for _, h := range p.Hooks {
			fmt.Fprintln(w, "    "+h)
		}
	}
	e := p.Estimate
	switch {
	case e.Evictions == 0 && len(p.Blocked) == 0:
		fmt.Fprintln(w, "  estimate: nothing to evict; the drain ends once the node is cordoned")
	case e.Evictions == 0:
		fmt.Fprintln(w, "  estimate: nothing to evict")
	default:
		fmt.Fprintf(w, "  estimate: %d eviction(s) in %d round(s): %s to %s (replacements assumed Ready in %s; up to each pod's grace period to stop)\n",
			e.Evictions, e.Rounds, progress.Duration(secs(e.LowSeconds)), progress.Duration(secs(e.HighSeconds)), progress.Duration(drain.ReplacementReady))
	}
	if len(p.Unreachable) > 0 {
		fmt.Fprintf(w, "  not waited on: %d pod(s) terminating on a node that is not Ready; its kubelet cannot confirm they stopped (%s)\n",
			len(p.Unreachable), strings.Join(p.Unreachable, ", "))
	}
	if !e.Finishes {
		fmt.Fprintf(w, "  would not finish now: %d pod(s) blocked (%s); once requested, 'vacate explain %s' says what to do\n",
			len(p.Blocked), strings.Join(p.Blocked, ", "), p.Node)
	}
	return nil
}

func secs(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
