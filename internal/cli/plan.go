package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/utils/clock"
	"sigs.k8s.io/yaml"

	"github.com/spf13/cobra"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/explain"
	"github.com/vacate-dev/vacate/internal/hold"
	"github.com/vacate-dev/vacate/internal/hook"
	"github.com/vacate-dev/vacate/internal/policy"
	"github.com/vacate-dev/vacate/internal/progress"
	"github.com/vacate-dev/vacate/internal/providers"
	"github.com/vacate-dev/vacate/internal/surge"
)

type planOptions struct {
	flags   *genericclioptions.ConfigFlags
	streams Streams
	clock   clock.WithTicker
	targets
	policy string
	output string
	mode   string
	// allowLoopback plans hooks as a controller run with
	// --allow-loopback-hooks calls them.
	allowLoopback bool
	// as plans with this requester's entry added to the drain's (vacate
	// drain --dry-run=client: its overrides count).
	as *v1alpha1.Requester
}

func newPlanCommand(flags *genericclioptions.ConfigFlags, s Streams, clk clock.WithTicker) *cobra.Command {
	o := &planOptions{flags: flags, streams: s, clock: clk}
	cmd := &cobra.Command{
		Use:   "plan NODE... | --selector SELECTOR",
		Short: "Preview drains without changing anything",
		Long: `A dry run that only reads: for each node, which pods a drain would evict,
leave in place or be blocked by, and why (the same planner the controller
uses, with the same DrainPolicy, honouring pods' own annotations only where
the policy does); which PodDisruptionBudgets would block now (disruptions
allowed against the pods on the node); whose HTTP evacuation hook the
controller would call before the pod's eviction, and where, or why not;
which EvacuationProviders it would ask, and which pods each would hold; the
node's Evacuations; and an estimate of how long the evictions take, and
what bounds the evacuations.`,
		Example: `  # What would draining node-1 do?
  vacate plan node-1

  # A whole pool, under a stricter policy, as JSON
  vacate plan --selector pool=old --policy strict -o json

  # Which providers would a decommission ask?
  vacate plan node-1 --mode Decommission`,
		ValidArgsFunction: completeNodes(flags),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), args)
		},
	}
	f := cmd.Flags()
	o.targets.addFlag(f, "plan for")
	f.StringVar(&o.policy, "policy", "", "plan with this DrainPolicy (default: the drain's own, else \"default\", else built-in defaults)")
	f.StringVarP(&o.output, "output", "o", "", "output format: json, yaml, name, jsonpath=TEMPLATE or custom-columns=NAME:.path,... (default, and wide: text)")
	f.StringVar(&o.mode, "mode", "", "plan a drain in this mode, Maintenance or Decommission (default: the drain's current mode, Maintenance for a new one)")
	f.BoolVar(&o.allowLoopback, "allow-loopback-hooks", false, "plan HTTP hooks as a vacate-controller run with --allow-loopback-hooks calls them (development clusters, whose pods have loopback addresses)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(outputFormats, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("mode", completeModes)
	_ = cmd.RegisterFlagCompletionFunc("policy", completePolicies(flags))
	return cmd
}

// NodePlan is the preview of one node's drain, as -o json|yaml prints it.
type NodePlan struct {
	Node   string `json:"node"`
	Policy string `json:"policy"`
	// Mode is the drain mode planned for.
	Mode string `json:"mode"`
	// Cordon says what would happen to the node's schedulability.
	Cordon   string    `json:"cordon"`
	Existing string    `json:"existingDrain,omitempty"`
	Pods     []PodPlan `json:"pods"`
	PDBs     []PDBPlan `json:"pdbs"`
	// Hooks says, for each pod with the annotation
	// vacate.dev/evacuate-port, what happens to its HTTP hook, in words
	// (HTTPHooks has the same as objects).
	Hooks     []string   `json:"hooks"`
	HTTPHooks []HookPlan `json:"httpHooks"`
	// Providers are the EvacuationProviders, asked or not, and why.
	Providers []ProviderPlan `json:"evacuationProviders"`
	// Evacuations are the node's Evacuations as they are now.
	Evacuations []EvacuationPlan `json:"evacuations"`
	Estimate    Estimate         `json:"estimate"`
	Counts      map[string]int   `json:"counts"`
	Blocked     []string         `json:"blocked"`
	// Held are the pods that leave only once an evacuation (an
	// EvacuationProvider's or their HTTP hook) Completed.
	Held []string `json:"held"`
	// Unreachable are the pods terminating on a node that has not been
	// Ready for timeouts.unreachablePods: reported, not waited on.
	Unreachable []string `json:"unreachable,omitempty"`
	// Overrides say what the requesters' overrides (kubectl drain's flags)
	// change in the policy's pod rules.
	Overrides []string `json:"overrides,omitempty"`
}

