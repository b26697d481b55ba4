package explain

import (
	"fmt"
	"strings"
	"time"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// providerDeleted explains pods held by the evacuation of a provider that
// was deleted while it was unfinished, as the controller's blocker detail
// says ("provider X deleted while evacuating N pod(s) on node Y; ..."):
// the pods stay because their data may not have moved, and there are two
// ways out. It reports false for any other evacuation blocker.
func providerDeleted(subject, evacuation string, b v1alpha1.Blocker, since time.Time) (Finding, bool) {
	rest, ok := strings.CutPrefix(b.Detail, "provider ")
	if !ok {
		return Finding{}, false
	}
	provider, rest, ok := strings.Cut(rest, " deleted while evacuating ")
	if !ok || strings.Contains(provider, " ") {
		return Finding{}, false
	}
	_, node, _ := strings.Cut(rest, " on node ")
	node, _, _ = strings.Cut(node, ";")
	cause := fmt.Sprintf("EvacuationProvider %s is being deleted or is gone while its evacuation of these pods' data off %s is unfinished "+
		"(kubectl get evacuation %s): the data may not have moved, so the pods stay on the node", provider, node, evacuation)
	if _, last, ok := strings.Cut(b.Detail, "(last word: "); ok {
		cause += "; last word: " + strings.TrimSuffix(last, ")")
	}
	fix := fmt.Sprintf("restore the provider: re-create the EvacuationProvider %s (reinstall the system that registered it) "+
		"or, if it is still being deleted, let it finish its work; the drain goes on once the evacuation is Completed; "+
		"or, if that data may be lost or was moved some other way: vacate release %s --provider %s --reason \"...\" "+
		"(recorded with your name and reason; the pods are then evicted)", provider, node, provider)
	return Finding{Subject: subject, Cause: cause, Fix: fix, Since: since}, true
}

// released says, for each evacuation someone released by hand (phase
// Released in status.hooks), who released it and why: its pods were let go
// without their data having moved.
func released(nd *v1alpha1.NodeDrain) []Finding {
	var out []Finding
	for _, h := range nd.Status.Hooks {
		if h.Phase != v1alpha1.PhaseReleased {
			continue
		}
		out = append(out, Finding{Subject: "evacuation " + h.Name + ": " + v1alpha1.PhaseReleased,
			Cause: h.Message + "; its pods were let go without waiting for their data to move",
			Fix:   "nothing for the drain; check with the owners of that data that nothing was lost (kubectl get evacuation " + h.Name + " -o yaml shows spec.release)"})
	}
	return out
}
