package requests

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// This file tests Apply and what it sends: each requester's field manager, the
// spec it applies, the drain object, and that requesters share a drain without
// touching each other's entries.

// TestFieldManagerIsTheRequestersOwnWithinTheAPILimit: every requester
// applies under a manager of its own, "vacate-<requester>"; a name that
// would pass the API's 128 characters is cut and ends with a hash of the
// whole, so two long requesters with a common beginning still get two
// managers, and the same requester always gets the same one.
func TestFieldManagerIsTheRequestersOwnWithinTheAPILimit(t *testing.T) {
	fits := strings.Repeat("a", 128-len("vacate-"))
	long := strings.Repeat("b", 200)
	for _, tc := range []struct {
		requester string
		want      string // "" when hashed
	}{
		{"cli:alice", "vacate-cli:alice"},
		{"taint", "vacate-taint"},
		{"external:example.com/maintenance", "vacate-external:example.com/maintenance"},
		{fits, "vacate-" + fits},
		{fits + "x", ""},
		{long + "1", ""},
	} {
		got := FieldManager(tc.requester)
		if tc.want != "" {
			if got != tc.want {
				t.Errorf("FieldManager(%q) = %q, want %q", tc.requester, got, tc.want)
			}
			continue
		}
		if len(got) != 128 || !strings.HasPrefix(got, "vacate-") || got[128-17] != '-' {
			t.Errorf("FieldManager(%q) = %q (%d characters), want 128 characters: a prefix, '-' and 16 hex digits", tc.requester, got, len(got))
		}
		if FieldManager(tc.requester) != got {
			t.Errorf("FieldManager(%q) is not stable", tc.requester)
		}
	}
	if a, b := FieldManager(long+"1"), FieldManager(long+"2"); a == b {
		t.Errorf("two long requesters share the manager %q", a)
	}
}

