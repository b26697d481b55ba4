package requests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/config/crd"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// The fake client runs server-side apply (structured-merge-diff, as the API
// server does) with the type converter it is given. Built from vacate's own
// CRD schemas, it merges spec.requesters as the list map keyed by name that
// the CRD declares, so each manager owns its entry, and conflicts name the
// fields (.spec.mode) as the API server's do. It does not run the CRD's CEL
// rules, defaults, or the UID precondition on an existing object; tests
// that need those script the server's answer with an interceptor.

var drainsGR = schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "nodedrains"}

// crdTypeConverter types vacate's objects by the openAPIV3Schema of its
// CRDs, as the API server types a CRD's objects for server-side apply.
func crdTypeConverter(t *testing.T) managedfields.TypeConverter {
	t.Helper()
	crds, err := crd.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	defs := map[string]*spec.Schema{}
	for _, c := range crds {
		for _, v := range c.Spec.Versions {
			data, err := json.Marshal(v.Schema.OpenAPIV3Schema)
			if err != nil {
				t.Fatal(err)
			}
			s := &spec.Schema{}
			if err := json.Unmarshal(data, s); err != nil {
				t.Fatal(err)
			}
			s.AddExtension("x-kubernetes-group-version-kind", []any{map[string]any{"group": c.Spec.Group, "version": v.Name, "kind": c.Spec.Names.Kind}})
			defs[c.Spec.Group+"."+v.Name+"."+c.Spec.Names.Kind] = s
		}
	}
	tc, err := managedfields.NewTypeConverter(defs, false)
	if err != nil {
		t.Fatal(err)
	}
	return tc
}

// sentApply is a server-side apply the code sent.
type sentApply struct {
	manager string
	force   bool
	body    map[string]any
}

// spec is the applied spec.
func (a sentApply) spec() map[string]any { s, _ := a.body["spec"].(map[string]any); return s }

// meta is the applied metadata.
func (a sentApply) meta() map[string]any { m, _ := a.body["metadata"].(map[string]any); return m }

// env is a fake API server that records the writes sent. The hooks, when
// set, answer the n-th call (from 1) in the server's place: a non-nil
// error refuses it; nil lets the fake server handle it.
type env struct {
	t       *testing.T
	c       client.Client
	applies []sentApply
	patches []string // JSON patches
	deletes []client.DeleteOptions

	applyErr  func(n int, a sentApply) error
	patchErr  func(n int, c client.Client) error
	deleteErr func(n int) error
}

func newEnv(t *testing.T, objs ...client.Object) *env {
	t.Helper()
	scheme := testutil.Scheme(t)
	e := &env{t: t}
	base := fake.NewClientBuilder().WithScheme(scheme).WithTypeConverters(crdTypeConverter(t)).
		WithReturnManagedFields().WithObjects(objs...).Build()
	e.c = interceptor.NewClient(base, interceptor.Funcs{
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			o := &client.ApplyOptions{}
			o.ApplyOptions(opts)
			data, err := json.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			a := sentApply{manager: o.FieldManager, force: o.Force != nil && *o.Force}
			if err := json.Unmarshal(data, &a.body); err != nil {
				t.Fatal(err)
			}
			e.applies = append(e.applies, a)
			e.bound(len(e.applies), "applies")
			if e.applyErr != nil {
				if err := e.applyErr(len(e.applies), a); err != nil {
					return err
				}
			}
			return c.Apply(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			data, err := patch.Data(obj)
			if err != nil {
				return err
			}
			if patch.Type() != types.JSONPatchType {
				t.Errorf("sent a %s patch, want JSON patches only", patch.Type())
			}
			e.patches = append(e.patches, string(data))
			e.bound(len(e.patches), "patches")
			if e.patchErr != nil {
				if err := e.patchErr(len(e.patches), c); err != nil {
					return err
				}
			}
			err = c.Patch(ctx, obj, patch, opts...)
			var status apierrors.APIStatus
			if err != nil && !errors.As(err, &status) {
				// A JSON patch the server cannot apply (its test op
				// failed) is a 422, as k8s.io/apiserver's patch handler
				// answers; the fake returns a plain error.
				err = apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "patch", drainsGR, obj.GetName(), err.Error(), 0, false)
			}
			return err
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			o := client.DeleteOptions{}
			o.ApplyOptions(opts)
			e.deletes = append(e.deletes, o)
			e.bound(len(e.deletes), "deletes")
			if e.deleteErr != nil {
				if err := e.deleteErr(len(e.deletes)); err != nil {
					return err
				}
			}
			// The fake checks the resourceVersion precondition, not the
			// UID's: check it as the API server does.
			if p := o.Preconditions; p != nil && p.UID != nil {
				cur := &v1alpha1.NodeDrain{}
				if err := c.Get(ctx, client.ObjectKeyFromObject(obj), cur); err == nil && cur.UID != *p.UID {
					return apierrors.NewConflict(drainsGR, obj.GetName(), fmt.Errorf("Precondition failed: UID in precondition: %s, UID in object meta: %s", *p.UID, cur.UID))
				}
			}
			return c.Delete(ctx, obj, opts...)
		},
	})
	return e
}

