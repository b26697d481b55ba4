package v1alpha1

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Names fixed by the design and shared by the controller, the CLI and
// explain: annotations, finalizers, the drain taint, requester names,
// condition and blocker reasons, and event reasons. A person or a script
// reads them in the cluster, so they never change once released.

// NodeDrainConditions are the Node conditions Kubernetes defines for drains
// ("the admin is responsible for setting and clearing"), which vacate sets
// while it drains a node and removes when the drain is undone.
var NodeDrainConditions = []corev1.NodeConditionType{corev1.NodeDrainInProgress, corev1.NodeDrained}

// Finalizers, annotations and the taint vacate puts on objects.
const (
	// FinalizerRestore holds a NodeDrain until vacate has undone its changes.
	FinalizerRestore = "vacate.dev/restore"
	// FinalizerDrain holds a deleted node until vacate drained it.
	FinalizerDrain = "vacate.dev/drain"
	// FinalizerEvacuations holds an EvacuationProvider while an unfinished
	// Evacuation names it.
	FinalizerEvacuations = "vacate.dev/evacuations"
	// FinalizerCancel holds an Evacuation until vacate is done with it: its
	// provider was asked to cancel (or its work is kept), so deleting the
	// drain in the foreground, or the Evacuation itself, never skips the
	// cancel.
	FinalizerCancel = "vacate.dev/cancel"
	// TaintDaemonSetsOff (effect NoSchedule, value the drain's UID) keeps
	// DaemonSet pods off a node whose drain evicts them (pods.daemonSets:
	// Evict): they tolerate the cordon, and their DaemonSet would put them
	// back at once. Undo removes it only when its value is the drain's UID.
	TaintDaemonSetsOff = "vacate.dev/draining"
	// AnnotationCordonedBy is set on a node vacate cordoned, to
	// "<drain name>/<drain uid>" (CordonedByValue); undo only uncordons a
	// node whose annotation names the drain being undone, UID included.
	AnnotationCordonedBy = "vacate.dev/cordoned-by"
	// ConditionServing is the readiness gate and pod condition of
	// endpoint-aware pods: vacate sets it True when it sees the pod, and
	// False before it evicts the pod, so the pod leaves its Services'
	// endpoints first.
	ConditionServing = "vacate.dev/serving"
	// ReasonServingDraining is ConditionServing's reason while a drain has
	// taken the pod out of service to evict it (the condition False).
	ReasonServingDraining = "Draining"
	// LabelEndpointAware, on a namespace (label) or a pod (annotation),
	// value "true", opts pods into endpoint-aware eviction: the webhook
	// adds the readiness gate ConditionServing when they are created, and
	// this label, value "true", to the pod: vacate-controller watches the
	// pods so labelled (a pod that declares the gate itself carries the
	// label too), not every pod of the cluster.
	LabelEndpointAware = "vacate.dev/endpoint-aware"
	// LabelEviction, on an Evacuation, is the UID of the Eviction
	// (lifecycle.k8s.io) it was asked for: vacate, as the responder of one
	// pod's eviction, asked the pod's EvacuationProvider in its turn. It
	// counts only while it equals spec.drainUID (Evacuation.ForEviction): a
	// drain of the node that asks the same provider takes the Evacuation
	// over.
	LabelEviction = "vacate.dev/eviction"
	// LabelEvictionResponder, on a namespace (label) or a pod (annotation),
	// value "true", opts pods into declaring vacate's eviction responder:
	// the webhook adds vacate.dev/evacuation to spec.evictionResponders
	// when they are created, if vacate would act for the pod in its turn
	// (an HTTP hook, or an EvacuationProvider that selects it). An
	// annotation "false" opts a pod out.
	LabelEvictionResponder = "vacate.dev/eviction-responder"
	// TaintNotice is vacate-agent's taint (effect NoSchedule, value the
	// notice's source such as "aws-spot"): set while a notice says the
	// machine goes away, so nothing new lands on the node while its drain
	// waits to be admitted, and removed when the notice goes. Only the
	// agent sets it; it is not a trigger.
	TaintNotice = "vacate.dev/notice"
	// TaintDrain is the trigger taint: vacate.dev/drain on a node, any
	// effect, requests its drain. vacate never sets it; people and tools do.
	TaintDrain = "vacate.dev/drain"
)

// CordonedByValue is what vacate writes in AnnotationCordonedBy when the
// drain cordons a node: its name and UID, so that a copied or leftover
// annotation never passes for this drain's.
func CordonedByValue(nd *NodeDrain) string {
	return nd.Name + "/" + string(nd.UID)
}