// TestApplySpecHoldsTheEntryAndOnlyWhatIsSet: what a requester applies is
// the node, its own entry (name; reason and deadline when set, the
// deadline in UTC RFC 3339 to the second), and the mode and policy only
// when given: a field left out is one the requester does not own, so it
// never changes the others' mode or policy by omission.
func TestApplySpecHoldsTheEntryAndOnlyWhatIsSet(t *testing.T) {
	paris := time.FixedZone("CET", 3600)
	deadline := metav1.NewTime(time.Date(2026, 11, 23, 11, 30, 0, 500_000_000, paris))
	for _, tc := range []struct {
		name   string
		r      v1alpha1.Requester
		mode   v1alpha1.DrainMode
		policy string
		want   string
	}{
		{"name only", v1alpha1.Requester{Name: "taint"}, "", "",
			`{"nodeName":"n1","requesters":[{"name":"taint"}]}`},
		{"reason, mode and policy", v1alpha1.Requester{Name: "cli:alice", Reason: "TICKET-1"}, v1alpha1.ModeMaintenance, "gpu",
			`{"mode":"Maintenance","nodeName":"n1","policyName":"gpu","requesters":[{"name":"cli:alice","reason":"TICKET-1"}]}`},
		{"deadline in UTC", v1alpha1.Requester{Name: "agent", Deadline: &deadline}, v1alpha1.ModeDecommission, "",
			`{"mode":"Decommission","nodeName":"n1","requesters":[{"deadline":"2026-11-23T10:30:00Z","name":"agent"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := json.Marshal(applySpec("n1", tc.r, tc.mode, tc.policy))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("applySpec = %s\nwant         %s", got, tc.want)
			}
		})
	}
}

// TestDrainObjectNamesAUIDOnlyWhenGiven: the applied object is a NodeDrain
// of vacate.dev/v1alpha1 named after the node; it names a UID only when
// one is given, which is what makes the API server refuse to create a
// drain (Withdraw, Raise's forced apply) rather than create one.
func TestDrainObjectNamesAUIDOnlyWhenGiven(t *testing.T) {
	spec := map[string]any{"nodeName": "n1"}
	for uid, want := range map[string]map[string]any{
		"":     {"name": "n1"},
		"u-42": {"name": "n1", "uid": "u-42"},
	} {
		u := drain("n1", uid, spec)
		if u.GetAPIVersion() != "vacate.dev/v1alpha1" || u.GetKind() != "NodeDrain" {
			t.Errorf("drain(%q) is a %s %s", uid, u.GetAPIVersion(), u.GetKind())
		}
		if got := u.Object["metadata"]; !reflect.DeepEqual(got, want) {
			t.Errorf("drain(%q) metadata %v, want %v", uid, got, want)
		}
	}
}

// TestIndexFindsTheRequestersEntry: the position of the entry named
// exactly so, or -1.
func TestIndexFindsTheRequestersEntry(t *testing.T) {
	nd := testutil.NodeDrain("n1", "", "taint", "cli:alice", "agent")
	for requester, want := range map[string]int{"taint": 0, "cli:alice": 1, "agent": 2, "cli:bob": -1, "cli": -1, "": -1} {
		if got := Index(nd, requester); got != want {
			t.Errorf("Index(%q) = %d, want %d", requester, got, want)
		}
	}
	if got := Index(testutil.NodeDrain("n1", ""), "taint"); got != -1 {
		t.Errorf("Index on a drain with no requester = %d, want -1", got)
	}
}

// TestApplySendsTheEntryUnforcedUnderTheRequestersManager: Apply sends one
// server-side apply under the requester's manager, never forced (the
// others' fields are theirs), naming no UID nor resourceVersion (it
// creates the drain when there is none), with the spec of applySpec.
func TestApplySendsTheEntryUnforcedUnderTheRequestersManager(t *testing.T) {
	e := newEnv(t)
	r := v1alpha1.Requester{Name: "cli:alice", Reason: "TICKET-1"}
	if err := Apply(context.Background(), e.c, "n1", r, v1alpha1.ModeMaintenance, "gpu"); err != nil {
		t.Fatal(err)
	}
	if len(e.applies) != 1 {
		t.Fatalf("sent %d applies, want 1", len(e.applies))
	}
	a := e.applies[0]
	if a.manager != "vacate-cli:alice" || a.force {
		t.Errorf("applied as %q, force %v; want vacate-cli:alice, unforced", a.manager, a.force)
	}
	if want := map[string]any{"name": "n1"}; !reflect.DeepEqual(a.meta(), want) {
		t.Errorf("applied metadata %v, want %v", a.meta(), want)
	}
	want, _ := json.Marshal(applySpec("n1", r, v1alpha1.ModeMaintenance, "gpu"))
	if got, _ := json.Marshal(a.spec()); string(got) != string(want) {
		t.Errorf("applied spec %s, want %s", got, want)
	}
	nd := e.mustDrain("n1")
	if nd.Spec.Mode != v1alpha1.ModeMaintenance || nd.Spec.PolicyName != "gpu" || !slices.Equal(names(nd), []string{"cli:alice"}) {
		t.Errorf("created drain %+v", nd.Spec)
	}
}

// TestRequestersEachOwnOnlyTheirEntry: two requesters apply to one drain
// (the second restating the drain's mode and policy): both entries are
// there, each manager owns its own entry and no other, and both share the
// mode and policy. A requester applying again (a new reason) changes only
// its entry. This is the list-map merge the CRD declares for
// spec.requesters; a requester sending the whole list would take the
// others' entries.
func TestRequestersEachOwnOnlyTheirEntry(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	if err := Apply(ctx, e.c, "n1", v1alpha1.Requester{Name: "cli:alice", Reason: "TICKET-1"}, v1alpha1.ModeMaintenance, "gpu"); err != nil {
		t.Fatal(err)
	}
	if err := Apply(ctx, e.c, "n1", v1alpha1.Requester{Name: v1alpha1.RequesterTaint}, v1alpha1.ModeMaintenance, "gpu"); err != nil {
		t.Fatal(err)
	}
	if err := Apply(ctx, e.c, "n1", v1alpha1.Requester{Name: "cli:alice", Reason: "TICKET-2"}, v1alpha1.ModeMaintenance, "gpu"); err != nil {
		t.Fatal(err)
	}
	nd := e.mustDrain("n1")
	if !slices.Equal(names(nd), []string{"cli:alice", "taint"}) {
		t.Fatalf("requesters %v, want cli:alice and taint", names(nd))
	}
	if nd.Spec.Requesters[0].Reason != "TICKET-2" {
		t.Errorf("cli:alice's reason %q, want TICKET-2", nd.Spec.Requesters[0].Reason)
	}
	for _, who := range []string{"cli:alice", "taint"} {
		other := map[string]string{"cli:alice": "taint", "taint": "cli:alice"}[who]
		if !owns(t, nd, who, "f:spec", "f:requesters", entryKey(who)) {
			t.Errorf("%s does not own its entry", who)
		}
		if owns(t, nd, who, "f:spec", "f:requesters", entryKey(other)) {
			t.Errorf("%s owns %s's entry", who, other)
		}
		if !owns(t, nd, who, "f:spec", "f:mode") || !owns(t, nd, who, "f:spec", "f:policyName") {
			t.Errorf("%s does not share the mode and policy", who)
		}
	}
}