// bound stops a test whose code under test keeps writing: its retries
// must be bounded.
func (e *env) bound(n int, what string) {
	if n > 100 {
		e.t.Fatalf("sent more than 100 %s: a retry loop is unbounded", what)
	}
}

// drain reads the node's drain as the server has it, nil when there is none.
func (e *env) drain(node string) *v1alpha1.NodeDrain {
	e.t.Helper()
	nd := &v1alpha1.NodeDrain{}
	err := e.c.Get(context.Background(), types.NamespacedName{Name: node}, nd)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return nd
}

// mustDrain is the node's drain, which must exist.
func (e *env) mustDrain(node string) *v1alpha1.NodeDrain {
	e.t.Helper()
	nd := e.drain(node)
	if nd == nil {
		e.t.Fatalf("NodeDrain %s does not exist", node)
	}
	return nd
}

func names(nd *v1alpha1.NodeDrain) []string {
	var out []string
	for _, r := range nd.Spec.Requesters {
		out = append(out, r.Name)
	}
	return out
}

// entryKey is how managed fields name a requester's entry.
func entryKey(name string) string { return fmt.Sprintf(`k:{"name":%q}`, name) }

// owns reports whether the requester's manager owns the field at path in
// the drain's managed fields, such as "f:spec", "f:mode".
func owns(t *testing.T, nd *v1alpha1.NodeDrain, requester string, path ...string) bool {
	t.Helper()
	for _, m := range nd.ManagedFields {
		if m.Manager != FieldManager(requester) || m.FieldsV1 == nil {
			continue
		}
		var set map[string]any
		if err := json.Unmarshal(m.FieldsV1.GetRawBytes(), &set); err != nil {
			t.Fatal(err)
		}
		for i, p := range path {
			v, ok := set[p]
			if !ok {
				break
			}
			if i == len(path)-1 {
				return true
			}
			set, _ = v.(map[string]any)
		}
	}
	return false
}

// conflict is the error the API server returns for a server-side apply
// whose fields another manager owns with other values.
func conflict(fields ...string) error {
	var causes []metav1.StatusCause
	for _, f := range fields {
		causes = append(causes, metav1.StatusCause{Type: metav1.CauseTypeFieldManagerConflict, Message: `conflict with "vacate-cli:alice"`, Field: f})
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusConflict, Reason: metav1.StatusReasonConflict,
		Message: fmt.Sprintf("Apply failed with %d conflicts", len(fields)),
		Details: &metav1.StatusDetails{Name: "n1", Group: "vacate.dev", Kind: "nodedrains", Causes: causes},
	}}
}

func plainConflict() error {
	return apierrors.NewConflict(drainsGR, "n1", errors.New("the object has been modified; please apply your changes to the latest version and try again"))
}

func forbidden() error { return apierrors.NewForbidden(drainsGR, "n1", errors.New("RBAC says no")) }

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