// CordonedBy reads the node's AnnotationCordonedBy in the format
// CordonedByValue writes, "<drain name>/<drain uid>": the drain it names and
// that drain's UID. ok is false when the value is not in that format:
// absent, empty, or without a "/" (written before vacate recorded UIDs, or
// by hand); drain is then the whole value, if any.
func CordonedBy(node *corev1.Node) (drain string, uid types.UID, ok bool) {
	name, id, ok := strings.Cut(node.Annotations[AnnotationCordonedBy], "/")
	return name, types.UID(id), ok
}

// Requester names of vacate's own triggers, and the prefixes of the others'.
const (
	RequesterTaint  = "taint"
	RequesterCordon = "cordon"
	// RequesterDelete is the requester of a node's deletion (triggers.onNodeDelete:
	// Drain): the node goes away, so it asks for Decommission and no
	// maintenance window holds it.
	RequesterDelete = "delete"
	// RequesterMaintenance is the requester of a node whose condition
	// MaintenancePlanned is True (triggers.onMaintenancePlanned: Drain).
	RequesterMaintenance = "maintenance"
	// RequesterExternalPrefix starts "external:<taint key>", a taint of
	// triggers.externalTaints.
	RequesterExternalPrefix = "external:"
	// RequesterCLIPrefix starts "cli:<user>", a person's request through
	// the CLI under their own identity.
	RequesterCLIPrefix = "cli:"
)

// Reasons of NodeDrain conditions.
const (
	ReasonAdmitted        = "Admitted"
	ReasonWaitingForBatch = "WaitingForBatch"
	ReasonNodeNotFound    = "NodeNotFound"
	ReasonPolicyNotFound  = "PolicyNotFound"
	ReasonAmbiguousPolicy = "AmbiguousPolicy"
	ReasonCordoned        = "Cordoned"
	ReasonAlreadyCordoned = "AlreadyCordoned"
	ReasonNoEvacuations   = "NoEvacuations"
	ReasonEvacuating      = "Evacuating"
	ReasonEvacuated       = "EvacuationsCompleted"
	// ReasonWaitingAfterEvict: evacuations of phase afterEviction wait for
	// the pods to be evicted.
	ReasonWaitingAfterEvict = "WaitingForAfterEviction"
	ReasonCancelling        = "CancellingEvacuations"
	ReasonEvicting          = "Evicting"
	ReasonAllEvicted        = "AllPodsGone"
	ReasonBlocked           = "PodsBlocked"
	ReasonNotBlocked        = "NotBlocked"
	ReasonDrainTimeout      = "DrainTimeout"
	// ReasonDeadlinePassed: a requester's deadline passed before the drain
	// finished (status.deadline); timeouts.onTimeout applies.
	ReasonDeadlinePassed = "DeadlinePassed"
	// ReasonEvacuationTimedOut: an evacuation ran past timeouts.evacuation.
	ReasonEvacuationTimedOut = "EvacuationTimedOut"
	ReasonDrained            = "Drained"
	ReasonRestored           = "Restored"
	// ReasonNodeReplaced: the node was deleted and created again; the
	// drain starts over on the new one.
	ReasonNodeReplaced = "NodeReplaced"
	// ReasonForceDeleteForbidden: a drain timed out under onTimeout:
	// ForceDelete, and the controller may not delete pods.
	ReasonForceDeleteForbidden = "ForceDeleteForbidden"
	// ReasonNoExecuteTaint: the trigger taint has effect NoExecute.
	ReasonNoExecuteTaint = "NoExecuteTaint"
	// ReasonNoExecuteTaintGone: it no longer has.
	ReasonNoExecuteTaintGone = "NoExecuteTaintGone"
)

