// Package explain answers "why is this drain stuck?": for each blocker of a
// NodeDrain, the cause in the cluster's own terms (which PDB, how many of its
// pods are healthy, which are not and why) and what a person can do. It is
// pure: the caller reads the objects.
package explain

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/schedule"
	"github.com/vacate-dev/vacate/internal/surge"
)

// Input is what the explanation reads.
type Input struct {
	Drain *v1alpha1.NodeDrain
	// Pods are the blocked pods, by namespace/name (missing: gone).
	Pods map[string]*corev1.Pod
	// PDBs are the PDBs that hold pods, by namespace/name.
	PDBs map[string]*policyv1.PodDisruptionBudget
	// PDBPods are the pods each PDB selects, by the PDB's namespace/name.
	PDBPods map[string][]*corev1.Pod
	// Evacuations are the Evacuations of the drain's node (the CLI reads
	// them; nil when it may not).
	Evacuations []v1alpha1.Evacuation
	Now         time.Time
}

// Finding is one thing that holds the drain up.
type Finding struct {
	// Subject is what is stuck: a pod, or the drain itself.
	Subject string `json:"subject"`
	// Cause says why, in the cluster's terms.
	Cause string `json:"cause"`
	// Fix says what a person can do; the first option is the gentlest.
	Fix string `json:"fix"`
	// Since is when it started holding the drain, if known.
	Since time.Time `json:"since,omitzero"`
}

// Explanation is a drain's state in one line, and its findings.
type Explanation struct {
	State    string    `json:"state"`
	Findings []Finding `json:"findings"`
	// Idle says what goes on when nothing holds the drain.
	Idle string `json:"idle,omitempty"`
	// EvictionRequests says how the controller drains pods that declare
	// eviction responders (its --eviction-requests, from its Lease), where
	// it uses Kubernetes' EvictionRequest API or was told not to.
	EvictionRequests string `json:"evictionRequests,omitempty"`
}

// Explain explains a drain.
func Explain(in Input) Explanation {
	nd := in.Drain
	st := nd.Status
	e := Explanation{State: state(nd), Idle: "Nothing holds it up now; evictions are in progress. Follow with 'vacate status --watch'."}
	switch st.Phase {
	case v1alpha1.PhaseDrained:
		e.Idle = "Nothing holds it: the node is drained."
	case "", v1alpha1.PhasePending:
		e.Idle = "The controller has not started it yet: is vacate-controller running? ('kubectl get pods -A -l app.kubernetes.io/name=vacate-controller')"
	}
	e.Findings = append(e.Findings, drainFindings(nd)...)
	if f, ok := deadlineFinding(nd, in.Now); ok {
		e.Findings = append(e.Findings, f)
	}
	// Blockers that share a holder and a reason share most of the
	// explanation; a PDB is explained once, naming all the pods it holds.
	// (The same PDBs may hold some pods as PodDisruptionBudget and others as
	// MultiplePDBs: two explanations.)
	type group struct{ holder, reason string }
	byHolder := map[group][]v1alpha1.Blocker{}
	var holders []group
	for _, b := range st.Blockers {
		if b.Holder == "" {
			e.Findings = append(e.Findings, podFinding(b, in))
			continue
		}
		g := group{b.Holder, b.Reason}
		if _, ok := byHolder[g]; !ok {
			holders = append(holders, g)
		}
		byHolder[g] = append(byHolder[g], b)
	}
	sort.Slice(holders, func(i, j int) bool {
		if holders[i].holder != holders[j].holder {
			return holders[i].holder < holders[j].holder
		}
		return holders[i].reason < holders[j].reason
	})
	for _, g := range holders {
		e.Findings = append(e.Findings, holderFindings(g.holder, byHolder[g], in)...)
	}
	e.Findings = append(e.Findings, released(nd)...)
	if !nd.Ended() {
		e.Findings = append(e.Findings, Unreported(nd, in.Evacuations)...)
	}
	if int(st.Blocked) > len(st.Blockers) {
		e.Findings = append(e.Findings, Finding{Subject: "more pods",
			Cause: fmt.Sprintf("%d more pod(s) are blocked than the status lists (it keeps %d)", int(st.Blocked)-len(st.Blockers), len(st.Blockers)),
			Fix:   "fix the causes above; the list then shows the rest"})
	}
	return e
}