// withRequester is requesters with r in place of the entry of its name, or
// added.
func withRequester(requesters []v1alpha1.Requester, r v1alpha1.Requester) []v1alpha1.Requester {
	out := make([]v1alpha1.Requester, 0, len(requesters)+1)
	for _, e := range requesters {
		if e.Name != r.Name {
			out = append(out, e)
		}
	}
	return append(out, r)
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
	// HeldBy are the evacuations the pod waits for: "Evacuation <name>",
	// "HTTP hook of pod <namespace>/<name>".
	HeldBy []string `json:"heldBy,omitempty"`
	// IgnoredAnnotations are the pod's own annotations the policy does not
	// honour in its namespace (pods.annotationNamespaceSelector): it is
	// planned as if it had none.
	IgnoredAnnotations []string `json:"ignoredAnnotations,omitempty"`
	// Surge says whether the drain brings up a replacement of the pod
	// elsewhere, Ready, before it evicts it (DrainPolicy surge), and why
	// or why not; unset when the policy does not surge, or the pod can
	// leave without one.
	Surge *SurgePlan `json:"surge,omitempty"`
}

// SurgePlan is a pod's surge, as the drain would decide it now.
type SurgePlan struct {
	Surged bool   `json:"surged"`
	Why    string `json:"why"`
}

// HookPlan is what the drain would do with one pod's HTTP evacuation hook.
type HookPlan struct {
	Pod string `json:"pod"`
	// Called: the controller POSTs to URL before it evicts the pod.
	Called bool   `json:"called"`
	URL    string `json:"url,omitempty"`
	// Holds: the pod is not evicted until the hook answers Completed, or,
	// when it is not called for a fault of the pod (bad annotations, an
	// address vacate never calls), until that is fixed.
	Holds bool   `json:"holds"`
	Why   string `json:"why"`
	// Caller says what the hook is told of who calls it (a token of
	// vacate-controller's service account for this pod) and, once the
	// drain's run has an answer, whether the hook said it verified it.
	Caller string `json:"caller,omitempty"`
}

// ProviderPlan is what the drain would ask of one EvacuationProvider.
type ProviderPlan struct {
	Name  string `json:"name"`
	Stage string `json:"stage"`
	// Modes the provider takes part in; empty: every mode.
	Modes []string `json:"modes,omitempty"`
	// Asked: the drain creates (or keeps) the Evacuation named Evacuation.
	Asked      bool   `json:"asked"`
	Evacuation string `json:"evacuation,omitempty"`
	// Pods are the pods leaving the node that the provider protects (with,
	// for an Evacuation of the node's current drain that still holds, the
	// pods it recorded that are still on the node).
	Pods []string `json:"pods"`
	// Holds: those pods are evicted only once the Evacuation Completed.
	Holds bool `json:"holds"`
	// HeartbeatTimeoutSeconds is spec.timeout: silent longer, the provider
	// is reported stale (its pods stay held).
	HeartbeatTimeoutSeconds float64 `json:"heartbeatTimeoutSeconds"`
	Why                     string  `json:"why"`
}

