package controller

import (
	"testing"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/internal/controller/index"
	"github.com/vacate-dev/vacate/internal/controller/scoped"
	"github.com/vacate-dev/vacate/internal/surge"
)

// TestListsOfPodsNameTheirScope: each list of pods the controllers make
// goes to the scope that holds its pods, with the labels its pods must
// match; a list that names no node nor the replacements is refused, and
// the scopes say what they are of.
func TestListsOfPodsNameTheirScope(t *testing.T) {
	exists, err := labels.NewRequirement(surge.LabelOf, selection.Exists, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what  string
		opts  []client.ListOption
		scope scoped.Scope
		// matches and not are label sets the list's pods must match, and
		// must not.
		matches, not labels.Set
		refused      bool
	}{
		{what: "a node's pods", opts: []client.ListOption{client.MatchingFields{index.PodNodeName: "n1"}},
			scope: scoped.Node("n1"), matches: labels.Set{}},
		{what: "a node's pods of a namespace, by labels", opts: []client.ListOption{client.InNamespace("shop"),
			client.MatchingFields{index.PodNodeName: "n1"}, client.MatchingLabels{"app": "web"}},
			scope: scoped.Node("n1"), matches: labels.Set{"app": "web"}, not: labels.Set{"app": "db"}},
		{what: "a drain's replacements", opts: []client.ListOption{client.MatchingFields{index.Surge: "n1"}},
			scope: scoped.Labelled(surge.LabelOf), matches: labels.Set{surge.LabelDrain: "n1", surge.LabelOf: "u"},
			not: labels.Set{surge.LabelDrain: "n2", surge.LabelOf: "u"}},
		{what: "a namespace's replacements", opts: []client.ListOption{client.InNamespace("shop"), client.MatchingLabelsSelector{Selector: labels.NewSelector().Add(*exists)}},
			scope: scoped.Labelled(surge.LabelOf), matches: labels.Set{surge.LabelOf: "u"}, not: labels.Set{}},
		{what: "a namespace's pods", opts: []client.ListOption{client.InNamespace("shop")}, refused: true},
		{what: "every pod", refused: true},
		{what: "pods by labels only", opts: []client.ListOption{client.MatchingLabels{"app": "web"}}, refused: true},
		{what: "pods by another field", opts: []client.ListOption{client.MatchingFields{"status.phase": "Running"}}, refused: true},
	} {
		lo := &client.ListOptions{}
		lo.ApplyOptions(tc.opts)
		scope, sel, err := podScope(lo)
		switch {
		case tc.refused:
			if err == nil {
				t.Errorf("%s: listed from %s, want refused", tc.what, scope)
			}
			continue
		case err != nil:
			t.Errorf("%s: %v", tc.what, err)
			continue
		case scope != tc.scope:
			t.Errorf("%s: scope %s, want %s", tc.what, scope, tc.scope)
		}
		if !sel.Matches(tc.matches) || (tc.not != nil && sel.Matches(tc.not)) {
			t.Errorf("%s: selector %s matches %v: %t, %v: %t", tc.what, sel, tc.matches, sel.Matches(tc.matches), tc.not, tc.not != nil && sel.Matches(tc.not))
		}
	}
	if n, ok := scoped.Node("n1").NodeOf(); !ok || n != "n1" {
		t.Errorf("Node(n1).NodeOf() = %q, %t", n, ok)
	}
	if p, ok := podOf(scoped.Pod("shop", "web-0")); !ok || p != "web-0" {
		t.Errorf("podOf(Pod(shop, web-0)) = %q, %t", p, ok)
	}
	for _, s := range []scoped.Scope{scoped.Labelled(surge.LabelOf), scoped.Everything(), scoped.Pod("shop", "web-0")} {
		if _, ok := s.NodeOf(); ok {
			t.Errorf("%s is of a node", s)
		}
	}
	if _, ok := podOf(scoped.Node("n1")); ok {
		t.Error("Node(n1) is of a pod")
	}
}