func state(nd *v1alpha1.NodeDrain) string {
	st := nd.Status
	phase := st.Phase
	if phase == "" {
		phase = v1alpha1.PhasePending
	}
	s := fmt.Sprintf("drain of node %s: %s, %d of %d pod(s) evicted", nd.Spec.NodeName, phase, st.Evicted, st.Total)
	if st.Blocked > 0 {
		s += fmt.Sprintf(", %d blocked", st.Blocked)
	}
	if d := st.Deadline; d != nil {
		s += fmt.Sprintf("; deadline %s (%s)", d.Time.UTC().Format(time.RFC3339), d.Requester)
	}
	return s
}

// deadlineFinding says what will not make it by the drain's deadline (the
// machine goes then): the pods blocked now, and the remaining pods if the
// pace so far cannot empty the node in time.
func deadlineFinding(nd *v1alpha1.NodeDrain, now time.Time) (Finding, bool) {
	st := nd.Status
	d := st.Deadline
	if d == nil || nd.Ended() {
		return Finding{}, false
	}
	subject := "nodedrain/" + nd.Name
	left := d.Time.Sub(now)
	when := fmt.Sprintf("the machine goes at %s (the deadline of %s", d.Time.UTC().Format(time.RFC3339), d.Requester)
	fix := "at the deadline, under the policy's timeouts.onTimeout ForceDelete the pods still on the node are deleted; under Fail the drain " +
		"goes on as fast as the pods allow (a deadline never stops a drain, and one not started yet is admitted first)"
	if left <= 0 {
		return Finding{Subject: subject, Cause: when + ", passed " + (-left).Round(time.Second).String() + " ago)", Fix: fix}, true
	}
	when += fmt.Sprintf(", in %s)", left.Round(time.Second))
	var late []string
	if st.Blocked > 0 {
		late = append(late, fmt.Sprintf("%d blocked pod(s) will not leave in time unless what holds them (below) changes", st.Blocked))
	}
	if !nd.Admitted() {
		late = append(late, "the drain is not admitted yet")
	} else if st.StartTime != nil && st.Remaining > 0 && st.Evicted > 0 {
		ran := now.Sub(st.StartTime.Time)
		need := time.Duration(float64(ran) * float64(st.Remaining) / float64(st.Evicted))
		if need > left {
			late = append(late, fmt.Sprintf("at the pace so far (%d pod(s) in %s) the %d remaining need about %s",
				st.Evicted, ran.Round(time.Second), st.Remaining, need.Round(time.Second)))
		}
	}
	if len(late) == 0 {
		return Finding{}, false
	}
	return Finding{Subject: subject, Cause: when + ": " + strings.Join(late, "; "),
		Fix: "unblock the pods below now; " + fix}, true
}

// providerOf is the provider of the Evacuation named name: from the
// Evacuation when it was read, else from the name, "<node>.<provider>"
// followed by "-<hash>" (v1alpha1.EvacuationName; node names may hold dots
// themselves, so the node is cut off as a prefix).
func providerOf(name, node string, evs []v1alpha1.Evacuation) string {
	for _, ev := range evs {
		if ev.Name == name {
			return ev.Spec.Provider
		}
	}
	provider := strings.TrimPrefix(name, node+".")
	if i := strings.LastIndexByte(provider, '-'); i > 0 && name == v1alpha1.EvacuationName(node, provider[:i]) {
		provider = provider[:i]
	}
	return provider
}

