package drain

import (
	policyv1 "k8s.io/api/policy/v1"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// Step is what a drain does next with one of its pods. The NodeDrain
// controller carries it out; `vacate plan` shows it. Both ask Next, so
// they cannot disagree.
type Step string

const (
	// StepStay: the pod stays on the node (the planner skips it).
	StepStay Step = "Stay"
	// StepWait: the pod is leaving on its own, or waits to complete; the
	// drain looks again later.
	StepWait Step = "Wait"
	// StepBlocked: the policy forbids evicting the pod; the drain waits
	// until it is gone or the policy changes.
	StepBlocked Step = "Blocked"
	// StepHeld: an evacuation or the pod's HTTP hook holds it until it is
	// Completed (a pod taken out of service meanwhile goes back in).
	StepHeld Step = "Held"
	// StepSurge: a replacement comes up on another node, Ready (and in the
	// pod's Services), before the pod goes.
	StepSurge Step = "Surge"
	// StepOutOfService: the pod leaves its Services first; its eviction is
	// queued once its endpoints settled.
	StepOutOfService Step = "OutOfService"
	// StepEvict: the pod's eviction is queued, within its PDBs' budget.
	StepEvict Step = "Evict"
	// StepRequest: the pod declares eviction responders, and vacate
	// requests through Kubernetes' EvictionRequest API: the drain asks for
	// its eviction with an EvictionRequest, within its PDBs' budget; its
	// responders take their turns, then its coordinator evicts it.
	StepRequest Step = "Request"
)

// PodFacts are what a drain knows of one pod besides the planner's
// Decision; each is a plain answer the caller read from the cluster.
type PodFacts struct {
	// Held: an evacuation or the pod's HTTP hook holds it (hold.Model.Of).
	Held bool
	// Surge: the pod's eviction waits for a replacement: the policy
	// surges it (surge.Consider), one was brought up for it, or its
	// ReplicaSet is adopting another. SurgeServing: its replacement is
	// Ready, and in each Service that lists the pod.
	Surge, SurgeServing bool
	// Gated: the pod has the readiness gate vacate.dev/serving.
	// OutOfService: it is out of service for its eviction already.
	// GateWouldStick: taking it out of service would make its own eviction
	// impossible (GateWouldStick).
	Gated, OutOfService, GateWouldStick bool
	// Requested: the pod leaves through an EvictionRequest: it declares
	// eviction responders, and vacate requests through the API.
	Requested bool
}

// WithGate completes the facts with what the pod and its PDBs say of its
// readiness gate vacate.dev/serving: whether it has the gate, whether it
// is out of service (or known to be: the caller took it out a moment ago,
// before its cache shows it), and whether taking it out would stick
// (GateWouldStick).
func (f PodFacts) WithGate(d Decision, pdbs map[string]*policyv1.PodDisruptionBudget, knownOut bool) PodFacts {
	_, out := v1alpha1.OutOfService(d.Pod)
	f.Gated, f.OutOfService, f.GateWouldStick = v1alpha1.ServingGated(d.Pod), out || knownOut, GateWouldStick(d, pdbs)
	return f
}

// Next is the pod's next step. A pod the planner evicts is held first,
// then surged, then taken out of service (endpoint-aware eviction), then
// evicted: each step waits for the one before it. A pod that leaves through
// an EvictionRequest is asked for once surged: its responders, then its
// coordinator, have the rest.
func Next(d Decision, f PodFacts) Step {
	switch d.Action {
	case Skip:
		return StepStay
	case Wait:
		return StepWait
	case Block:
		return StepBlocked
	}
	switch {
	case f.Held:
		return StepHeld
	case f.Surge && !f.SurgeServing:
		return StepSurge
	case f.Requested:
		return StepRequest
	case f.Gated && (f.OutOfService || !f.GateWouldStick):
		return StepOutOfService
	}
	return StepEvict
}

// GateWouldStick says whether taking the pod out of service would make its
// own eviction impossible, so that it is evicted as an ungated pod is. A
// pod out of service is not healthy; under the default
// unhealthyPodEvictionPolicy (IfHealthyBudget) the Eviction API then lets
// it go only while currentHealthy >= desiredHealthy > 0, or while the PDB
// still allows a disruption. A PDB that needs no healthy pod (desiredHealthy
// 0, such as maxUnavailable 1 over one replica) whose only healthy pod this
// is would refuse it, and the pod would go back in service, forever. There
// is no other ready endpoint to move its traffic to anyway.
func GateWouldStick(d Decision, pdbs map[string]*policyv1.PodDisruptionBudget) bool {
	for _, key := range d.PDBs {
		p := pdbs[key]
		if p == nil {
			continue
		}
		always := p.Spec.UnhealthyPodEvictionPolicy != nil && *p.Spec.UnhealthyPodEvictionPolicy == policyv1.AlwaysAllow
		if !always && p.Status.DesiredHealthy == 0 && p.Status.CurrentHealthy <= 1 {
			return true
		}
	}
	return false
}
