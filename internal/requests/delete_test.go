package requests

import (
	"context"
	"testing"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// This file tests DeleteIfIdle: only a drain nobody joined is deleted.

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
