package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/vacate-dev/vacate/internal/explain"
)

// TestExplainPrintsItsOwnKind (issue 44): explain -o json|yaml|jsonpath
// prints a DrainExplanation of cli.vacate.dev/v1alpha1 (not a NodeDrain,
// which it is not), named after the node, with the node, state and
// findings; -o name names the NodeDrain explained, which kubectl reads.
func TestExplainPrintsItsOwnKind(t *testing.T) {
	e := explain.Explanation{State: "Evicting, 1 of 2 pod(s) evicted, 1 blocked",
		Findings: []explain.Finding{{Subject: "pod shop/db-0", Cause: "PDB shop/db allows 0 disruptions", Fix: "relax the PDB"}}}
	print := func(format, arg string) string {
		t.Helper()
		p, err := objectPrinter(format, arg)
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		if err := printExplanation(p, format, Streams{Out: &out}, "node-4", e); err != nil {
			t.Fatalf("-o %s: %v", format, err)
		}
		return out.String()
	}
	var doc struct {
		APIVersion, Kind string
		Metadata         struct{ Name string }
		Node, State      string
		Findings         []explain.Finding
	}
	if err := json.Unmarshal([]byte(print(formatJSON, "")), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.APIVersion != "cli.vacate.dev/v1alpha1" || doc.Kind != "DrainExplanation" || doc.Metadata.Name != "node-4" || doc.Node != "node-4" ||
		doc.State != e.State || len(doc.Findings) != 1 || doc.Findings[0].Fix != "relax the PDB" {
		t.Errorf("-o json: %+v", doc)
	}
	if out := print(formatYAML, ""); !strings.Contains(out, "kind: DrainExplanation\n") || strings.Contains(out, "NodeDrain") {
		t.Errorf("-o yaml:\n%s", out)
	}
	if out := print(formatJSONPath, "{.kind} {.findings[0].subject}"); out != "DrainExplanation pod shop/db-0" {
		t.Errorf("-o jsonpath: %q", out)
	}
	if out := print(formatName, ""); out != "nodedrain.vacate.dev/node-4\n" {
		t.Errorf("-o name: %q", out)
	}
}
