package cli

// This file holds what 'vacate plan' reports of a node's drain: NodePlan and
// its parts, as -o json|yaml prints them and scripts read them, field by
// name. The decide step (plan_decide.go) fills them; plan_print.go writes
// them as text.

// NodePlan is the preview of one node's drain, as -o json|yaml prints it.
type NodePlan struct {
	Node   string `json:"node"`
	Policy string `json:"policy"`
	// Mode is the drain mode planned for.
	Mode string `json:"mode"`
	// Cordon says what would happen to the node's schedulability.
	Cordon   string    `json:"cordon"`
	Existing string    `json:"existingDrain,omitempty"`
	Pods     []PodPlan `json:"pods"`
	PDBs     []PDBPlan `json:"pdbs"`
	// Hooks says, for each pod with the annotation
	// vacate.dev/evacuate-port, what happens to its HTTP hook, in words
	// (HTTPHooks has the same as objects).
	Hooks     []string   `json:"hooks"`
	HTTPHooks []HookPlan `json:"httpHooks"`
	// Providers are the EvacuationProviders, asked or not, and why.
	Providers []ProviderPlan `json:"evacuationProviders"`
	// Evacuations are the node's Evacuations as they are now.
	Evacuations []EvacuationPlan `json:"evacuations"`
	Estimate    Estimate         `json:"estimate"`
	Counts      map[string]int   `json:"counts"`
	Blocked     []string         `json:"blocked"`
	// Held are the pods that leave only once an evacuation (an
	// EvacuationProvider's or their HTTP hook) Completed.
	Held []string `json:"held"`
	// Unreachable are the pods terminating on a node that has not been
	// Ready for timeouts.unreachablePods: reported, not waited on.
	Unreachable []string `json:"unreachable,omitempty"`
	// Overrides say what the requesters' overrides (kubectl drain's flags)
	// change in the policy's pod rules.
	Overrides []string `json:"overrides,omitempty"`
}

// PodPlan is one pod's fate.
type PodPlan struct {
	Pod    string `json:"pod"`
	Action string `json:"action"`
	// Next is what the drain does next with the pod (drain.Next, which
	// the controller asks too): Stay, Wait, Blocked, Held, Surge,
	// OutOfService or Evict.
	Next   string   `json:"next"`
	Reason string   `json:"reason"`
	Detail string   `json:"detail,omitempty"`
	PDBs   []string `json:"pdbs,omitempty"`
	// BlockedNow: the drain would report this pod as blocked now.
	BlockedNow bool `json:"blockedNow"`
	// HeldBy are the evacuations the pod waits for: "Evacuation <name>",
	// "HTTP hook of pod <namespace>/<name>".
	HeldBy []string `json:"heldBy,omitempty"`
	// IgnoredAnnotations are the pod's own annotations the policy does not
	// honour in its namespace (pods.annotationNamespaceSelector): it is
	// planned as if it had none.
	IgnoredAnnotations []string `json:"ignoredAnnotations,omitempty"`
	// Surge says whether the drain brings up a replacement of the pod
	// elsewhere, Ready, before it evicts it (DrainPolicy surge), and why
	// or why not; unset when the policy does not surge, or the pod can
	// leave without one.
	Surge *SurgePlan `json:"surge,omitempty"`
}

// SurgePlan is a pod's surge, as the drain would decide it now.
type SurgePlan struct {
	Surged bool   `json:"surged"`
	Why    string `json:"why"`
}

// HookPlan is what the drain would do with one pod's HTTP evacuation hook.
type HookPlan struct {
	Pod string `json:"pod"`
	// Called: the controller POSTs to URL before it evicts the pod.
	Called bool   `json:"called"`
	URL    string `json:"url,omitempty"`
	// Holds: the pod is not evicted until the hook answers Completed, or,
	// when it is not called for a fault of the pod (bad annotations, an
	// address vacate never calls), until that is fixed.
	Holds bool   `json:"holds"`
	Why   string `json:"why"`
	// Caller says what the hook is told of who calls it (a token of
	// vacate-controller's service account for this pod) and, once the
	// drain's run has an answer, whether the hook said it verified it.
	Caller string `json:"caller,omitempty"`
}

