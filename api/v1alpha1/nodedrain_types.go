package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DrainMode says whether the node comes back.
// +kubebuilder:validation:Enum=Maintenance;Decommission
type DrainMode string

const (
	// ModeMaintenance: the node comes back; evacuation providers may keep
	// data in place.
	ModeMaintenance DrainMode = "Maintenance"
	// ModeDecommission: the node goes away; everything moves.
	ModeDecommission DrainMode = "Decommission"
)

// Requester is one party that wants the node drained. Each requester (a CLI
// user, a trigger, the agent) owns its own entry; the drain runs while at
// least one remains.
type Requester struct {
	// Name identifies the requester, for example "cli:alice", "taint" or "agent".
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._:@/-]*$`
	Name string `json:"name"`
	// Reason is free text for people, such as a ticket number.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Reason string `json:"reason,omitempty"`
	// Deadline is when this requester needs the node empty, because the
	// machine goes away then: a spot instance's termination time, the end of
	// a shutdown's inhibit delay. The earliest deadline of a drain's
	// requesters is the drain's (status.deadline): drains with a deadline
	// are admitted first, earliest first (a deadline already passed first
	// of all), and under timeouts.onTimeout ForceDelete the pods still on
	// the node when it passes are deleted. Under Fail a deadline never ends
	// a drain: it drains on as fast as its PodDisruptionBudgets allow. Only
	// requesters trusted to force may set one: vacate-agent, vacate's
	// triggers, and subjects with the verb "force" on the DrainPolicy (the
	// admission policy vacate-nodedrains refuses the others).
	// +optional
	Deadline *metav1.Time `json:"deadline,omitempty"`
	// Overrides change, while this requester wants the drain, how the
	// drain's DrainPolicy treats pods: what kubectl drain's flags do. Each
	// needs its verb on the drain's DrainPolicy (by name when the drain
	// names one, else on drainpolicies at large; the admission policy
	// vacate-nodedrains refuses the others).
	// +optional
	Overrides *PodOverrides `json:"overrides,omitempty"`
	// Batch says that this requester asked for the drains of several nodes
	// with one request (vacate drain n1 n2 ...) and how many: once the
	// drains of all of them carry this requester's entry with the same
	// batch, admission admits them without waiting for the rest of the
	// policy's batchWindow. It changes nothing else: maxParallelNodes and
	// every other bound hold, and while a drain outside the batch still
	// gathers its own batch, the batch waits with it (RequestBatch).
	// +optional
	Batch *RequestBatch `json:"batch,omitempty"`
}

// RequestBatch names the batch of drains one requester asked for at once.
// A batch is the drains whose entries of the same requester name the same
// ID and Size; it is complete when exactly Size running drains of one
// DrainPolicy's queue carry it (all of them cordoned before any starts). A
// batch that never completes (a Size larger than the drains asked for)
// waits for the batchWindow as drains without a batch do; one that claims
// fewer drains than carry it is not complete either.
type RequestBatch struct {
	// ID names the batch among the requester's (the CLI makes a random
	// one for each command).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	ID string `json:"id"`
	// Size is how many drains the batch has.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	Size int32 `json:"size"`
}

// PodOverrides are one requester's changes to its drain's pod rules
// (vacate drain --delete-emptydir-data, --force, --grace-period,
// --pod-selector). With several requesters, the drain moves a pod when any
// of them would: the overrides of each apply, the shortest grace period
// wins, and a pod selector narrows the drain only while every requester
// has one (a pod leaves when it matches any of them).
type PodOverrides struct {
	// DeleteEmptyDirData evicts pods with emptyDir volumes, whose data is
	// lost, as pods.localStorage: Evict would (kubectl drain
	// --delete-emptydir-data). Verb: delete-emptydir-data.
	// +optional
	DeleteEmptyDirData bool `json:"deleteEmptyDirData,omitempty"`
	// DeleteUnmanaged evicts pods that no controller recreates, as
	// pods.unmanaged: Delete would (kubectl drain --force). Verb:
	// delete-unmanaged.
	// +optional
	DeleteUnmanaged bool `json:"deleteUnmanaged,omitempty"`
	// GracePeriodSeconds replaces the pods' termination grace period in
	// evictions, when shorter than the policy's (kubectl drain
	// --grace-period). Verb: grace-period.
	// +kubebuilder:validation:Minimum=1
	// +optional
	GracePeriodSeconds *int64 `json:"gracePeriodSeconds,omitempty"`
	// PodSelector is a label selector: only the pods it matches leave the
	// node, the others stay (kubectl drain --pod-selector). Verb:
	// pod-selector.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	PodSelector string `json:"podSelector,omitempty"`
}

// NodeDrainSpec is what is asked.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.mode) || oldSelf.mode != 'Decommission' || (has(self.mode) && self.mode == 'Decommission')",message="spec.mode never goes down: a Decommission drain stays Decommission (cancel it and request a new drain instead)"
type NodeDrainSpec struct {
	// NodeName is the node to drain. It equals metadata.name and never changes.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.nodeName is immutable: delete this NodeDrain and create one for the other node"
	NodeName string `json:"nodeName"`

	// Mode is Maintenance (the node comes back) or Decommission (it goes away).
	// +kubebuilder:default=Maintenance
	// +optional
	Mode DrainMode `json:"mode,omitempty"`

	// Requesters want the drain. When the last one leaves, vacate undoes
	// what it did and the drain ends.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Requesters []Requester `json:"requesters,omitempty"`

	// PolicyName names the DrainPolicy to apply. Default: the policy whose
	// nodeSelector matches the node, else the one named "default".
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PolicyName string `json:"policyName,omitempty"`
}

// DrainPhase summarises a drain for printer columns and scripts.
// +kubebuilder:validation:Enum=Pending;Cordoned;Evacuating;Evicting;Drained;Restoring;Failed
type DrainPhase string

// Phases of a drain.
const (
	PhasePending    DrainPhase = "Pending"
	PhaseCordoned   DrainPhase = "Cordoned"
	PhaseEvacuating DrainPhase = "Evacuating"
	PhaseEvicting   DrainPhase = "Evicting"
	PhaseDrained    DrainPhase = "Drained"
	PhaseRestoring  DrainPhase = "Restoring"
	PhaseFailed     DrainPhase = "Failed"
)

// Condition types of a NodeDrain.
const (
	ConditionAdmitted    = "Admitted"
	ConditionCordoned    = "Cordoned"
	ConditionEvacuated   = "Evacuated"
	ConditionPodsEvicted = "PodsEvicted"
	ConditionDrained     = "Drained"
	ConditionBlocked     = "Blocked"
	// ConditionNoExecuteTaint is True while the node carries a vacate.dev/drain
	// taint with effect NoExecute: Kubernetes' taint manager deletes the pods
	// that do not tolerate it at once, with no PDB and no evacuation.
	ConditionNoExecuteTaint = "NoExecuteTaint"
)

// Bounds of what a NodeDrain's status lists, so that a node with thousands
// of pods keeps a small status.
const (
	// MaxBlockers is how many blocked pods status.blockers lists.
	MaxBlockers = 20
	// MaxHooks is how many evacuations status.hooks lists.
	MaxHooks = 50
	// MaxHookCalls is how many HTTP hooks a drain calls at once (the pods
	// status.hookCalls records).
	MaxHookCalls = 1024
	// MaxMessage is the longest message vacate writes into a condition, a
	// hook or a blocker.
	MaxMessage = 1024
)

// DrainDeadline is when a drain must be done by, and which requester set it.
type DrainDeadline struct {
	// Time is the deadline.
	Time metav1.Time `json:"time"`
	// Requester is the name of the requester whose deadline it is.
	// +kubebuilder:validation:MaxLength=253
	Requester string `json:"requester"`
}

// RunRequester is a requester as the drain's current run answers it.
type RunRequester struct {
	// Name of the requester.
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Deadline the requester had.
	// +optional
	Deadline *metav1.Time `json:"deadline,omitempty"`
}

// DrainRun is what one run of a drain answers, and why it started.
type DrainRun struct {
	// Requesters are the requesters, with their deadlines, that the run
	// answers: those the drain had when its stages last ran.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Requesters []RunRequester `json:"requesters,omitempty"`
	// Reason is why the run started, for a run after the drain had ended:
	// RequesterAdded, DeadlineChanged, ModeRaised or PodsArrived. Empty for
	// the drain's first run.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message says it for people.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`
}