// Unreported warns about the drain's Evacuations whose provider names no
// reporter (spec.reporter): anyone RBAC lets write evacuations/status can
// complete them, and so release the pods they protect before their data
// moved.
func Unreported(nd *v1alpha1.NodeDrain, evs []v1alpha1.Evacuation) []Finding {
	var out []Finding
	for _, ev := range evs {
		if ev.Spec.NodeName != nd.Spec.NodeName || ev.Spec.DrainUID != string(nd.UID) || ev.Spec.Reporter != "" {
			continue
		}
		out = append(out, Finding{Subject: "evacuation/" + ev.Name,
			Cause: fmt.Sprintf("EvacuationProvider %s names no reporter: anyone allowed to write evacuations/status can complete this Evacuation, "+
				"and so release the pods it protects before their data moved", ev.Spec.Provider),
			Fix: fmt.Sprintf("set spec.reporter of EvacuationProvider %s to the service account the provider runs as "+
				"(docs/evacuation.md, \"Who may complete an Evacuation\"); vacate copies it to the Evacuation", ev.Spec.Provider)})
	}
	return out
}

// drainFindings are the causes that hold the whole drain, not one pod.
func drainFindings(nd *v1alpha1.NodeDrain) []Finding {
	var out []Finding
	subject := "nodedrain/" + nd.Name
	if r := nd.Status.Run; r != nil && r.Reason != "" && !nd.Ended() {
		out = append(out, Finding{Subject: subject, Cause: "it ended, and runs again (" + r.Reason + "): " + r.Message,
			Fix: "nothing to do: a drain that ended runs again when it is asked more, and a Drained node is kept empty while anyone asks"})
	}
	if len(nd.Spec.Requesters) == 0 {
		out = append(out, Finding{Subject: subject, Cause: "no requester is left, so the drain is idle and vacate undid its changes",
			Fix: "request it again with 'vacate drain " + nd.Spec.NodeName + "', or delete the NodeDrain"})
	}
	// A missing node is explained once, below, from the Cordoned condition.
	if c := nd.AdmissionHold(); c != nil && c.Status == metav1.ConditionFalse && c.Reason != v1alpha1.ReasonNodeNotFound {
		fix := "the drain starts when this is resolved"
		switch c.Reason {
		case v1alpha1.ReasonPolicyNotFound:
			fix = "create that DrainPolicy, or clear spec.policyName to use the default policy (cancel and request again without --policy)"
		case v1alpha1.ReasonAmbiguousPolicy:
			fix = "narrow the policies' nodeSelectors so exactly one selects the node ('kubectl get drainpolicies' shows the Overlapping condition), " +
				"or cancel and request again with --policy NAME"
		case schedule.WaitingForSlot:
			fix = "nothing to do: it starts when a running drain of the same policy ends ('vacate status' shows the queue); " +
				"to run more at once, raise the policy's concurrency.maxParallelNodes"
		case schedule.WaitingForZone:
			fix = "nothing to do: it starts when the drains in the other topology domain end; " +
				"to drain more domains at once, raise the policy's concurrency.maxUnavailablePerTopologyKey"
		case schedule.WaitingForPDBHeadroom:
			fix = "nothing to do while other drains run: it starts when a PDB of one of its pods has room, or when it is the only drain left; " +
				"'vacate plan " + nd.Spec.NodeName + "' shows the PDBs"
		case v1alpha1.ReasonWaitingForBatch:
			fix = "nothing to do: drains requested together are all cordoned before any eviction (the policy's concurrency.batchWindow)"
		case schedule.OutsideWindow:
			fix = "wait for the window, or request the drain under a policy without a schedule (--policy NAME)"
		case schedule.InvalidSchedule:
			fix = "fix the policy's schedule ('kubectl get drainpolicy -o yaml' shows the Valid condition)"
		}
		out = append(out, Finding{Subject: subject, Cause: "not admitted: " + c.Message, Fix: fix, Since: c.LastTransitionTime.Time})
	}
	if c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionCordoned); c != nil && c.Reason == v1alpha1.ReasonNodeNotFound {
		out = append(out, Finding{Subject: subject, Cause: c.Message,
			Fix: "check the node's name; cancel this drain if the node is gone for good", Since: c.LastTransitionTime.Time})
	}
	if c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionNoExecuteTaint); c != nil && c.Status == metav1.ConditionTrue {
		out = append(out, Finding{Subject: "node/" + nd.Spec.NodeName, Cause: c.Message,
			Fix: "replace the taint with one of effect NoSchedule ('kubectl taint node " + nd.Spec.NodeName + " " + v1alpha1.TaintDrain +
				":NoExecute- " + v1alpha1.TaintDrain + ":NoSchedule'): the drain stays requested and the pods then leave through evictions",
			Since: c.LastTransitionTime.Time})
	}
	if nd.Status.Phase == v1alpha1.PhaseFailed {
		msg := "the drain failed"
		if c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionDrained); c != nil {
			msg = c.Message
		}
		out = append(out, Finding{Subject: subject, Cause: msg,
			Fix: "a failed drain stays failed with its pods in place: fix the blockers below, then 'vacate cancel " + nd.Spec.NodeName +
				"' and request it again (or set the policy's timeouts.drain longer)"})
	}
	return out
}

