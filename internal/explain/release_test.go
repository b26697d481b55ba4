package explain

import (
	"bytes"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// TestExplainDeletedProviderAndRelease: a pod held by the evacuation of a
// provider deleted mid-evacuation is explained with what it means and
// both ways out (restore the provider, or 'vacate release'); an
// evacuation released by hand says who released it and why. A provider
// that is merely slow keeps the usual explanation.
func TestExplainDeletedProviderAndRelease(t *testing.T) {
	since := metav1.NewTime(now.Add(-3 * time.Minute))
	deleted := v1alpha1.Blocker{Pod: "shop/db-0", Reason: "Evacuation", Holder: "Evacuation n1.vol-store", Since: since,
		Detail: "provider vol-store deleted while evacuating 1 pod(s) on node n1; they stay until it finishes, or until someone runs " +
			"'vacate release n1 --provider vol-store' (last word: provider vol-store is stale: no heartbeat for 2m0s (timeout 1m0s); its last word: InProgress copying)"}
	slow := v1alpha1.Blocker{Pod: "shop/db-1", Reason: "Evacuation", Holder: "Evacuation n1.other", Since: since,
		Detail: "InProgress: copying (3 remaining)"}

	released := stuck(slow)
	released.Status.Hooks = []v1alpha1.HookStatus{
		{Name: "n1.vol-store", Phase: "Released", Message: "released by alice at 2026-11-22T14:58:00Z: CHG-9 volume lost"},
		{Name: "n1.other", Phase: "InProgress", Message: "InProgress: copying (3 remaining)"},
	}

	for _, tc := range []struct {
		name    string
		drain   *v1alpha1.NodeDrain
		want    []string
		notWant []string
	}{
		{name: "provider deleted", drain: stuck(deleted), want: []string{
			"1. pod shop/db-0 (for 3m00s)",
			"why:  EvacuationProvider vol-store is being deleted or is gone while its evacuation of these pods' data off n1 is unfinished",
			"the data may not have moved",
			"last word: provider vol-store is stale",
			"do:   restore the provider: re-create the EvacuationProvider vol-store (reinstall the system that registered it)",
			"or, if that data may be lost or was moved some other way: vacate release n1 --provider vol-store --reason \"...\"",
			"recorded with your name",
			"the pods are then evicted",
		}, notWant: []string{"to stop waiting, cancel the drain"}},
		{name: "provider slow", drain: stuck(slow), want: []string{
			"waiting for EvacuationProvider other to move its data off n1: InProgress: copying (3 remaining)",
		}, notWant: []string{"vacate release"}},
		{name: "released", drain: released, want: []string{
			"evacuation n1.vol-store: Released",
			"why:  released by alice at 2026-11-22T14:58:00Z: CHG-9 volume lost",
			"its pods were let go without waiting for their data to move",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := Explain(Input{Drain: tc.drain, Now: now}).Write(&out, now); err != nil {
				t.Fatal(err)
			}
			text := out.String()
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Errorf("explanation lacks %q:\n%s", w, text)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(text, w) {
					t.Errorf("explanation has %q:\n%s", w, text)
				}
			}
		})
	}
}