// ProviderPlan is what the drain would ask of one EvacuationProvider.
type ProviderPlan struct {
	Name  string `json:"name"`
	Stage string `json:"stage"`
	// Modes the provider takes part in; empty: every mode.
	Modes []string `json:"modes,omitempty"`
	// Asked: the drain creates (or keeps) the Evacuation named Evacuation.
	Asked      bool   `json:"asked"`
	Evacuation string `json:"evacuation,omitempty"`
	// Pods are the pods leaving the node that the provider protects (with,
	// for an Evacuation of the node's current drain that still holds, the
	// pods it recorded that are still on the node).
	Pods []string `json:"pods"`
	// Holds: those pods are evicted only once the Evacuation Completed.
	Holds bool `json:"holds"`
	// HeartbeatTimeoutSeconds is spec.timeout: silent longer, the provider
	// is reported stale (its pods stay held).
	HeartbeatTimeoutSeconds float64 `json:"heartbeatTimeoutSeconds"`
	Why                     string  `json:"why"`
}

// EvacuationPlan is one of the node's Evacuations as it is now.
type EvacuationPlan struct {
	Name     string `json:"name"`
	Provider string `json:"provider"`
	Stage    string `json:"stage"`
	Mode     string `json:"mode"`
	// Phase is Pending until the provider answered the current spec.
	Phase      string `json:"phase"`
	Message    string `json:"message,omitempty"`
	ReleasedBy string `json:"releasedBy,omitempty"`
	// CurrentDrain: asked by the node's current NodeDrain; otherwise left
	// by an earlier drain, and taken over by the next one that asks the
	// provider.
	CurrentDrain bool `json:"currentDrain"`
	// Deleting: it is being deleted; vacate has its provider cancel it
	// first, and it holds its pods until it is gone.
	Deleting bool `json:"deleting,omitempty"`
	// PodsOnNode are the pods it protects that are still on the node.
	PodsOnNode []string `json:"podsOnNode"`
	// Holds: it keeps those pods from being evicted until it Completed.
	Holds bool `json:"holds"`
}

// PDBPlan is what a PDB means for the drain.
type PDBPlan struct {
	Name           string   `json:"name"`
	Budget         string   `json:"budget"`
	Allowed        int32    `json:"disruptionsAllowed"`
	CurrentHealthy int32    `json:"currentHealthy"`
	DesiredHealthy int32    `json:"desiredHealthy"`
	ExpectedPods   int32    `json:"expectedPods"`
	OnNode         []string `json:"podsOnNode"`
	BlocksNow      bool     `json:"blocksNow"`
	Rounds         int      `json:"rounds"`
}

// Estimate bounds the time of the evictions. How long an evacuation takes
// is not known: LowSeconds and HighSeconds count the evictions only, and
// the evacuation fields say what the drain waits for and what bounds it.
type Estimate struct {
	Evictions   int     `json:"evictions"`
	Rounds      int     `json:"rounds"`
	LowSeconds  float64 `json:"lowSeconds"`
	HighSeconds float64 `json:"highSeconds"`
	// Finishes is false when the drain cannot finish without a change.
	Finishes bool `json:"finishes"`
	// EvacuationsBefore are the evacuations before eviction the drain
	// waits for (Evacuations of BeforeEviction providers, HTTP hooks);
	// EvacuationsAfter those after eviction: the node is Drained only once
	// all are Completed.
	EvacuationsBefore int `json:"evacuationsBefore"`
	EvacuationsAfter  int `json:"evacuationsAfter"`
	// HeldPods are evicted only once their evacuations Completed.
	HeldPods int `json:"heldPods"`
	// EvacuationTimeoutSeconds is timeouts.evacuation (0: none): an
	// evacuation not Completed by then ends the drain through OnTimeout.
	EvacuationTimeoutSeconds float64 `json:"evacuationTimeoutSeconds"`
	// DrainTimeoutSeconds is timeouts.drain (0: none).
	DrainTimeoutSeconds float64 `json:"drainTimeoutSeconds"`
	OnTimeout           string  `json:"onTimeout"`
}