// podFinding explains a blocker the pod itself causes.
func podFinding(b v1alpha1.Blocker, in Input) Finding {
	f := Finding{Subject: "pod " + b.Pod, Since: b.Since.Time, Cause: b.Reason + ": " + b.Detail}
	ns, name, _ := strings.Cut(b.Pod, "/")
	if cause, fix, ok := refusedPod(b, ns); ok {
		f.Cause, f.Fix = cause, fix
		return f
	}
	if b.Reason == v1alpha1.BlockerEndpoints {
		f.Cause = "it is out of service (readiness gate " + v1alpha1.ConditionServing + " False), leaving its Services before its eviction: " + b.Detail
		f.Fix = fmt.Sprintf("nothing: vacate evicts it once no EndpointSlice shows it ready and the policy's endpoints.settleTime has passed, "+
			"or when endpoints.timeout has; if a slice stays ready, the EndpointSlice controller (kube-controller-manager) is behind: "+
			"kubectl get endpointslices -n %s -o wide", ns)
		return f
	}
	switch drain.Reason(b.Reason) {
	case drain.ReasonUnmanaged:
		f.Cause = "no controller owns it, so evicting it would delete it for good"
		f.Fix = fmt.Sprintf("delete it yourself if it may go (kubectl delete pod -n %s %s), let it stay with the annotation %s=%s "+
			"(if the policy's pods.annotationNamespaceSelector allows annotations in its namespace), or set the DrainPolicy's pods.unmanaged: Delete", ns, name, drain.PodAnnotation, drain.AnnotationSkip)
	case drain.ReasonLocalStorage:
		f.Cause = b.Detail
		f.Fix = fmt.Sprintf("if its emptyDir data may be lost, set the DrainPolicy's pods.localStorage: Evict; to leave it on the node, "+
			"annotate it: kubectl annotate pod -n %s %s %s=%s (if the policy's pods.annotationNamespaceSelector allows annotations in its namespace)",
			ns, name, drain.PodAnnotation, drain.AnnotationSkip)
	case drain.ReasonWaitCompletion:
		f.Cause = "it asked the drain to wait until it completes (" + drain.PodAnnotation + "=" + drain.AnnotationWaitCompleted + ")"
		if p := in.Pods[b.Pod]; p != nil && p.Status.StartTime != nil {
			f.Cause += fmt.Sprintf("; running for %s", in.Now.Sub(p.Status.StartTime.Time).Round(time.Second))
		}
		f.Fix = fmt.Sprintf("nothing, if it finishes; to evict it now remove the annotation: kubectl annotate pod -n %s %s %s-", ns, name, drain.PodAnnotation)
	default:
		f.Fix = "see 'kubectl describe pod -n " + ns + " " + name + "'"
	}
	return f
}