// Reasons of status.blockers: why a pod is still on the node.
const (
	// BlockerPDB: a PodDisruptionBudget refuses the eviction.
	BlockerPDB = "PodDisruptionBudget"
	// BlockerThrottled: the API server throttles the eviction calls (a 429
	// that no PodDisruptionBudget caused, such as API Priority and
	// Fairness); vacate backs off.
	BlockerThrottled = "EvictionThrottled"
	// BlockerForbidden: the eviction is denied (403): RBAC, an admission
	// webhook or a ValidatingAdmissionPolicy.
	BlockerForbidden = "EvictionForbidden"
	// BlockerMultiplePDBs: more than one PodDisruptionBudget selects the
	// pod, which the Eviction API refuses (500).
	BlockerMultiplePDBs = "MultiplePDBs"
	// BlockerInvalid: the API server found the eviction invalid (422).
	BlockerInvalid = "EvictionInvalid"
	// BlockerFailed: the eviction failed for another reason.
	BlockerFailed = "EvictionFailed"
	// BlockerEvacuation: a pod waits for its provider's evacuation.
	BlockerEvacuation = "Evacuation"
	// BlockerEndpoints: an endpoint-aware pod is out of service and waits
	// for its EndpointSlices to show it not ready, then for
	// endpoints.settleTime, before its eviction.
	BlockerEndpoints = "Endpoints"
	// BlockerHTTPHook: a pod waits for its own HTTP evacuation hook.
	BlockerHTTPHook = "HTTPHook"
	// BlockerHTTPHookRefused: a pod asks for an HTTP hook at an address
	// vacate never calls (hostNetwork, link-local, loopback...). It is
	// held: its data may not have moved.
	BlockerHTTPHookRefused = "HTTPHookRefused"
	// BlockerSurge: a pod waits for its replacement (DrainPolicy surge) to
	// become Ready elsewhere, or for room under its Deployment's maxSurge.
	BlockerSurge = "Surge"
	// BlockerSurgeFailed: a pod's replacement did not become Ready within
	// surge.readyTimeout and was removed, or the API server refused to
	// create it (a ResourceQuota, an admission policy, vacate-controller's
	// RBAC: the detail carries the API's message); the pod stays until a
	// new one is Ready, or its PodDisruptionBudget allows its eviction. The
	// drain's other pods go on.
	BlockerSurgeFailed = "SurgeFailed"
	// BlockerEvictionRequest: the drain asked for the pod's eviction with an
	// EvictionRequest (the pod declares eviction responders); its
	// responders have their turns, then its coordinator evicts it. The
	// holder is its Eviction; the detail says which responder has the
	// turn, and its message.
	BlockerEvictionRequest = "EvictionRequest"
	// HolderThrottling is the holder of an EvictionThrottled blocker.
	HolderThrottling = "API server throttling"
)

// Phases of status.hooks beyond an Evacuation's own.
const (
	PhaseReleased = "Released"
	PhaseTimedOut = "TimedOut"
)

// Event reasons.
const (
	EventCordoned        = "Cordoned"
	EventEvictionBlocked = "EvictionBlocked"
	EventDrained         = "Drained"
	EventRestored        = "Restored"
	EventFailed          = "Failed"
	// EventDrainStarted: the drain began (past admission); EventDrainBlocked:
	// pods began to block it. Both on the drain and its node.
	EventDrainStarted = "DrainStarted"
	EventDrainBlocked = "DrainBlocked"
	// EventEvicted: on a pod, the eviction a drain asked for was accepted;
	// EventEvictionHeld: on a pod, its evacuation, HTTP hook, endpoints or
	// EvictionRequest holds its eviction back.
	EventEvicted      = "Evicted"
	EventEvictionHeld = "EvictionHeld"
	// EventSurgeStarted: a replacement was brought up for a pod
	// (DrainPolicy surge); EventSurgeFailed: it was not Ready in time and
	// was removed, or creating it was refused; EventSurgeLeft: an undo
	// left a replacement in place, its removal refused until
	// timeouts.cancel passed (a Warning naming the pod).
	EventSurgeStarted = "SurgeStarted"
	EventSurgeFailed  = "SurgeFailed"
	EventSurgeLeft    = "SurgeLeft"
	EventForceDeleted = "ForceDeleted"
	// EventEndpointsTimeout: an endpoint-aware pod was evicted when
	// endpoints.timeout passed with an EndpointSlice still showing it ready.
	EventEndpointsTimeout = "EndpointsTimeout"
	EventNodeReplaced     = "NodeReplaced"
	// EventNoExecuteTaint: a Warning on the node when the trigger taint
	// turns up with effect NoExecute.
	EventNoExecuteTaint = "NoExecuteTaint"
	// EventEvacuationReleased: someone let the drain go on without an evacuation.
	EventEvacuationReleased = "EvacuationReleased"
	EventProviderGone       = "ProviderGone"
	EventCancelTimeout      = "CancelTimeout"
	// EventNodeDeletionTimeout: timeouts.nodeDeletion passed and the node
	// was released before its drain was done.
	EventNodeDeletionTimeout = "NodeDeletionTimeout"
)