// Blocker is a pod that holds the drain up, and why.
type Blocker struct {
	// Pod is namespace/name.
	Pod string `json:"pod"`
	// Reason is a CamelCase cause, such as PodDisruptionBudget or LocalStorage.
	Reason string `json:"reason"`
	// Holder is the object that holds the pod, as "Kind namespace/name",
	// such as "PodDisruptionBudget shop/web"; empty when the pod itself is
	// the cause (for example an unmanaged pod).
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Holder string `json:"holder,omitempty"`
	// Detail says more for people, such as the PDB's refusal message.
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	Detail string `json:"detail,omitempty"`
	// Since is when this pod was first blocked for this reason.
	Since metav1.Time `json:"since"`
}

// SurgeStatus is one replacement a drain brought up.
type SurgeStatus struct {
	// Pod is the pod replaced, namespace/name.
	// +kubebuilder:validation:MaxLength=512
	Pod string `json:"pod"`
	// PodUID is its UID.
	// +kubebuilder:validation:MaxLength=64
	PodUID string `json:"podUID"`
	// Replacement is the replacement pod's name (same namespace).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Replacement string `json:"replacement,omitempty"`
	// Phase: Starting, Ready, HandedOver, Failed or Cancelled.
	Phase string `json:"phase"`
	// Since is when the surge reached its phase.
	Since metav1.Time `json:"since"`
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`
}

// Phases of SurgeStatus.
const (
	SurgeStarting   = "Starting"
	SurgeReady      = "Ready"
	SurgeHandedOver = "HandedOver"
	SurgeFailed     = "Failed"
	SurgeCancelled  = "Cancelled"
)

// MaxSurges bounds status.surges.
const MaxSurges = 100

// HookStatus is the state of one evacuation hook of the drain.
type HookStatus struct {
	// Name of the hook: an Evacuation's name or pod/port for an HTTP hook.
	// +kubebuilder:validation:MaxLength=512
	Name string `json:"name"`
	// Phase: Pending, InProgress, Completed, Failed, Cancelled, Released (let
	// go by `vacate release`) or TimedOut (past timeouts.evacuation).
	Phase string `json:"phase"`
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`
	// CallerVerified, for an HTTP hook that answered: true when its answer
	// said it verified the caller's token (the header
	// Vacate-Caller-Verified, pkg/hookauth), so it answers vacate-controller
	// alone; false when it was sent the token and did not say it checks it,
	// so any pod that reaches it may call it. Unset before an answer.
	// +optional
	CallerVerified *bool `json:"callerVerified,omitempty"`
}

