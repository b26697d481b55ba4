package requests

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// This file tests Raise: it takes a drain to Decommission, forcing a conflict
// over spec.mode alone, on the version of the drain it saw.

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