// holderFindings explain the pods one object holds: PDBs, evacuations, HTTP
// hooks, API server throttling; all the blockers share holder and reason.
func holderFindings(holder string, blockers []v1alpha1.Blocker, in Input) []Finding {
	pods := make([]string, 0, len(blockers))
	since := blockers[0].Since.Time
	for _, b := range blockers {
		pods = append(pods, b.Pod)
		if b.Since.Time.Before(since) {
			since = b.Since.Time
		}
	}
	subject := fmt.Sprintf("pod %s", strings.Join(pods, ", "))
	if f, ok := refusedGroup(subject, blockers, since, in); ok {
		return []Finding{f}
	}
	kind, names, _ := strings.Cut(holder, " ")
	switch kind {
	case "Evacuation":
		if f, ok := providerDeleted(subject, names, blockers[0], since); ok {
			return []Finding{f}
		}
		node := in.Drain.Spec.NodeName
		provider := providerOf(names, node, in.Evacuations)
		return []Finding{{Subject: subject, Since: since,
			Cause: "waiting for EvacuationProvider " + provider + " to move its data off " + node + ": " + blockers[0].Detail,
			Fix: "nothing, while it makes progress (kubectl get evacuation " + names + "); if it is stale or failed, check the provider's controller; " +
				"to stop waiting, cancel the drain ('vacate cancel " + node + "'): the provider is asked to undo"}}
	case "HTTP":
		pod := strings.TrimPrefix(names, "hook of pod ")
		ns, name, _ := strings.Cut(pod, "/")
		fix := "nothing, while it makes progress; if it fails or does not answer, see the app's logs (kubectl logs -n " + ns + " " + name +
			"); the pod is not evicted until its hook says Completed, or until the drain is cancelled"
		if refusesCaller(blockers[0].Detail) {
			fix = "the hook refuses vacate-controller's token: check the callers it trusts (vacate-hook's auth.callers, by default vacate-system/vacate-controller) " +
				"and that it can read the cluster's service-account keys (its log: kubectl logs -n " + ns + " " + name + " -c vacate-hook; docs/recipes/README.md, \"Who may call\")"
		}
		return []Finding{{Subject: subject, Since: since,
			Cause: "waiting for the pod's own evacuation hook to answer Completed: " + blockers[0].Detail + hookCaller(in.Drain, pod),
			Fix:   fix}}
	case "Eviction", "EvictionRequest":
		ns, name, _ := strings.Cut(names, "/")
		return []Finding{{Subject: subject, Since: since,
			Cause: "the drain asked for its eviction with an EvictionRequest (it declares eviction responders): " + blockers[0].Detail,
			Fix: fmt.Sprintf("nothing, while its responders make progress (kubectl get %s -n %s %s -o yaml); if one is stuck, see its operator; "+
				"a responder whose heartbeat is 20 minutes old loses its turn; to stop, cancel the drain ('vacate cancel %s'): its request is withdrawn and the responders cancelled",
				strings.ToLower(kind), ns, name, in.Drain.Spec.NodeName)}}
	case "ReplicaSet":
		if f, ok := surgeFinding(subject, names, blockers[0], since, in); ok {
			return []Finding{f}
		}
		return []Finding{{Subject: subject, Cause: "held by " + holder + ": " + blockers[0].Detail, Since: since}}
	case "PodDisruptionBudget":
	default:
		return []Finding{{Subject: subject, Cause: "held by " + holder + ": " + blockers[0].Detail, Since: since}}
	}
	var out []Finding
	for _, name := range strings.Split(names, ", ") {
		out = append(out, pdbFinding(subject, name, blockers[0], since, in))
	}
	return out
}

