package policy

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// orSelector matches what any of its selectors matches.
type orSelector []labels.Selector

var _ labels.Selector = orSelector(nil)

func (o orSelector) Matches(l labels.Labels) bool {
	for _, s := range o {
		if s.Matches(l) {
			return true
		}
	}
	return false
}
func (o orSelector) Empty() bool { return false }
func (o orSelector) String() string {
	parts := make([]string, len(o))
	for i, s := range o {
		parts[i] = s.String()
	}
	return strings.Join(parts, " or ")
}
func (o orSelector) Add(...labels.Requirement) labels.Selector { return o }
func (o orSelector) Requirements() (labels.Requirements, bool) { return nil, false }
func (o orSelector) DeepCopySelector() labels.Selector         { return append(orSelector(nil), o...) }
func (o orSelector) RequiresExactMatch(string) (string, bool)  { return "", false }

// WithOverrides is p under the overrides of the drain's requesters
// (v1alpha1.PodOverrides): a pod leaves when any requester would move it.
// Each requester's DeleteEmptyDirData and DeleteUnmanaged apply; the
// shortest grace period wins over the policy's; pod selectors narrow the
// drain only while every requester has one, to the pods any of them
// matches. A selector that does not parse narrows nothing (the drain moves
// every pod its policy moves) and is reported in the returned notes, as
// each override applied is, for people.
func (p Policy) WithOverrides(requesters []v1alpha1.Requester) (Policy, []string) {
	var notes []string
	var selectors orSelector
	narrowed := len(requesters) > 0
	for _, r := range requesters {
		o := r.Overrides
		if o == nil || o.PodSelector == "" {
			narrowed = false
		}
		if o == nil {
			continue
		}
		if o.DeleteEmptyDirData && !p.Rules.EvictLocalStorage {
			p.Rules.EvictLocalStorage = true
			notes = append(notes, "pods with emptyDir data are evicted: --delete-emptydir-data of "+r.Name)
		}
		if o.DeleteUnmanaged && !p.Rules.DeleteUnmanaged {
			p.Rules.DeleteUnmanaged = true
			notes = append(notes, "pods without a controller are evicted: --force of "+r.Name)
		}
		if g := o.GracePeriodSeconds; g != nil && *g > 0 && (p.Grace == nil || *g < *p.Grace) {
			grace := *g
			p.Grace = &grace
			notes = append(notes, fmt.Sprintf("evictions give pods %ds to stop: --grace-period of %s", grace, r.Name))
		}
		if o.PodSelector != "" {
			sel, err := labels.Parse(o.PodSelector)
			if err != nil {
				narrowed = false
				notes = append(notes, fmt.Sprintf("the pod selector %q of %s does not parse (%v): every pod the policy moves leaves", o.PodSelector, r.Name, err))
				continue
			}
			selectors = append(selectors, sel)
		}
	}
	if narrowed && len(selectors) > 0 {
		p.Rules.OnlySelector = selectors
		if len(selectors) == 1 {
			p.Rules.OnlySelector = selectors[0]
		}
		notes = append(notes, "only pods matching "+p.Rules.OnlySelector.String()+" leave: --pod-selector")
	}
	p.Overridden = notes
	return p, notes
}
