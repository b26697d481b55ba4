package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/yaml"

	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/progress"
)

// This file prints 'vacate plan's plans: as objects for -o json, yaml,
// name, jsonpath and custom-columns, and as text for people. It decides
// nothing: every word it writes of a pod, a hook or a provider was decided
// in plan_decide.go and plan_evacuations.go.

// write prints the plans in the format asked.
func (o *planOptions) write(plans []NodePlan, format string, printer printers.ResourcePrinter) error {
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

// writePlan writes one node's plan as text: what happens to the node, a
// table of its pods, one of its PDBs, its evacuations, and the estimate.
func writePlan(w io.Writer, p NodePlan) error {
	fmt.Fprintf(w, "Node %s\n  policy: %s\n  mode:   %s\n  cordon: %s\n", p.Node, p.Policy, p.Mode, p.Cordon)
	for _, o := range p.Overrides {
		fmt.Fprintf(w, "  override: %s\n", o)
	}
	if p.Existing != "" {
		fmt.Fprintf(w, "  drain:  %s\n", p.Existing)
	}
	fmt.Fprintln(w)
	if err := writePods(w, p.Pods); err != nil {
		return err
	}
	if err := writePDBs(w, p.PDBs); err != nil {
		return err
	}
	fmt.Fprintln(w)
	writeList(w, "HTTP evacuation hooks", p.Hooks)
	providerLines := make([]string, 0, len(p.Providers))
	for _, pp := range p.Providers {
		providerLines = append(providerLines, providerLine(pp))
	}
	writeList(w, "evacuation providers", providerLines)
	evLines := make([]string, 0, len(p.Evacuations))
	for _, ev := range p.Evacuations {
		evLines = append(evLines, evacuationLine(ev))
	}
	writeList(w, "Evacuations of the node", evLines)
	writeEstimate(w, p)
	return nil
}

// writePods writes the table of the node's pods, then the annotations the
// policy ignores.
func writePods(w io.Writer, pods []PodPlan) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  POD\tACTION\tNEXT\tREASON\tDETAIL")
	for _, pp := range pods {
		action := pp.Action
		if pp.BlockedNow {
			action += " (blocked)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", pp.Pod, action, pp.Next, pp.Reason, orDash(podDetail(pp)))
	}
	if len(pods) == 0 {
		fmt.Fprintln(tw, "  (no pods)\t\t\t\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, pp := range pods {
		if len(pp.IgnoredAnnotations) > 0 {
			fmt.Fprintf(w, "  annotations of %s ignored (its namespace is not selected by the policy's pods.annotationNamespaceSelector; planned as if it had none): %s\n",
				pp.Pod, strings.Join(pp.IgnoredAnnotations, ", "))
		}
	}
	return nil
}

// podDetail is a pod's DETAIL column: the planner's detail (or its PDBs),
// what holds it, and its surge.
func podDetail(pp PodPlan) string {
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
	return detail
}

// writePDBs writes the table of the PDBs that guard the node's pods, if
// any.
func writePDBs(w io.Writer, pdbs []PDBPlan) error {
	if len(pdbs) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  PDB\tBUDGET\tALLOWED\tHEALTHY\tON NODE\tVERDICT")
	for _, pdb := range pdbs {
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
	return tw.Flush()
}

// providerLine says what the drain asks of one EvacuationProvider, or why
// nothing.
func providerLine(pp ProviderPlan) string {
	if !pp.Asked {
		return fmt.Sprintf("EvacuationProvider %s: not asked: %s", pp.Name, pp.Why)
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
	return line
}

// evacuationLine describes one of the node's Evacuations as it is now.
func evacuationLine(ev EvacuationPlan) string {
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
	return line
}

// writeEstimate writes how long the evictions take, what the evacuations
// wait for, the pods not waited on, and whether the drain would finish.
func writeEstimate(w io.Writer, p NodePlan) {
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