// HookCall is a pod whose HTTP hook the drain's current run calls.
type HookCall struct {
	// UID of the pod.
	// +kubebuilder:validation:MaxLength=64
	UID string `json:"uid"`
	// Completed: the hook answered Completed to a Decommission evacuation,
	// whose work a cancel keeps (it sends no DELETE).
	// +optional
	Completed bool `json:"completed,omitempty"`
}

// NodeDrainStatus is what vacate observed and did.
type NodeDrainStatus struct {
	// ObservedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Phase summarises the conditions.
	// +optional
	Phase DrainPhase `json:"phase,omitempty"`
	// Conditions: Admitted, Cordoned, Evacuated, PodsEvicted, Drained, Blocked.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Policy is the DrainPolicy the drain runs under, as the controller last
	// resolved it (spec.policyName, the one whose nodeSelector matches the
	// node, or "default"); empty under the built-in defaults. The drain
	// metrics carry it as the label policy.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Policy string `json:"policy,omitempty"`

	// Total is the number of pods that must leave the node.
	// +optional
	Total int32 `json:"total,omitempty"`
	// Evicted is how many of them vacate evicted and saw leave.
	// +optional
	Evicted int32 `json:"evicted,omitempty"`
	// Remaining is how many are still on the node.
	// +optional
	Remaining int32 `json:"remaining,omitempty"`
	// Blocked is how many of the remaining cannot leave now.
	// +optional
	Blocked int32 `json:"blocked,omitempty"`
	// Progress is "evicted/total", for printer columns.
	// +optional
	Progress string `json:"progress,omitempty"`

	// Blockers lists blocked pods, sorted, at most 20.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	// +optional
	Blockers []Blocker `json:"blockers,omitempty"`
	// BlockersOmitted is how many blocked pods status.blockers leaves out.
	// +optional
	BlockersOmitted int32 `json:"blockersOmitted,omitempty"`
	// Hooks lists the evacuations of this drain, at most 50; past that, those
	// that need attention first (released, timed out, failed, pending, in
	// progress, then the rest).
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=50
	// +optional
	Hooks []HookStatus `json:"hooks,omitempty"`
	// HooksOmitted is how many evacuations status.hooks leaves out.
	// +optional
	HooksOmitted int32 `json:"hooksOmitted,omitempty"`
	// HookCalls records the pods whose HTTP hook this run calls: a pod is
	// recorded before its first POST, so a cancel sends DELETE to every hook
	// that may have accepted one, even after a controller restart. A pod
	// leaves the list when it leaves the node. At most 1024 hooks are
	// called at once; the next wait for a place.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1024
	// +optional
	HookCalls []HookCall `json:"hookCalls,omitempty"`
	// Surges are the replacements this drain brought up for pods that
	// could not leave without one (DrainPolicy surge), at most 100: the pod,
	// its replacement, and how far it got. A surge ends HandedOver (the pod
	// left; its ReplicaSet took the replacement), Failed (not Ready within
	// surge.readyTimeout: removed, the pod stays) or Cancelled (removed when
	// the drain was cancelled).
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	// +optional
	Surges []SurgeStatus `json:"surges,omitempty"`
	// RunID identifies this run of the drain in the HTTP evacuation
	// protocol, beside the drain's UID. A new run (the drain requested again
	// after an undo, or its node replaced) gets a new one, so an app's
	// Completed from an earlier run is never read as this run's.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	RunID string `json:"runID,omitempty"`

	// RequestTime is when the drain was requested: when its first requester
	// arrived, or came back after the drain was undone. Admission takes
	// drains in this order.
	// +optional
	RequestTime *metav1.Time `json:"requestTime,omitempty"`
	// QueuePosition is the drain's place in its policy's admission queue
	// (1 is next) while it waits; the Admitted condition says why.
	// +optional
	QueuePosition int32 `json:"queuePosition,omitempty"`

	// NodeUID is the UID of the node this drain works on, recorded when it
	// first sees the node. A node deleted and recreated under the same name
	// is another node: nothing recorded for the old one applies to it.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	NodeUID string `json:"nodeUID,omitempty"`
	// Mode is the mode the stages last ran in. When spec.mode goes up
	// (Maintenance to Decommission) a Drained drain runs its stages again.
	// +optional
	Mode DrainMode `json:"mode,omitempty"`
	// UndoStartTime is when the undo began (the last requester left, or
	// the NodeDrain was deleted); timeouts.cancel counts from it.
	// +optional
	UndoStartTime *metav1.Time `json:"undoStartTime,omitempty"`

	// Deadline is the earliest deadline of the requesters, and whose it is.
	// +optional
	Deadline *DrainDeadline `json:"deadline,omitempty"`
	// Run is what the drain's current run answers, and why it started when
	// it is not the first. A drain that ended runs again when what it is
	// asked changes: a Failed one when a requester joins, a requester's
	// deadline changes or its mode goes up; a Drained one when its mode
	// goes up or a pod that must leave turns up on its node.
	// +optional
	Run *DrainRun `json:"run,omitempty"`
	// RunNumber counts the drain's runs: 0 for its first, one more for each
	// run after the drain had ended (see run) and for each request after an
	// undo. Written by the NodeDrain controller.
	// +optional
	RunNumber int64 `json:"runNumber,omitempty"`
	// AdmittedRun is the run (runNumber) that admission last wrote its
	// fields for: the Admitted condition, requestTime, startTime and
	// queuePosition. While it is not runNumber, those fields are the last
	// run's, and the drain waits for admission afresh. Written by admission
	// only.
	// +optional
	AdmittedRun int64 `json:"admittedRun,omitempty"`
	// StartTime is when the drain's run was admitted.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// CompletionTime is when the drain reached Drained or Failed.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
}

