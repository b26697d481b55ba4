package policy

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

func TestWithOverrides(t *testing.T) {
	base := Policy{Name: "pool", Grace: ptr.To[int64](30)}
	req := func(name string, o *v1alpha1.PodOverrides) v1alpha1.Requester {
		return v1alpha1.Requester{Name: name, Overrides: o}
	}
	web, cache := labels.Set{"app": "web"}, labels.Set{"app": "cache"}

	p, notes := base.WithOverrides([]v1alpha1.Requester{req("cli:a", nil), req("taint", nil)})
	if p.Rules.EvictLocalStorage || p.Rules.DeleteUnmanaged || *p.Grace != 30 || p.Rules.OnlySelector != nil || len(notes) != 0 {
		t.Errorf("without overrides: %+v %v", p, notes)
	}

	// Each requester's overrides apply; the shortest grace wins.
	p, notes = base.WithOverrides([]v1alpha1.Requester{
		req("cli:a", &v1alpha1.PodOverrides{DeleteEmptyDirData: true, GracePeriodSeconds: ptr.To[int64](10)}),
		req("cli:b", &v1alpha1.PodOverrides{DeleteUnmanaged: true, GracePeriodSeconds: ptr.To[int64](20)}),
	})
	if !p.Rules.EvictLocalStorage || !p.Rules.DeleteUnmanaged || *p.Grace != 10 || len(notes) != 3 || len(p.Overridden) != 3 {
		t.Errorf("two requesters' overrides: %+v %v", p, notes)
	}
	if *base.Grace != 30 {
		t.Error("WithOverrides changed the policy it was given")
	}
	// A longer grace than the policy's changes nothing.
	if p, _ := base.WithOverrides([]v1alpha1.Requester{req("cli:a", &v1alpha1.PodOverrides{GracePeriodSeconds: ptr.To[int64](60)})}); *p.Grace != 30 {
		t.Errorf("a longer grace: %d", *p.Grace)
	}

	// Selectors narrow only while every requester has one.
	p, _ = base.WithOverrides([]v1alpha1.Requester{req("cli:a", &v1alpha1.PodOverrides{PodSelector: "app=web"})})
	if p.Rules.OnlySelector == nil || !p.Rules.OnlySelector.Matches(web) || p.Rules.OnlySelector.Matches(cache) {
		t.Errorf("one requester's selector: %v", p.Rules.OnlySelector)
	}
	p, notes = base.WithOverrides([]v1alpha1.Requester{req("cli:a", &v1alpha1.PodOverrides{PodSelector: "app=web"}), req("cli:b", &v1alpha1.PodOverrides{PodSelector: "app=cache"})})
	if p.Rules.OnlySelector == nil || !p.Rules.OnlySelector.Matches(web) || !p.Rules.OnlySelector.Matches(cache) || p.Rules.OnlySelector.Matches(labels.Set{"app": "db"}) ||
		!strings.Contains(strings.Join(notes, ";"), "app=web or app=cache") {
		t.Errorf("two requesters' selectors: %v %v", p.Rules.OnlySelector, notes)
	}
	if p, _ := base.WithOverrides([]v1alpha1.Requester{req("cli:a", &v1alpha1.PodOverrides{PodSelector: "app=web"}), req("taint", nil)}); p.Rules.OnlySelector != nil {
		t.Errorf("a requester without a selector wants the whole node: %v", p.Rules.OnlySelector)
	}
	p, notes = base.WithOverrides([]v1alpha1.Requester{req("cli:a", &v1alpha1.PodOverrides{PodSelector: "app in ("})})
	if p.Rules.OnlySelector != nil || !strings.Contains(strings.Join(notes, ";"), "does not parse") {
		t.Errorf("a selector that does not parse: %v %v", p.Rules.OnlySelector, notes)
	}
}
