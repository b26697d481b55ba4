package requests

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// This file tests Withdraw: a requester leaves its entry and only it,
// restating the drain's current mode, and never creates a drain.

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

// TestWithdrawTrustsTheServersAnswerOverALaggingCache: a controller's
// client reads an informer's copy, which lags its own writes. Withdraw
// takes what the drain is after its apply from the API server's answer:
// with a copy that still shows the entry (it never catches up here), an
// entry Apply added is withdrawn by the apply alone, no guarded patch is
// sent against the stale copy, and the drain returned has no requester
// left, so the caller can delete it. (A Withdraw that read the copy again
// sent ten patches whose test failed and gave up: the drain stayed, idle.)
func TestWithdrawTrustsTheServersAnswerOverALaggingCache(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	if err := Apply(ctx, e.c, "n1", v1alpha1.Requester{Name: "external:ToBeDeletedByClusterAutoscaler"}, "", ""); err != nil {
		t.Fatal(err)
	}
	stale := e.mustDrain("n1")
	cached := interceptor.NewClient(e.c.(client.WithWatch), interceptor.Funcs{
		Get: func(_ context.Context, _ client.WithWatch, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
			stale.DeepCopyInto(obj.(*v1alpha1.NodeDrain))
			return nil
		},
	})
	after, err := Withdraw(ctx, cached, stale.DeepCopy(), "external:ToBeDeletedByClusterAutoscaler")
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Spec.Requesters) != 0 || after.UID != stale.UID || after.ResourceVersion == stale.ResourceVersion {
		t.Errorf("Withdraw returned %v at %s (uid %s); want the drain after the apply, with no requester", names(after), after.ResourceVersion, after.UID)
	}
	if len(e.patches) != 0 {
		t.Errorf("sent guarded patches %v against a stale copy", e.patches)
	}
	if got := names(e.mustDrain("n1")); len(got) != 0 {
		t.Errorf("requesters %v stored, want none", got)
	}
}

// TestWithdrawWaitsForALaggingCacheAfterARefusedPatch: an entry written
// another way needs the guarded patch; when the entries moved before it
// (another requester left, so the test fails) and the copy read again lags
// for a while, Withdraw pauses between reads until the copy has caught up,
// then removes the entry at its new index.
func TestWithdrawWaitsForALaggingCacheAfterARefusedPatch(t *testing.T) {
	ctx := context.Background()
	seeded := testutil.NodeDrain("n1", "", "taint", "cli:bob", "agent")
	seeded.UID = "u-1"
	e := newEnv(t, seeded)
	var stale *v1alpha1.NodeDrain
	var fresh time.Time // when the copy catches up
	e.patchErr = func(n int, c client.Client) error {
		if n == 1 { // taint leaves just before the first patch
			nd := &v1alpha1.NodeDrain{}
			if err := c.Get(ctx, types.NamespacedName{Name: "n1"}, nd); err != nil {
				t.Fatal(err)
			}
			stale = nd.DeepCopy()
			nd.Spec.Requesters = slices.DeleteFunc(nd.Spec.Requesters, func(r v1alpha1.Requester) bool { return r.Name == "taint" })
			if err := c.Update(ctx, nd); err != nil {
				t.Fatal(err)
			}
			fresh = time.Now().Add(200 * time.Millisecond)
		}
		return nil
	}
	cached := interceptor.NewClient(e.c.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if stale != nil && time.Now().Before(fresh) {
				stale.DeepCopyInto(obj.(*v1alpha1.NodeDrain))
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	if _, err := Withdraw(ctx, cached, e.mustDrain("n1"), "cli:bob"); err != nil {
		t.Fatal(err)
	}
	if got := names(e.mustDrain("n1")); !slices.Equal(got, []string{"agent"}) {
		t.Errorf("requesters %v, want agent only", got)
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
		{"keeps changing", apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "patch", drainsGR, "n1", "test failed", 0, false), withdrawAttempts,
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