// surgeFinding explains a pod that waits for its replacement (DrainPolicy
// surge).
func surgeFinding(subject, replicaSet string, b v1alpha1.Blocker, since time.Time, in Input) (Finding, bool) {
	ns, _, _ := strings.Cut(replicaSet, "/")
	if b.Reason == v1alpha1.BlockerSurgeFailed && createRefused(in.Drain, b.Pod) {
		return Finding{Subject: subject, Since: since,
			Cause: "the policy surges it, but the API server refused its replacement, so the pod stays (evicting it would leave its Deployment with fewer Ready pods): " + b.Detail,
			Fix: "if a ResourceQuota refused it, raise the quota or make room in namespace " + ns + " (kubectl describe resourcequota -n " + ns +
				"); if vacate-controller may not create pods, bind the ClusterRole vacate-controller-surge " +
				"('vacate manifests surge | kubectl apply -f -', or the Helm chart's controller.surge: true); if an admission policy refused it " +
				"(vacate-controller-surge refuses host namespaces, hostPath, privileged containers, extra capabilities, host ports and the " +
				"kube-system namespace; a policy of the cluster may forbid pods without a controller), that Deployment cannot be surged: " +
				"relax its PodDisruptionBudget, or annotate its pods " + surge.Annotation + "=false where the policy honours annotations. " +
				"vacate tries again every 30s (or surge.readyTimeout, if shorter)"}, true
	}
	switch b.Reason {
	case v1alpha1.BlockerSurge:
		return Finding{Subject: subject, Since: since,
			Cause: "the policy surges it: it leaves once a replacement is Ready on another node: " + b.Detail,
			Fix: "nothing, while the replacement starts (kubectl get pods -n " + ns + " -l " + surge.LabelOf + "); past the policy's " +
				"surge.readyTimeout it is removed and tried again later"}, true
	case v1alpha1.BlockerSurgeFailed:
		return Finding{Subject: subject, Since: since,
			Cause: "its replacement did not become Ready in time, so the pod stays (evicting it would leave its Deployment with fewer Ready pods): " + b.Detail,
			Fix: "make room for one more pod of it on a node that is not draining (kubectl get events -n " + ns +
				" --field-selector reason=FailedScheduling), fix what keeps a new pod from Ready (image, probes), or raise surge.readyTimeout; " +
				"vacate tries again after surge.readyTimeout. To evict it without a replacement, relax its PodDisruptionBudget, " +
				"or annotate it " + surge.Annotation + "=false where the policy honours annotations"}, true
	}
	return Finding{}, false
}

// createRefused says whether the drain's record of the pod's surge is a
// refused create: Failed, and no replacement was made.
func createRefused(nd *v1alpha1.NodeDrain, pod string) bool {
	if nd == nil {
		return false
	}
	for _, rec := range nd.Status.Surges {
		if rec.Pod == pod {
			return rec.Phase == v1alpha1.SurgeFailed && rec.Replacement == ""
		}
	}
	return false
}