// TestOnlyModeConflictsRecognisesAConflictOverSpecModeAlone: Raise may
// force only when the apply's conflicts all name .spec.mode, as field
// manager conflicts; any other field, another cause type, an error with no
// causes, or one that is not a conflict, is not forced. Wrapping keeps the
// answer.
func TestOnlyModeConflictsRecognisesAConflictOverSpecModeAlone(t *testing.T) {
	otherCause := conflict(".spec.mode")
	otherCause.(*apierrors.StatusError).ErrStatus.Details.Causes[0].Type = metav1.CauseTypeFieldValueInvalid
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"mode only", conflict(".spec.mode"), true},
		{"mode only, wrapped", fmt.Errorf("applying: %w", conflict(".spec.mode")), true},
		{"mode from two managers", conflict(".spec.mode", ".spec.mode"), true},
		{"mode and policy", conflict(".spec.mode", ".spec.policyName"), false},
		{"policy only", conflict(".spec.policyName"), false},
		{"another entry's field", conflict(`.spec.requesters[name="taint"].reason`), false},
		{"mode, another cause type", otherCause, false},
		{"conflict without causes", plainConflict(), false},
		{"conflict with empty causes", conflict(), false},
		{"not a conflict", forbidden(), false},
		{"not an API error", errors.New("connection refused"), false},
	} {
		if got := onlyModeConflicts(tc.err); got != tc.want {
			t.Errorf("%s: onlyModeConflicts = %v, want %v", tc.name, got, tc.want)
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

// TestRaiseForcesOnlyAModeConflictOnTheVersionSeen: Raise applies
// Decommission unforced, with the policy of the drain it saw. Only when
// that conflicts over spec.mode alone, and it was given the drain it saw,
// does it apply again, forced, naming that drain's UID and resourceVersion
// (so it neither recreates a deleted drain nor overrides a drain changed
// since); the forced apply's answer is returned. Any other outcome of the
// first apply is returned as it is. The server's answers are scripted.
func TestRaiseForcesOnlyAModeConflictOnTheVersionSeen(t *testing.T) {
	seen := testutil.NodeDrain("n1", "gpu", "cli:alice")
	seen.UID, seen.ResourceVersion, seen.Spec.Mode = "u-1", "41", v1alpha1.ModeMaintenance
	for _, tc := range []struct {
		name    string
		seen    *v1alpha1.NodeDrain
		answers []error // the server's answer to each apply
		forced  bool    // a second, forced apply is sent
		wantErr func(error) bool
	}{
		{name: "no drain yet", answers: []error{nil}, wantErr: isNil},
		{name: "no drain seen, mode conflict", answers: []error{conflict(".spec.mode")}, wantErr: apierrors.IsConflict},
		{name: "no conflict", seen: seen, answers: []error{nil}, wantErr: isNil},
		{name: "mode conflict", seen: seen, answers: []error{conflict(".spec.mode"), nil}, forced: true, wantErr: isNil},
		{name: "mode conflict, drain changed since seen", seen: seen, answers: []error{conflict(".spec.mode"), plainConflict()}, forced: true, wantErr: apierrors.IsConflict},
		{name: "mode conflict, drain deleted since seen", seen: seen, answers: []error{conflict(".spec.mode"), apierrors.NewNotFound(drainsGR, "n1")}, forced: true, wantErr: apierrors.IsNotFound},
		{name: "mode and policy conflict", seen: seen, answers: []error{conflict(".spec.mode", ".spec.policyName")}, wantErr: apierrors.IsConflict},
		{name: "forbidden", seen: seen, answers: []error{forbidden()}, wantErr: apierrors.IsForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.applyErr = func(n int, _ sentApply) error {
				if n > len(tc.answers) {
					t.Fatalf("apply %d was not expected", n)
				}
				if err := tc.answers[n-1]; err != nil {
					return err
				}
				return errAccepted
			}
			var seen *v1alpha1.NodeDrain
			if tc.seen != nil {
				seen = tc.seen.DeepCopy()
			}
			err := Raise(context.Background(), e.c, "n1", v1alpha1.Requester{Name: v1alpha1.RequesterDelete}, seen)
			if errors.Is(err, errAccepted) {
				err = nil
			}
			if !tc.wantErr(err) {
				t.Errorf("Raise returned %v", err)
			}
			want := 1
			if tc.forced {
				want = 2
			}
			if len(e.applies) != want {
				t.Fatalf("sent %d applies, want %d", len(e.applies), want)
			}
			policy := ""
			if tc.seen != nil {
				policy = "gpu"
			}
			for i, a := range e.applies {
				if got, _ := a.spec()["policyName"].(string); a.manager != "vacate-delete" || a.spec()["mode"] != "Decommission" || got != policy {
					t.Errorf("apply %d: as %s, spec %v; want vacate-delete applying Decommission and policy %q", i+1, a.manager, a.spec(), policy)
				}
			}
			first := e.applies[0]
			if first.force || first.meta()["uid"] != nil || first.meta()["resourceVersion"] != nil {
				t.Errorf("the first apply is forced (%v) or names a version: %v", first.force, first.meta())
			}
			if tc.forced {
				second := e.applies[1]
				if !second.force || second.meta()["uid"] != "u-1" || second.meta()["resourceVersion"] != "41" {
					t.Errorf("the second apply: force %v, metadata %v; want forced on UID u-1, resourceVersion 41", second.force, second.meta())
				}
			}
		})
	}
}

func isNil(err error) bool { return err == nil }

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

// TestWithdrawLeavesTheOthersEntriesModeAndPolicy: a requester that
// withdraws (its entry added by Apply) removes its entry only, by applying
// without it: the other requester's entry, the mode and the policy stay,
// no JSON patch is needed, and the drain returned is the drain after.
func TestWithdrawLeavesTheOthersEntriesModeAndPolicy(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	for _, who := range []string{"cli:alice", "taint"} {
		if err := Apply(ctx, e.c, "n1", v1alpha1.Requester{Name: who}, v1alpha1.ModeMaintenance, "gpu"); err != nil {
			t.Fatal(err)
		}
	}
	after, err := Withdraw(ctx, e.c, e.mustDrain("n1"), "cli:alice")
	if err != nil {
		t.Fatal(err)
	}
	nd := e.mustDrain("n1")
	if !slices.Equal(names(nd), []string{"taint"}) || nd.Spec.Mode != v1alpha1.ModeMaintenance || nd.Spec.PolicyName != "gpu" {
		t.Errorf("after the withdraw: %+v; want taint's entry, Maintenance, gpu", nd.Spec)
	}
	if !slices.Equal(names(after), names(nd)) || after.ResourceVersion != nd.ResourceVersion {
		t.Errorf("Withdraw returned requesters %v at %s, want the drain after: %v at %s", names(after), after.ResourceVersion, names(nd), nd.ResourceVersion)
	}
	if len(e.patches) != 0 {
		t.Errorf("sent JSON patches %v; the apply alone removes an applied entry", e.patches)
	}
	if a := e.applies[len(e.applies)-1]; a.manager != "vacate-cli:alice" || a.force || a.spec()["requesters"] != nil {
		t.Errorf("the withdraw applied %v as %s (force %v); want the drain without the entry, unforced, as vacate-cli:alice", a.spec(), a.manager, a.force)
	}
}

// TestRaiseTakesSpecModeOverAndAWithdrawKeepsIt: a person's Maintenance
// request owns spec.mode; the delete trigger's Raise conflicts over it
// alone, forces, and takes it over: the drain is Decommission, the
// trigger's manager owns the mode and the person's no longer does, and the
// person's entry and policy are untouched. When the person withdraws
// with the copy read before the raise (Maintenance), the restated mode
// conflicts; Withdraw reads again and restates Decommission, so the drain
// stays Decommission.
func TestRaiseTakesSpecModeOverAndAWithdrawKeepsIt(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	if err := Apply(ctx, e.c, "n1", v1alpha1.Requester{Name: "cli:alice"}, v1alpha1.ModeMaintenance, "gpu"); err != nil {
		t.Fatal(err)
	}
	before := e.mustDrain("n1")
	if err := Raise(ctx, e.c, "n1", v1alpha1.Requester{Name: v1alpha1.RequesterDelete}, before.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	if raise := e.applies[1:]; len(raise) != 2 || raise[0].force || !raise[1].force {
		t.Fatalf("Raise sent %d applies; want an unforced one refused, then a forced one", len(raise))
	}
	nd := e.mustDrain("n1")
	if nd.Spec.Mode != v1alpha1.ModeDecommission || nd.Spec.PolicyName != "gpu" || !slices.Equal(names(nd), []string{"cli:alice", "delete"}) {
		t.Errorf("after the raise: %+v; want Decommission, gpu, cli:alice and delete", nd.Spec)
	}
	if !owns(t, nd, "delete", "f:spec", "f:mode") || owns(t, nd, "cli:alice", "f:spec", "f:mode") {
		t.Error("spec.mode did not pass from cli:alice's manager to delete's")
	}
	if !owns(t, nd, "cli:alice", "f:spec", "f:requesters", entryKey("cli:alice")) || !owns(t, nd, "cli:alice", "f:spec", "f:policyName") {
		t.Error("the raise took more than spec.mode from cli:alice")
	}

	after, err := Withdraw(ctx, e.c, before, "cli:alice")
	if err != nil {
		t.Fatal(err)
	}
	nd = e.mustDrain("n1")
	if nd.Spec.Mode != v1alpha1.ModeDecommission || !slices.Equal(names(nd), []string{"delete"}) || !slices.Equal(names(after), []string{"delete"}) {
		t.Errorf("after the withdraw: %+v; want Decommission with delete only", nd.Spec)
	}
	var modes []any
	for _, a := range e.applies[3:] {
		modes = append(modes, a.spec()["mode"])
	}
	if !reflect.DeepEqual(modes, []any{"Maintenance", "Decommission"}) {
		t.Errorf("the withdraw restated the modes %v, want Maintenance (refused), then Decommission", modes)
	}
}

// TestRaiseReturnsConflictsItMayNotForce: Raise forces nothing but
// spec.mode, on the drain it saw. A drain whose policy another requester
// owns with a value other than the one Raise saw conflicts on two fields:
// nothing is forced. A drain changed since Raise saw it fails the forced
// apply's resourceVersion. Both return a conflict, for the caller to read
// again, and leave the drain as it was.
func TestRaiseReturnsConflictsItMayNotForce(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// change makes the drain Raise saw (seen) differ from the server's.
		change func(t *testing.T, e *env, seen *v1alpha1.NodeDrain)
		forced bool
	}{
		{name: "policy conflict", change: func(_ *testing.T, _ *env, seen *v1alpha1.NodeDrain) { seen.Spec.PolicyName = "old" }},
		{name: "changed since seen", forced: true, change: func(t *testing.T, e *env, _ *v1alpha1.NodeDrain) {
			if err := Apply(ctx, e.c, "n1", v1alpha1.Requester{Name: v1alpha1.RequesterTaint}, v1alpha1.ModeMaintenance, "gpu"); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			if err := Apply(ctx, e.c, "n1", v1alpha1.Requester{Name: "cli:alice"}, v1alpha1.ModeMaintenance, "gpu"); err != nil {
				t.Fatal(err)
			}
			seen := e.mustDrain("n1")
			tc.change(t, e, seen)
			before := e.mustDrain("n1")
			sent := len(e.applies)
			err := Raise(ctx, e.c, "n1", v1alpha1.Requester{Name: v1alpha1.RequesterDelete}, seen)
			if !apierrors.IsConflict(err) {
				t.Fatalf("Raise returned %v, want a conflict", err)
			}
			forced := slices.ContainsFunc(e.applies[sent:], func(a sentApply) bool { return a.force })
			if forced != tc.forced {
				t.Errorf("a forced apply was sent: %v, want %v", forced, tc.forced)
			}
			after := e.mustDrain("n1")
			if after.ResourceVersion != before.ResourceVersion || after.Spec.Mode != v1alpha1.ModeMaintenance || Index(after, "delete") >= 0 {
				t.Errorf("the drain changed: %+v at %s, was %+v at %s", after.Spec, after.ResourceVersion, before.Spec, before.ResourceVersion)
			}
		})
	}
}

// TestWithdrawNeverCreatesADrain: the withdraw's apply names the drain's
// UID, so when the drain is gone the server refuses to create one (uid
// mismatch, a conflict); Withdraw reads again, finds no drain, and
// returns NotFound (what happened, which callers take as nothing left to
// withdraw), and no drain exists after.
func TestWithdrawNeverCreatesADrain(t *testing.T) {
	e := newEnv(t)
	nd := testutil.NodeDrain("n1", "", "cli:alice")
	nd.UID, nd.Spec.Mode = "u-gone", v1alpha1.ModeMaintenance
	if _, err := Withdraw(context.Background(), e.c, nd, "cli:alice"); !apierrors.IsNotFound(err) {
		t.Errorf("Withdraw from a drain that is gone returned %v, want NotFound", err)
	}
	if len(e.applies) == 0 || e.applies[0].meta()["uid"] != "u-gone" {
		t.Fatalf("the withdraw's apply does not name the drain's UID: %v", e.applies)
	}
	if nd := e.drain("n1"); nd != nil {
		t.Errorf("Withdraw created a drain: %+v", nd.Spec)
	}
}

// TestWithdrawRemovesAnEntryWrittenOtherwiseWithAGuardedPatch: an entry
// not added by Apply (kubectl, an older vacate) is not the requester's
// manager's, so the apply leaves it; Withdraw then removes it with a JSON
// patch that first tests the entry at that index is the requester's. The
// others' entries stay.
func TestWithdrawRemovesAnEntryWrittenOtherwiseWithAGuardedPatch(t *testing.T) {
	seeded := testutil.NodeDrain("n1", "", "taint", "cli:bob", "agent")
	seeded.UID, seeded.Spec.Mode = "u-1", v1alpha1.ModeMaintenance
	e := newEnv(t, seeded)
	after, err := Withdraw(context.Background(), e.c, e.mustDrain("n1"), "cli:bob")
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"op":"test","path":"/spec/requesters/1/name","value":"cli:bob"},{"op":"remove","path":"/spec/requesters/1"}]`
	if !slices.Equal(e.patches, []string{want}) {
		t.Errorf("sent %v, want one guarded patch %s", e.patches, want)
	}
	if got := names(e.mustDrain("n1")); !slices.Equal(got, []string{"taint", "agent"}) {
		t.Errorf("requesters %v, want taint and agent", got)
	}
	if !slices.Equal(names(after), []string{"taint", "agent"}) {
		t.Errorf("Withdraw returned requesters %v, want the drain after", names(after))
	}
}

// TestWithdrawRereadsWhenTheGuardFails: when the entries move between
// Withdraw's read and its patch (another requester left), the test op
// fails (a 422) and nothing is removed, or the server answers a conflict;
// Withdraw reads again and removes the entry at its new index. The entry
// that moved to the old index is not removed.
func TestWithdrawRereadsWhenTheGuardFails(t *testing.T) {
	for _, tc := range []struct {
		name string
		race func(t *testing.T, c client.Client) error
	}{
		{"another requester left", func(t *testing.T, c client.Client) error {
			nd := &v1alpha1.NodeDrain{}
			if err := c.Get(context.Background(), types.NamespacedName{Name: "n1"}, nd); err != nil {
				t.Fatal(err)
			}
			nd.Spec.Requesters = slices.DeleteFunc(nd.Spec.Requesters, func(r v1alpha1.Requester) bool { return r.Name == "taint" })
			if err := c.Update(context.Background(), nd); err != nil {
				t.Fatal(err)
			}
			return nil // the patch goes on, on the changed drain
		}},
		{"conflict", func(*testing.T, client.Client) error { return plainConflict() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seeded := testutil.NodeDrain("n1", "", "taint", "cli:bob", "agent")
			seeded.UID = "u-1"
			e := newEnv(t, seeded)
			e.patchErr = func(n int, c client.Client) error {
				if n == 1 {
					return tc.race(t, c)
				}
				return nil
			}
			if _, err := Withdraw(context.Background(), e.c, e.mustDrain("n1"), "cli:bob"); err != nil {
				t.Fatal(err)
			}
			nd := e.mustDrain("n1")
			if Index(nd, "cli:bob") >= 0 || Index(nd, "agent") < 0 {
				t.Errorf("requesters %v; want cli:bob gone and agent kept", names(nd))
			}
			if len(e.patches) != 2 {
				t.Errorf("sent %d patches, want 2: %v", len(e.patches), e.patches)
			}
		})
	}
}

// TestWithdrawPatchErrors: a guarded patch that never lands (the drain
// keeps changing) is retried a bounded number of times, then Withdraw
// fails saying so; an error other than a failed guard or a conflict is
// returned at once. The entry stays in both cases.
func TestWithdrawPatchErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		patches int
		is      func(error) bool
	}{
		{"keeps changing", apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "patch", drainsGR, "n1", "test failed", 0, false), 10,
			func(err error) bool { return err != nil && strings.Contains(err.Error(), "kept changing") }},
		{"forbidden", forbidden(), 1, apierrors.IsForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seeded := testutil.NodeDrain("n1", "", "cli:bob")
			seeded.UID = "u-1"
			e := newEnv(t, seeded)
			e.patchErr = func(int, client.Client) error { return tc.err }
			after, err := Withdraw(context.Background(), e.c, e.mustDrain("n1"), "cli:bob")
			if !tc.is(err) || after != nil {
				t.Errorf("Withdraw = %v, %v", after, err)
			}
			if len(e.patches) != tc.patches {
				t.Errorf("sent %d patches, want %d", len(e.patches), tc.patches)
			}
			if Index(e.mustDrain("n1"), "cli:bob") < 0 {
				t.Error("the entry is gone")
			}
		})
	}
}

// TestRestateRestatesTheDrainsCurrentModeAndNeverAnotherDrain: restate
// applies the drain's nodeName, mode and policy, without entries, under
// the requester's manager, unforced, naming the drain's UID. Refused as a
// conflict or as invalid (the mode never goes down) because its copy is
// older than a raise, it reads the drain again and restates the mode it
// finds; it gives up after a bounded number of attempts. A drain replaced
// under the name (another UID) is not applied to again: the error is
// returned. Other errors are returned at once. The server's answers are
// scripted.
func TestRestateRestatesTheDrainsCurrentModeAndNeverAnotherDrain(t *testing.T) {
	modeDown := apierrors.NewInvalid(schema.GroupKind{Group: "vacate.dev", Kind: "NodeDrain"}, "n1",
		field.ErrorList{field.Invalid(field.NewPath("spec"), "Maintenance", "spec.mode never goes down")})
	for _, tc := range []struct {
		name     string
		server   func(nd *v1alpha1.NodeDrain) // the server's drain, from the caller's
		answers  func(n int) error
		applies  int
		wantErr  bool
		lastMode any
	}{
		{name: "current copy", answers: func(int) error { return nil }, applies: 1, lastMode: "Maintenance"},
		{name: "raised since, conflict", server: func(nd *v1alpha1.NodeDrain) { nd.Spec.Mode = v1alpha1.ModeDecommission },
			answers: refuseFirst(conflict(".spec.mode")), applies: 2, lastMode: "Decommission"},
		{name: "raised since, mode never goes down", server: func(nd *v1alpha1.NodeDrain) { nd.Spec.Mode = v1alpha1.ModeDecommission },
			answers: refuseFirst(modeDown), applies: 2, lastMode: "Decommission"},
		{name: "replaced drain", server: func(nd *v1alpha1.NodeDrain) { nd.UID = "u-new" },
			answers: func(int) error { return conflict(".metadata.uid") }, applies: 1, wantErr: true},
		{name: "always refused", answers: func(int) error { return conflict(".spec.mode") }, applies: restateAttempts, wantErr: true},
		{name: "forbidden", answers: func(int) error { return forbidden() }, applies: 1, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mine := testutil.NodeDrain("n1", "gpu", "cli:alice", "taint")
			mine.UID, mine.Spec.Mode = "u-1", v1alpha1.ModeMaintenance
			server := mine.DeepCopy()
			if tc.server != nil {
				tc.server(server)
			}
			e := newEnv(t, server)
			mine.ResourceVersion = e.mustDrain("n1").ResourceVersion
			e.applyErr = func(n int, _ sentApply) error {
				if err := tc.answers(n); err != nil {
					return err
				}
				return errAccepted
			}
			err := restate(context.Background(), e.c, mine, "cli:alice")
			if errors.Is(err, errAccepted) {
				err = nil
			}
			if (err != nil) != tc.wantErr {
				t.Errorf("restate returned %v, want an error: %v", err, tc.wantErr)
			}
			if len(e.applies) != tc.applies {
				t.Fatalf("sent %d applies, want %d", len(e.applies), tc.applies)
			}
			for i, a := range e.applies {
				if a.manager != "vacate-cli:alice" || a.force || a.meta()["uid"] != "u-1" || a.spec()["requesters"] != nil ||
					a.spec()["nodeName"] != "n1" || a.spec()["policyName"] != "gpu" {
					t.Errorf("apply %d: %v %v as %s (force %v); want the drain u-1 without entries, policy gpu, unforced, as vacate-cli:alice", i+1, a.meta(), a.spec(), a.manager, a.force)
				}
			}
			if tc.lastMode != nil {
				if got := e.applies[len(e.applies)-1].spec()["mode"]; got != tc.lastMode {
					t.Errorf("the last apply restated mode %v, want %v", got, tc.lastMode)
				}
			}
		})
	}
}

// errAccepted stands for the server's success in scripted answers, which
// must not reach the fake server.
var errAccepted = errors.New("accepted")

func refuseFirst(err error) func(int) error {
	return func(n int) error {
		if n == 1 {
			return err
		}
		return nil
	}
}

// TestDeleteIfIdleDeletesOnlyADrainNobodyJoined: a drain with requesters
// is not deleted, and no delete is sent. An idle drain is deleted with
// preconditions on the UID and resourceVersion it was read at, so a
// requester that joined since, or a drain recreated under the name, makes
// the delete fail; DeleteIfIdle reads again and deletes only if the drain
// is still idle, reporting false when someone joined (the drain stays, and
// the caller's copy shows the joiner). A drain already gone counts as
// deleted. It gives up after a bounded number of conflicts, and returns
// other errors.
func TestDeleteIfIdleDeletesOnlyADrainNobodyJoined(t *testing.T) {
	idle := testutil.NodeDrain("n1", "")
	idle.UID = "u-1"
	for _, tc := range []struct {
		name string
		// server is the drain the server holds, the caller's idle copy
		// being read from it before change (nil: no drain).
		server  *v1alpha1.NodeDrain
		change  func(t *testing.T, e *env)
		mine    func(nd *v1alpha1.NodeDrain) // changes the caller's copy
		deny    error                        // the server refuses every delete so
		deleted bool
		deletes int
		wantErr bool
	}{
		{name: "has requesters", server: testutil.NodeDrain("n1", "", "taint"), deletes: 0},
		{name: "idle", server: idle, deleted: true, deletes: 1},
		{name: "idle, already gone", server: idle, change: func(t *testing.T, e *env) { deleteDrain(t, e) }, deleted: true, deletes: 1},
		{name: "someone joined since", server: idle, change: func(t *testing.T, e *env) { join(t, e, "cli:carol") }, deletes: 1},
		{name: "changed since, still idle", server: idle, change: func(t *testing.T, e *env) {
			nd := e.mustDrain("n1")
			nd.Annotations = map[string]string{"note": "the controller wrote something"}
			if err := e.c.Update(context.Background(), nd); err != nil {
				t.Fatal(err)
			}
		}, deleted: true, deletes: 2},
		{name: "recreated under the name, same resourceVersion", server: testutil.NodeDrain("n1", "", "cli:carol"),
			mine: func(nd *v1alpha1.NodeDrain) { nd.UID, nd.Spec.Requesters = "u-old", nil }, deletes: 1},
		{name: "keeps changing", server: idle, deny: plainConflict(), deletes: 10, wantErr: true},
		{name: "forbidden", server: idle, deny: forbidden(), deletes: 1, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server := tc.server.DeepCopy()
			if server.UID == "" {
				server.UID = "u-1"
			}
			e := newEnv(t, server)
			mine := e.mustDrain("n1")
			if tc.mine != nil {
				tc.mine(mine)
			}
			if tc.change != nil {
				tc.change(t, e)
			}
			if tc.deny != nil {
				e.deleteErr = func(int) error { return tc.deny }
			}
			uid, rv := mine.UID, mine.ResourceVersion
			deleted, err := DeleteIfIdle(context.Background(), e.c, mine)
			if (err != nil) != tc.wantErr || deleted != tc.deleted {
				t.Errorf("DeleteIfIdle = %v, %v; want deleted %v, error %v", deleted, err, tc.deleted, tc.wantErr)
			}
			if len(e.deletes) != tc.deletes {
				t.Fatalf("sent %d deletes, want %d", len(e.deletes), tc.deletes)
			}
			if tc.deletes > 0 {
				p := e.deletes[0].Preconditions
				if p == nil || p.UID == nil || *p.UID != uid || p.ResourceVersion == nil || *p.ResourceVersion != rv {
					t.Errorf("the delete's preconditions %+v, want UID %s and resourceVersion %s", p, uid, rv)
				}
			}
			if gone := e.drain("n1") == nil; gone != tc.deleted {
				t.Errorf("the drain is gone: %v, want %v", gone, tc.deleted)
			}
			if tc.name == "someone joined since" && Index(mine, "cli:carol") < 0 {
				t.Errorf("the caller's copy does not show who joined: %v", names(mine))
			}
		})
	}
}

func deleteDrain(t *testing.T, e *env) {
	t.Helper()
	if err := e.c.Delete(context.Background(), e.mustDrain("n1")); err != nil {
		t.Fatal(err)
	}
	e.deletes = nil
}

func join(t *testing.T, e *env, requester string) {
	t.Helper()
	nd := e.mustDrain("n1")
	nd.Spec.Requesters = append(nd.Spec.Requesters, v1alpha1.Requester{Name: requester})
	if err := e.c.Update(context.Background(), nd); err != nil {
		t.Fatal(err)
	}
}