// NodeDrain asks vacate to take the pods (and their data) off one node.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=nd,categories=vacate
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Requester",type=string,JSONPath=`.spec.requesters[0].name`,description="The first requester (the name is the node's: no column repeats it); -o wide lists them all, with their reasons; so does vacate status."
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.status.policy`,priority=1
// +kubebuilder:printcolumn:name="Admitted",type=string,JSONPath=`.status.conditions[?(@.type=="Admitted")].reason`,priority=1
// +kubebuilder:printcolumn:name="Queue",type=integer,JSONPath=`.status.queuePosition`,priority=1
// +kubebuilder:printcolumn:name="Evicted/Total",type=string,JSONPath=`.status.progress`
// +kubebuilder:printcolumn:name="Blocked",type=integer,JSONPath=`.status.blocked`
// +kubebuilder:printcolumn:name="Deadline",type=date,JSONPath=`.status.deadline.time`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Requesters",type=string,JSONPath=`.spec.requesters`,priority=1,description="Every requester, with its reason."
// +kubebuilder:validation:XValidation:rule="self.metadata.name == self.spec.nodeName",message="metadata.name must equal spec.nodeName: a NodeDrain is named after its node"
type NodeDrain struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NodeDrainSpec   `json:"spec"`
	Status NodeDrainStatus `json:"status,omitempty"`
}

// NodeDrainList is a list of NodeDrains.
// +kubebuilder:object:root=true
type NodeDrainList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeDrain `json:"items"`
}

func init() {
	knownTypes = append(knownTypes, &NodeDrain{}, &NodeDrainList{})
}