func pdbFinding(subject, name string, b v1alpha1.Blocker, since time.Time, in Input) Finding {
	f := Finding{Subject: subject, Since: since}
	pdb := in.PDBs[name]
	ns, short, _ := strings.Cut(name, "/")
	if pdb == nil {
		f.Cause = "PDB " + name + " refused the eviction, and it no longer exists"
		f.Fix = "nothing: the eviction is retried and now goes through"
		return f
	}
	st := pdb.Status
	budget := Budget(pdb)
	relax := fmt.Sprintf("relax the PDB (kubectl edit pdb -n %s %s; now %s)", ns, short, budget)
	if st.DisruptionsAllowed > 0 {
		f.Cause = fmt.Sprintf("PDB %s refused an eviction, but allows %d disruption(s) now", name, st.DisruptionsAllowed)
		f.Fix = "nothing: vacate retries the eviction as soon as the PDB allows it"
		return f
	}
	unhealthy := notHealthy(in.PDBPods[name], in.Now)
	switch {
	case st.CurrentHealthy < st.ExpectedPods || len(unhealthy) > 0:
		f.Cause = fmt.Sprintf("PDB %s allows 0 disruptions: %d of %d pods are healthy and it needs %d (%s)",
			name, st.CurrentHealthy, st.ExpectedPods, st.DesiredHealthy, budget)
		if len(unhealthy) > 0 {
			f.Cause += "; not healthy: " + strings.Join(unhealthy, "; ")
		}
		f.Fix = "the drain continues by itself when they are healthy; or " + relax
	default:
		f.Cause = fmt.Sprintf("PDB %s allows 0 disruptions even with all %d of its pods healthy: %s never allows an eviction",
			name, st.ExpectedPods, budget)
		f.Fix = relax + ", or scale the workload up so it has a spare pod"
	}
	if b.Detail != "" && !strings.HasSuffix(b.Detail, "allows no disruption now") {
		f.Cause += "; the API server said: " + strings.TrimPrefix(strings.TrimPrefix(b.Detail, b.Holder), ": ")
	}
	return f
}

// Budget renders a PDB's spec: "minAvailable 3" or "maxUnavailable 0".
func Budget(pdb *policyv1.PodDisruptionBudget) string {
	switch {
	case pdb.Spec.MinAvailable != nil:
		return "minAvailable " + pdb.Spec.MinAvailable.String()
	case pdb.Spec.MaxUnavailable != nil:
		return "maxUnavailable " + pdb.Spec.MaxUnavailable.String()
	}
	return "no budget set"
}

// notHealthy names the pods that are not Ready, with why, as far as the
// pod says: terminating, pending with the scheduler's message, or not
// Ready with the condition's message.
func notHealthy(pods []*corev1.Pod, now time.Time) []string {
	var out []string
	for _, p := range pods {
		key := p.Namespace + "/" + p.Name
		switch {
		case p.DeletionTimestamp != nil:
			out = append(out, key+" is terminating")
		case p.Status.Phase == corev1.PodPending:
			msg := key + " is Pending"
			if c := podCondition(p, corev1.PodScheduled); c != nil && c.Status == corev1.ConditionFalse && c.Message != "" {
				msg += " (" + c.Message + ")"
			}
			out = append(out, msg)
		default:
			c := podCondition(p, corev1.PodReady)
			if c == nil || c.Status != corev1.ConditionTrue {
				msg := key + " is not Ready"
				if c != nil && !c.LastTransitionTime.IsZero() {
					msg += fmt.Sprintf(" for %s", now.Sub(c.LastTransitionTime.Time).Round(time.Second))
				}
				if c != nil && c.Message != "" {
					msg += " (" + c.Message + ")"
				}
				out = append(out, msg)
			}
		}
	}
	sort.Strings(out)
	return out
}

func podCondition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// hookCaller says whether the pod's HTTP hook checks who calls it, as its
// last answer said (status.hooks[].callerVerified); "" before an answer.
func hookCaller(nd *v1alpha1.NodeDrain, pod string) string {
	for _, h := range nd.Status.Hooks {
		if h.Name != "pod/"+pod || h.CallerVerified == nil {
			continue
		}
		if *h.CallerVerified {
			return "; the hook verifies that vacate-controller calls it"
		}
		return "; the hook does not say that it checks who calls it: any pod that reaches it may start or cancel its evacuation " +
			"(vacate-controller sends its token; pkg/hookauth checks it in a few lines, docs/evacuation.md)"
	}
	return ""
}

// refusesCaller reports whether a hook's problem is its refusal of the
// caller's token (HTTP 401 or 403).
func refusesCaller(detail string) bool {
	return strings.Contains(detail, ": HTTP 401") || strings.Contains(detail, ": HTTP 403")
}
