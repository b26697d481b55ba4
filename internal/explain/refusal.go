package explain

import (
	"strings"
	"time"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// controllerIdentity is who vacate-controller evicts as when installed with
// 'vacate manifests' (config/manager).
const controllerIdentity = "system:serviceaccount:vacate-system:vacate-controller"

// refusedPod explains a pod whose eviction the API server refused for a
// reason of the pod's own (a denial, an invalid request, another failure):
// the cause with the API server's message, and what to do. It reports false
// for any other blocker.
func refusedPod(b v1alpha1.Blocker, ns string) (cause, fix string, ok bool) {
	switch b.Reason {
	case v1alpha1.BlockerForbidden:
		return "the API server denied its eviction (HTTP 403): " + b.Detail,
			"find what denies it: an admission policy or webhook named in the message " +
				"('kubectl get validatingadmissionpolicies,validatingadmissionpolicybindings', 'kubectl get validatingwebhookconfigurations'), " +
				"or RBAC: 'kubectl auth can-i create pods/eviction -n " + ns + " --as=" + controllerIdentity + "' " +
				"(or the identity your vacate-controller runs as) must say yes; vacate retries with backoff and the drain goes on once it is allowed", true
	case v1alpha1.BlockerInvalid:
		return "the API server rejected its eviction as invalid (HTTP 422): " + b.Detail,
			"an admission policy or webhook that denies with reason Invalid is the usual cause: the message names it " +
				"('kubectl get validatingadmissionpolicies,validatingadmissionpolicybindings', 'kubectl get validatingwebhookconfigurations'); " +
				"vacate retries with backoff and the drain goes on once it is accepted", true
	case v1alpha1.BlockerFailed:
		return "its eviction failed: " + b.Detail,
			"nothing if it passes: vacate retries with backoff; if it persists, look at the API server's health and logs " +
				"for that message ('kubectl get --raw /readyz?verbose')", true
	}
	return "", "", false
}

// refusedGroup explains the pods one refusal holds that is not a PDB's:
// throttling of the API server, or more than one PDB selecting the pods.
// It reports false for any other group.
func refusedGroup(subject string, blockers []v1alpha1.Blocker, since time.Time, in Input) (Finding, bool) {
	b := blockers[0]
	f := Finding{Subject: subject, Since: since}
	switch b.Reason {
	case v1alpha1.BlockerThrottled:
		f.Cause = "the API server is throttling eviction calls (HTTP 429, not from a PodDisruptionBudget: API Priority and Fairness or another limit): " + b.Detail
		f.Fix = "nothing while it passes: vacate backs off and waits at least as long as the API server asks (Retry-After); " +
			"if it lasts, the API server is overloaded: look at its flow control ('kubectl get flowschemas,prioritylevelconfigurations', " +
			"metric apiserver_flowcontrol_rejected_requests_total) and its load, or slow vacate down (vacate-controller --eviction-qps)"
	case v1alpha1.BlockerMultiplePDBs:
		keys := strings.Split(strings.TrimPrefix(b.Holder, "PodDisruptionBudget "), ", ")
		ns, _, _ := strings.Cut(keys[0], "/")
		described := make([]string, 0, len(keys))
		short := make([]string, 0, len(keys))
		for _, k := range keys {
			_, name, _ := strings.Cut(k, "/")
			short = append(short, name)
			if p := in.PDBs[k]; p != nil {
				k += " (" + Budget(p) + ")"
			}
			described = append(described, k)
		}
		f.Cause = "more than one PodDisruptionBudget selects them: " + strings.Join(described, ", ") +
			"; the Eviction API refuses to evict such a pod (HTTP 500): " + b.Detail
		f.Fix = "narrow the PDBs' selectors so that at most one selects each pod, or delete the redundant one " +
			"(kubectl get pdb -n " + ns + " " + strings.Join(short, " ") + " -o yaml); vacate retries at once when only one is left"
	default:
		return f, false
	}
	return f, true
}