// EvacuationPlan is one of the node's Evacuations as it is now.
type EvacuationPlan struct {
	Name     string `json:"name"`
	Provider string `json:"provider"`
	Stage    string `json:"stage"`
	Mode     string `json:"mode"`
	// Phase is Pending until the provider answered the current spec.
	Phase      string `json:"phase"`
	Message    string `json:"message,omitempty"`
	ReleasedBy string `json:"releasedBy,omitempty"`
	// CurrentDrain: asked by the node's current NodeDrain; otherwise left
	// by an earlier drain, and taken over by the next one that asks the
	// provider.
	CurrentDrain bool `json:"currentDrain"`
	// Deleting: it is being deleted; vacate has its provider cancel it
	// first, and it holds its pods until it is gone.
	Deleting bool `json:"deleting,omitempty"`
	// PodsOnNode are the pods it protects that are still on the node.
	PodsOnNode []string `json:"podsOnNode"`
	// Holds: it keeps those pods from being evicted until it Completed.
	Holds bool `json:"holds"`
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

// Estimate bounds the time of the evictions. How long an evacuation takes
// is not known: LowSeconds and HighSeconds count the evictions only, and
// the evacuation fields say what the drain waits for and what bounds it.
type Estimate struct {
	Evictions   int     `json:"evictions"`
	Rounds      int     `json:"rounds"`
	LowSeconds  float64 `json:"lowSeconds"`
	HighSeconds float64 `json:"highSeconds"`
	// Finishes is false when the drain cannot finish without a change.
	Finishes bool `json:"finishes"`
	// EvacuationsBefore are the evacuations before eviction the drain
	// waits for (Evacuations of BeforeEviction providers, HTTP hooks);
	// EvacuationsAfter those after eviction: the node is Drained only once
	// all are Completed.
	EvacuationsBefore int `json:"evacuationsBefore"`
	EvacuationsAfter  int `json:"evacuationsAfter"`
	// HeldPods are evicted only once their evacuations Completed.
	HeldPods int `json:"heldPods"`
	// EvacuationTimeoutSeconds is timeouts.evacuation (0: none): an
	// evacuation not Completed by then ends the drain through OnTimeout.
	EvacuationTimeoutSeconds float64 `json:"evacuationTimeoutSeconds"`
	// DrainTimeoutSeconds is timeouts.drain (0: none).
	DrainTimeoutSeconds float64 `json:"drainTimeoutSeconds"`
	OnTimeout           string  `json:"onTimeout"`
}

func (o *planOptions) run(ctx context.Context, args []string) error {
	if err := o.targets.check("plan", "the nodes to plan for", args); err != nil {
		return err
	}
	// wide is the text, which has every detail already.
	format, arg, err := parseOutput(o.output, formatWide, formatJSON, formatYAML, formatName, formatJSONPath, formatCustomColumns)
	if err != nil {
		return err
	}
	if o.mode != "" && o.mode != string(v1alpha1.ModeMaintenance) && o.mode != string(v1alpha1.ModeDecommission) {
		return argsError{fmt.Sprintf("--mode %q: must be Maintenance or Decommission", o.mode)}
	}
	printer, err := objectPrinter(format, arg)
	if err != nil {
		return err
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
	in := planInput{pdbs: pdbs, namespaces: map[string]labels.Set{}}
	provList := &v1alpha1.EvacuationProviderList{}
	if err := s.client.List(ctx, provList); err != nil {
		return s.explain(err, "listing EvacuationProviders")
	}
	for i := range provList.Items {
		in.providers = append(in.providers, &provList.Items[i])
	}
	sort.Slice(in.providers, func(i, j int) bool { return in.providers[i].Name < in.providers[j].Name })
	evList := &v1alpha1.EvacuationList{}
	if err := s.client.List(ctx, evList); err != nil {
		return s.explain(err, "listing Evacuations")
	}
	in.evacuations = evList.Items
	plans := make([]NodePlan, 0, len(nodes))
	for _, name := range nodes {
		p, err := o.planNode(ctx, s, name, &in)
		if err != nil {
			return err
		}
		plans = append(plans, p)
	}
	switch format {
	case formatName, formatJSONPath, formatCustomColumns:
		// Each node's plan as an object, as kubectl prints each object.
		for _, p := range plans {
			obj, err := asObject("v1", "Node", p)
			if err != nil {
				return err
			}
			obj.SetName(p.Node)
			if err := printer.PrintObj(obj, o.streams.Out); err != nil {
				return err
			}
		}
		return nil
	case formatJSON:
		enc := json.NewEncoder(o.streams.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(plans)
	case formatYAML:
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

// planInput is what plan reads once for all the nodes.
type planInput struct {
	pdbs []*policyv1.PodDisruptionBudget
	// providers, by name.
	providers   []*v1alpha1.EvacuationProvider
	evacuations []v1alpha1.Evacuation
	// namespaces are the labels of the namespaces read so far (nil: gone).
	namespaces map[string]labels.Set
}

// labelsOf reads a namespace's labels, once, for the decisions plan shares
// with the controller (a namespace that is gone has none).
func (in *planInput) labelsOf(ctx context.Context, s *session) policy.NamespaceLabels {
	return func(name string) (labels.Set, error) {
		if l, ok := in.namespaces[name]; ok {
			return l, nil
		}
		ns, err := s.clientset.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			in.namespaces[name] = nil
			return nil, nil
		case err != nil:
			return nil, s.explain(err, "reading namespace "+name)
		}
		in.namespaces[name] = ns.Labels
		return ns.Labels, nil
	}
}

// planNode reads what a drain of the node would meet, and plans it with the
// controller's decisions (internal/drain, internal/policy,
// internal/providers, internal/hook). It only reads.
func (o *planOptions) planNode(ctx context.Context, s *session, name string, in *planInput) (NodePlan, error) {
	node, err := s.node(ctx, name)
	if err != nil {
		return NodePlan{}, err
	}
	np := NodePlan{Node: name, Counts: map[string]int{}, Pods: []PodPlan{}, PDBs: []PDBPlan{}, Hooks: []string{}, HTTPHooks: []HookPlan{},
		Providers: []ProviderPlan{}, Evacuations: []EvacuationPlan{}, Blocked: []string{}, Held: []string{}}
	policyName := o.policy
	var existing *v1alpha1.NodeDrain
	nd := &v1alpha1.NodeDrain{}
	switch err := s.client.Get(ctx, types.NamespacedName{Name: name}, nd); {
	case err == nil:
		existing = nd
		np.Existing = fmt.Sprintf("already requested by %s: %s", requesterList(nd), nd.Status.Phase)
		if policyName == "" {
			policyName = nd.Spec.PolicyName
		}
	case !apierrors.IsNotFound(err):
		return NodePlan{}, s.explain(err, "reading NodeDrain "+name)
	}
	mode := v1alpha1.ModeMaintenance
	switch {
	case o.mode != "":
		mode = v1alpha1.DrainMode(o.mode)
	case existing != nil && existing.Spec.Mode != "":
		mode = existing.Spec.Mode
	}
	np.Mode = string(mode)
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
	var requesters []v1alpha1.Requester
	if existing != nil {
		requesters = existing.Spec.Requesters
	}
	if o.as != nil {
		requesters = withRequester(requesters, *o.as)
	}
	pol, np.Overrides = pol.WithOverrides(requesters)
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
	// The pods as the controller drains them: their own annotations only
	// where the policy honours them.
	labelsOf := in.labelsOf(ctx, s)
	onNodeNow := make([]*corev1.Pod, 0, len(podList.Items))
	originals := map[types.UID]*corev1.Pod{}
	for i := range podList.Items {
		onNodeNow = append(onNodeNow, &podList.Items[i])
		originals[podList.Items[i].UID] = &podList.Items[i]
	}
	pods, ignored, err := pol.PodsAsDrained(onNodeNow, labelsOf)
	if err != nil {
		return NodePlan{}, err
	}
	plan := drain.New(pods, drain.GuardsOf(in.pdbs...), pol.Rules.ForNode(node), o.clock.Now())
	onNode := map[types.UID]*corev1.Pod{}
	var leaving []*corev1.Pod // the pods the drain moves: the ones an evacuation can protect
	for _, d := range plan.Decisions {
		onNode[d.Pod.UID] = d.Pod
		if d.Action != drain.Skip {
			leaving = append(leaving, d.Pod)
		}
	}
	// The drain as its next pass would run it: the node's Evacuations as
	// that pass writes them, and the pods' hooks, judged by the model the
	// controller holds pods with (internal/hold).
	next := plannedDrain(existing, node, mode)
	evs, err := askProviders(&np, next, node, leaving, in, labelsOf)
	if err != nil {
		return NodePlan{}, err
	}
	hookStates, hooks, hookBlocked, err := o.planHooks(&np, existing, pol, mode, plan, originals, labelsOf)
	if err != nil {
		return NodePlan{}, err
	}
	h, err := hold.Compute(hold.Input{Drain: next, Node: node, OnNode: onNode, Leaving: leaving, Evacuations: evs, Providers: in.providers,
		Selects: func(p *v1alpha1.EvacuationProvider, pod *corev1.Pod) (bool, error) {
			return providers.Selects(p, pod, labelsOf)
		},
		Hooks: hookStates, Now: o.clock.Now()})
	if err != nil {
		return NodePlan{}, err
	}
	before, after := planHolds(&np, h, existing, node, leaving, onNode, in)
	workloads := map[string]surge.Workload{}
	for _, d := range plan.Decisions {
		pp := PodPlan{Pod: d.Key(), Action: string(d.Action), Reason: string(d.Reason), Detail: d.Detail, PDBs: d.PDBs,
			HeldBy: h.Holders(d.Pod.UID), IgnoredAnnotations: ignored[d.Pod.UID]}
		if d.Action == drain.Evict {
			if pp.Surge, err = planSurge(ctx, s, pol, d, labelsOf, workloads); err != nil {
				return NodePlan{}, err
			}
		}
		pp.BlockedNow = d.Action == drain.Block || (d.Action == drain.Evict && d.PDBBlocked && (pp.Surge == nil || !pp.Surge.Surged)) ||
			(d.Action == drain.Wait && d.Reason == drain.ReasonWaitCompletion) || hookBlocked[d.Pod.UID]
		switch {
		case pp.BlockedNow:
			np.Blocked = append(np.Blocked, d.Key())
		case len(pp.HeldBy) > 0:
			np.Held = append(np.Held, d.Key())
		}
		if d.Reason == drain.ReasonUnreachableTerminating {
			np.Unreachable = append(np.Unreachable, d.Key())
		}
		np.Counts[string(d.Action)]++
		np.Pods = append(np.Pods, pp)
	}
	f := drain.NewForecast(plan, pol.Grace, pol.PerNode)
	for _, pf := range f.PDBs {
		np.PDBs = append(np.PDBs, PDBPlan{Name: pf.Name, Budget: explain.Budget(plan.PDBs[pf.Name]), Allowed: pf.Allowed,
			CurrentHealthy: pf.CurrentHealthy, DesiredHealthy: pf.DesiredHealthy, ExpectedPods: pf.ExpectedPods,
			OnNode: pf.OnNode, BlocksNow: pf.Blocks, Rounds: pf.Rounds})
	}
	onTimeout := "Fail"
	if pol.ForceDelete {
		onTimeout = "ForceDelete"
	}
	np.Estimate = Estimate{Evictions: plan.Count(drain.Evict), Rounds: f.Rounds, LowSeconds: f.Low.Seconds(), HighSeconds: f.High.Seconds(),
		Finishes: !f.Stuck && len(np.Blocked) == 0, EvacuationsBefore: before + hooks, EvacuationsAfter: after, HeldPods: len(np.Held),
		EvacuationTimeoutSeconds: pol.EvacuationTimeout.Seconds(), DrainTimeoutSeconds: pol.DrainTimeout.Seconds(), OnTimeout: onTimeout}
	return np, nil
}

// planSurge is whether the drain would surge the pod (it is evicted), as
// the controller decides it (surge.Consider); nil when the policy does not
// surge or the pod leaves without a replacement anyway.
func planSurge(ctx context.Context, s *session, pol policy.Policy, d drain.Decision, labelsOf policy.NamespaceLabels,
	workloads map[string]surge.Workload) (*SurgePlan, error) {
	if pol.Surge == "" || pol.Surge == v1alpha1.SurgeNone {
		return nil, nil
	}
	honoured, err := pol.HonoursAnnotations(d.Pod.Namespace, labelsOf)
	if err != nil {
		return nil, err
	}
	var w surge.Workload
	if ref := metav1.GetControllerOfNoCopy(d.Pod); ref != nil && ref.Kind == "ReplicaSet" {
		key := d.Pod.Namespace + "/" + ref.Name
		cached, ok := workloads[key]
		if !ok {
			if cached, err = surge.Read(ctx, s.client, d.Pod.Namespace, ref.Name); err != nil {
				return nil, s.explain(err, "reading the ReplicaSet "+key)
			}
			workloads[key] = cached
		}
		w = cached
	}
	surged, why := surge.Consider(pol.Surge, honoured, d.Pod, len(d.PDBs), d.PDBBlocked, w)
	needs := d.PDBBlocked
	if w.Deployment != nil {
		needs, _ = surge.Needed(len(d.PDBs), d.PDBBlocked, w.Deployment)
	}
	if !surged && (!needs || why == "") {
		return nil, nil // it leaves without one anyway
	}
	return &SurgePlan{Surged: surged, Why: why}, nil
}

// plannedDrain is the drain a plan previews: the node's NodeDrain if there
// is one, else a new one, requested, in the planned mode.
func plannedDrain(existing *v1alpha1.NodeDrain, node *corev1.Node, mode v1alpha1.DrainMode) *v1alpha1.NodeDrain {
	nd := &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: node.Name, UID: "planned"}}
	if existing != nil {
		nd = existing.DeepCopy()
		nd.DeletionTimestamp = nil
	}
	nd.Spec.NodeName, nd.Spec.Mode = node.Name, mode
	if len(nd.Spec.Requesters) == 0 {
		nd.Spec.Requesters = []v1alpha1.Requester{{Name: "plan"}}
	}
	return nd
}

// askProviders lists the EvacuationProviders, asked or not and why, as
// the controller decides (internal/providers), and returns the node's
// Evacuations, by provider, as the drain's next pass leaves them: each
// provider it asks has the spec that pass writes (providers.Request; a
// changed spec is a new generation, not answered yet); one being deleted
// stays as it is until it is gone, and is asked again after.
func askProviders(np *NodePlan, nd *v1alpha1.NodeDrain, node *corev1.Node, leaving []*corev1.Pod, in *planInput,
	labelsOf policy.NamespaceLabels) (map[string]*v1alpha1.Evacuation, error) {
	evs := map[string]*v1alpha1.Evacuation{} // the node's, by provider, as the controller reads them (those being deleted too)
	for i := range in.evacuations {
		if ev := &in.evacuations[i]; ev.Spec.NodeName == node.Name {
			evs[ev.Spec.Provider] = ev
		}
	}
	mode := nd.Mode()
	for _, p := range in.providers {
		pp := ProviderPlan{Name: p.Name, Stage: string(providers.Stage(p)), HeartbeatTimeoutSeconds: providers.Timeout(p).Seconds(), Pods: []string{}}
		for _, m := range p.Spec.Modes {
			pp.Modes = append(pp.Modes, string(m))
		}
		switch {
		case !p.DeletionTimestamp.IsZero():
			pp.Why = "being deleted: asked nothing new (an Evacuation it was asked for still holds its pods until it is Completed)"
		case !providers.TakesPart(p, mode):
			pp.Why = fmt.Sprintf("takes part only in %s drains", strings.Join(pp.Modes, " and "))
		}
		if !providers.Eligible(p, mode) {
			np.Providers = append(np.Providers, pp)
			continue
		}
		protected, err := providers.Protected(p, leaving, labelsOf)
		if err != nil {
			return nil, err
		}
		pp.Pods = podKeys(protected)
		have := evs[p.Name]
		deleting := have != nil && !have.DeletionTimestamp.IsZero()
		pp.Asked = providers.Asks(p, mode, len(protected), have != nil && !deleting && providers.AskedFor(have, nd.UID, node.UID))
		switch {
		case !pp.Asked:
			pp.Why = "protects none of the pods that leave the node"
		case len(protected) > 0:
			pp.Why = fmt.Sprintf("protects %d pod(s) that leave the node", len(protected))
		case mode == v1alpha1.ModeDecommission:
			pp.Why = "Decommission asks every provider that takes part, whether or not its pods are on the node"
		default:
			pp.Why = "asked already by this drain"
		}
		if deleting {
			// The controller has the provider cancel it, lets it go, then
			// asks again; what it recorded holds until then.
			pp.Why = fmt.Sprintf("its Evacuation %s is being deleted: the provider is asked to cancel it, then asked again; %s", have.Name, pp.Why)
		}
		if pp.Asked {
			pp.Evacuation = v1alpha1.EvacuationName(node.Name, p.Name)
			if !deleting {
				evs[p.Name] = nextEvacuation(nd, node, p, protected, have)
			}
		}
		np.Providers = append(np.Providers, pp)
	}
	return evs, nil
}

// nextEvacuation is the provider's Evacuation once the drain's next pass
// asked it: have with the spec that pass writes, a new generation if the
// spec changed, or a new one, not answered yet.
func nextEvacuation(nd *v1alpha1.NodeDrain, node *corev1.Node, p *v1alpha1.EvacuationProvider, protected []*corev1.Pod, have *v1alpha1.Evacuation) *v1alpha1.Evacuation {
	spec := providers.Request(nd, node, p, protected, have)
	if have == nil {
		return &v1alpha1.Evacuation{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.EvacuationName(node.Name, p.Name), Generation: 1,
			CreationTimestamp: metav1.Now()}, Spec: spec}
	}
	next := have.DeepCopy()
	if !equality.Semantic.DeepEqual(have.Spec, spec) {
		next.Spec, next.Generation = spec, have.Generation+1
	}
	return next
}

// planHolds says which pods each provider and each of the node's
// Evacuations holds, from the model, and counts the evacuations the drain
// waits for before and after eviction (those of its Evacuations not done).
func planHolds(np *NodePlan, h *hold.Model, existing *v1alpha1.NodeDrain, node *corev1.Node, leaving []*corev1.Pod,
	onNode map[types.UID]*corev1.Pod, in *planInput) (before, after int) {
	heldBy := func(holders ...string) []*corev1.Pod {
		var out []*corev1.Pod
		for _, pod := range leaving {
			if slices.ContainsFunc(h.Holders(pod.UID), func(x string) bool { return slices.Contains(holders, x) }) {
				out = append(out, pod)
			}
		}
		return out
	}
	verdicts := map[string]hold.Verdict{} // by provider
	for _, v := range h.Evacuations() {
		verdicts[v.Evacuation.Spec.Provider] = v
		switch {
		case v.Done:
		case providers.StageOf(v.Evacuation) == v1alpha1.StageBeforeEviction:
			before++
		default:
			after++
		}
	}
	for i := range np.Providers {
		pp := &np.Providers[i]
		if !pp.Asked {
			continue
		}
		v, judged := verdicts[pp.Name]
		deleting := judged && !v.Evacuation.DeletionTimestamp.IsZero()
		held := heldBy("Evacuation "+pp.Evacuation, "EvacuationProvider "+pp.Name)
		pp.Holds = len(held) > 0
		if pp.Holds {
			pp.Pods = podKeys(held)
		}
		switch {
		case judged && !deleting && v.Done:
			pp.Why += "; its Evacuation " + v.Evacuation.Name + " is already Completed or released"
		case judged && !deleting && providers.StageOf(v.Evacuation) == v1alpha1.StageAfterEviction,
			(!judged || deleting) && pp.Stage == string(v1alpha1.StageAfterEviction):
			pp.Why += "; AfterEviction: its pods are evicted first, and the node is Drained only once its Evacuation Completed"
		case pp.Holds:
			pp.Why += fmt.Sprintf("; BeforeEviction: %d pod(s) are evicted only once its Evacuation Completed", len(held))
		default:
			pp.Why += "; BeforeEviction: it holds no pod, and the node is Drained only once its Evacuation Completed"
		}
	}
	for i := range in.evacuations {
		ev := &in.evacuations[i]
		if ev.Spec.NodeName != node.Name {
			continue
		}
		ep := EvacuationPlan{Name: ev.Name, Provider: ev.Spec.Provider, Stage: string(providers.StageOf(ev)), Mode: string(ev.Spec.Mode),
			Phase: string(ev.CurrentPhase()), Message: ev.Status.Message, CurrentDrain: existing != nil && providers.AskedFor(ev, existing.UID, node.UID),
			PodsOnNode: podKeys(providers.ProtectedOnNode(ev, onNode)), Deleting: !ev.DeletionTimestamp.IsZero(), Holds: len(heldBy("Evacuation "+ev.Name)) > 0}
		if rel := ev.Spec.Release; rel != nil {
			ep.Phase, ep.ReleasedBy = v1alpha1.PhaseReleased, rel.By
		}
		np.Evacuations = append(np.Evacuations, ep)
	}
	slices.SortFunc(np.Evacuations, func(a, b EvacuationPlan) int { return strings.Compare(a.Provider, b.Provider) })
	return before, after
}

func podKeys(pods []*corev1.Pod) []string {
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	sort.Strings(out)
	return out
}

// planHooks says, for each pod with the annotation vacate.dev/evacuate-port,
// whether the controller calls its HTTP hook before evicting it and where
// (policy.CallsHook, hook.TargetFor), or why not. It returns the hooks the
// drain calls as the model of holds sees them, how many the drain waits for
// (to answer Completed), and the pods held until something changes instead
// (an address vacate never calls, bad annotations).
func (o *planOptions) planHooks(np *NodePlan, existing *v1alpha1.NodeDrain, pol policy.Policy, mode v1alpha1.DrainMode, plan drain.Plan,
	originals map[types.UID]*corev1.Pod, labelsOf policy.NamespaceLabels) (map[types.UID]hold.HookState, int, map[types.UID]bool, error) {
	completed := map[string]string{} // the hooks this drain's run saw Completed, by pod
	last := map[string]string{}      // what the others last said in this drain's run
	verified := map[string]*bool{}   // whether they said they verified their caller
	if existing != nil {
		for _, h := range existing.Status.Hooks {
			pod, ok := strings.CutPrefix(h.Name, "pod/")
			switch {
			case !ok:
				continue
			case h.Phase == string(v1alpha1.EvacuationCompleted):
				completed[pod] = h.Message
			case h.Message != "":
				last[pod] = h.Message
			}
			verified[pod] = h.CallerVerified
		}
	}
	run := hook.Run{Node: np.Node, Mode: string(mode)}
	states := map[types.UID]hold.HookState{}
	blocked := map[types.UID]bool{}
	waits := 0
	for _, d := range plan.Decisions {
		pod := originals[d.Pod.UID]
		if !hook.Wants(pod) {
			continue
		}
		hp := HookPlan{Pod: d.Key()}
		calls, whyNot, err := pol.CallsHook(pod, labelsOf)
		if err != nil {
			return nil, 0, nil, err
		}
		t, terr := hook.TargetFor(pod, run, o.allowLoopback)
		msg, done := completed[hp.Pod]
		switch {
		case d.Action == drain.Skip:
			hp.Why = fmt.Sprintf("not called: the pod stays (%s)", d.Reason)
		case !calls:
			hp.Why = "not called: " + whyNot
		case terr != nil:
			hp.Holds = true
			// Without an IP yet, it is called once it has one.
			blocked[pod.UID] = hook.IsRefused(terr) || pod.Status.PodIP != ""
			hp.Why = hold.HookErrorDetail(terr)
		case done:
			hp.Called, hp.URL = true, t.URL()
			hp.Why = "called at " + t.URL() + "; it answered Completed in this drain's run (" + msg + ")"
		default:
			hp.Called, hp.URL, hp.Holds = true, t.URL(), true
			hp.Why = "called at " + t.URL() + " before the pod's eviction (POST, then GET until it answers); the pod is evicted only once it answers Completed"
			if msg, ok := last[hp.Pod]; ok {
				hp.Why += "; in this drain's run so far: " + msg
			}
		}
		if hp.Called {
			hp.Caller = hookCaller(verified[hp.Pod])
			hp.Why += "; " + hp.Caller
		}
		if d.Action != drain.Skip && calls {
			states[pod.UID] = hold.HookState{Err: terr, Done: done && terr == nil, Detail: hp.Why}
		}
		if hp.Holds {
			if !blocked[pod.UID] {
				waits++ // a blocked one is no evacuation under way: the plan says it would not finish
			}
		}
		np.HTTPHooks = append(np.HTTPHooks, hp)
		np.Hooks = append(np.Hooks, "HTTP hook of "+hp.Pod+": "+hp.Why)
	}
	return states, waits, blocked, nil
}

// hookCaller says what a called hook is told of its caller, and what its
// answer in the drain's run said of it (nil: no answer yet).
func hookCaller(verified *bool) string {
	const told = "told vacate-controller's identity (a short-lived token of its service account, for this pod alone)"
	switch {
	case verified == nil:
		return told + "; whether it checks it is known once it answers"
	case *verified:
		return told + "; it verified it in this drain's run"
	default:
		return told + "; it did not say that it checks it: any pod that reaches it may call it (docs/evacuation.md, \"Who may call a hook\")"
	}
}

func writePlan(w io.Writer, p NodePlan) error {
	fmt.Fprintf(w, "Node %s\n  policy: %s\n  mode:   %s\n  cordon: %s\n", p.Node, p.Policy, p.Mode, p.Cordon)
	for _, o := range p.Overrides {
		fmt.Fprintf(w, "  override: %s\n", o)
	}
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
		if len(pp.HeldBy) > 0 {
			detail = strings.TrimPrefix(detail+"; held by "+strings.Join(pp.HeldBy, ", "), "; ")
		}
		switch {
		case pp.Surge != nil && pp.Surge.Surged:
			detail = strings.TrimPrefix(detail+"; surged, a replacement Ready elsewhere first: "+pp.Surge.Why, "; ")
		case pp.Surge != nil && pp.BlockedNow:
			detail = strings.TrimPrefix(detail+"; waits, not surged: "+pp.Surge.Why, "; ")
		case pp.Surge != nil:
			detail = strings.TrimPrefix(detail+"; evicted without a replacement, not surged: "+pp.Surge.Why, "; ")
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", pp.Pod, action, pp.Reason, orDash(detail))
	}
	if len(p.Pods) == 0 {
		fmt.Fprintln(tw, "  (no pods)\t\t\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, pp := range p.Pods {
		if len(pp.IgnoredAnnotations) > 0 {
			fmt.Fprintf(w, "  annotations of %s ignored (its namespace is not selected by the policy's pods.annotationNamespaceSelector; planned as if it had none): %s\n",
				pp.Pod, strings.Join(pp.IgnoredAnnotations, ", "))
		}
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
	writeList(w, "HTTP evacuation hooks", p.Hooks)
	providerLines := make([]string, 0, len(p.Providers))
	for _, pp := range p.Providers {
		if !pp.Asked {
			providerLines = append(providerLines, fmt.Sprintf("EvacuationProvider %s: not asked: %s", pp.Name, pp.Why))
			continue
		}
		modes := "every mode"
		if len(pp.Modes) > 0 {
			modes = strings.Join(pp.Modes, ", ")
		}
		line := fmt.Sprintf("EvacuationProvider %s: asked, Evacuation %s (%s, %s, heartbeat timeout %s): %s", pp.Name, pp.Evacuation, pp.Stage,
			modes, secs(pp.HeartbeatTimeoutSeconds), pp.Why)
		if len(pp.Pods) > 0 {
			line += " (" + strings.Join(pp.Pods, ", ") + ")"
		}
		providerLines = append(providerLines, line)
	}
	writeList(w, "evacuation providers", providerLines)
	evLines := make([]string, 0, len(p.Evacuations))
	for _, ev := range p.Evacuations {
		line := fmt.Sprintf("%s (provider %s, %s, %s): %s", ev.Name, ev.Provider, ev.Stage, ev.Mode, ev.Phase)
		switch {
		case ev.ReleasedBy != "":
			line += " by " + ev.ReleasedBy
		case ev.Message != "":
			line += ": " + ev.Message
		}
		if ev.Deleting {
			line += "; being deleted (its provider is asked to cancel it first)"
		}
		if ev.CurrentDrain {
			line += "; asked by the node's drain"
		} else {
			line += "; left by an earlier drain (the next drain that asks its provider takes it over)"
		}
		if ev.Holds {
			line += "; holds " + strings.Join(ev.PodsOnNode, ", ")
		}
		evLines = append(evLines, line)
	}
	writeList(w, "Evacuations of the node", evLines)
	e := p.Estimate
	switch {
	case e.Evictions == 0 && len(p.Blocked) == 0 && e.EvacuationsBefore+e.EvacuationsAfter == 0:
		fmt.Fprintln(w, "  estimate: nothing to evict; the drain ends once the node is cordoned")
	case e.Evictions == 0:
		fmt.Fprintln(w, "  estimate: nothing to evict")
	default:
		fmt.Fprintf(w, "  estimate: %d eviction(s) in %d round(s): %s to %s (replacements assumed Ready in %s; up to each pod's grace period to stop)\n",
			e.Evictions, e.Rounds, progress.Duration(secs(e.LowSeconds)), progress.Duration(secs(e.HighSeconds)), progress.Duration(drain.ReplacementReady))
	}
	if e.EvacuationsBefore+e.EvacuationsAfter > 0 {
		fmt.Fprintf(w, "  evacuations: the drain waits for %d before eviction and %d after; %d held pod(s) are evicted only once their evacuation Completed, "+
			"and the node is Drained only once every evacuation Completed; how long a provider or hook takes is not known: %s\n",
			e.EvacuationsBefore, e.EvacuationsAfter, e.HeldPods, evacuationBound(e))
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

// writeList writes a titled list, or "none".
func writeList(w io.Writer, title string, lines []string) {
	if len(lines) == 0 {
		fmt.Fprintf(w, "  %s: none\n", title)
		return
	}
	fmt.Fprintf(w, "  %s:\n", title)
	for _, l := range lines {
		fmt.Fprintln(w, "    "+l)
	}
}

// evacuationBound says what ends the wait for evacuations.
func evacuationBound(e Estimate) string {
	var bound string
	switch {
	case e.EvacuationTimeoutSeconds > 0:
		bound = fmt.Sprintf("timeouts.evacuation (%s) ends the drain through onTimeout (%s) if one has not Completed by then", secs(e.EvacuationTimeoutSeconds), e.OnTimeout)
	case e.DrainTimeoutSeconds > 0:
		bound = fmt.Sprintf("the policy sets no timeouts.evacuation; timeouts.drain (%s) ends the drain through onTimeout (%s)", secs(e.DrainTimeoutSeconds), e.OnTimeout)
	default:
		bound = "the policy sets neither timeouts.evacuation nor timeouts.drain: the drain waits until each evacuation Completed " +
			"(an Evacuation may also be released with 'vacate release') or the drain is cancelled"
	}
	if e.OnTimeout == "ForceDelete" {
		bound += " (ForceDelete never deletes a held pod)"
	}
	return bound + "; a provider silent longer than its heartbeat timeout is reported stale, and its pods stay held"
}
