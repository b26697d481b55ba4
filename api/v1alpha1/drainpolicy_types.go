package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// DefaultPolicyName is the DrainPolicy that applies to nodes no other
// policy selects.
const DefaultPolicyName = "default"

// DrainPolicySpec says how vacate drains the nodes the policy governs.
type DrainPolicySpec struct {
	// NodeSelector picks the nodes this policy governs. Empty on the
	// "default" policy, which governs the nodes no other policy selects.
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`

	// Triggers are the cluster signals that start a drain.
	// +optional
	Triggers Triggers `json:"triggers,omitempty"`

	// Concurrency bounds how much happens at once.
	// +optional
	Concurrency Concurrency `json:"concurrency,omitempty"`

	// Pods says what to do with each kind of pod.
	// +optional
	Pods PodPolicy `json:"pods,omitempty"`

	// Timeouts bound how long a drain may take.
	// +optional
	Timeouts Timeouts `json:"timeouts,omitempty"`

	// HTTPHooks allows the HTTP evacuation protocol for annotated pods.
	// +optional
	HTTPHooks HTTPHooks `json:"httpHooks,omitempty"`

	// Endpoints bounds how vacate takes endpoint-aware pods (those with the
	// readiness gate vacate.dev/serving) out of service before it evicts
	// them.
	// +optional
	Endpoints Endpoints `json:"endpoints,omitempty"`

	// Schedule limits when new drains start: outside its windows, requested
	// drains wait (a drain already running goes on). Unset: any time.
	// +optional
	Schedule *Schedule `json:"schedule,omitempty"`

	// Surge moves a Deployment's pod the way a rolling update would: a
	// replacement is brought up on another node and vacate waits until it
	// is Ready before the pod is evicted. It applies to pods whose
	// PodDisruptionBudget allows no disruption, and to pods without one
	// that are their Deployment's only ready pod. Off unless set.
	// +optional
	Surge Surge `json:"surge,omitempty"`
}

// Surge configures surge drains (docs/policies.md, "Surge").
type Surge struct {
	// Pods: None never surges; Annotated surges only pods annotated
	// vacate.dev/surge: "true" (set it in the Deployment's pod template);
	// All surges every pod it can, but those annotated vacate.dev/surge:
	// "false". Annotations count only in the namespaces
	// pods.annotationNamespaceSelector selects.
	// +kubebuilder:validation:Enum=None;Annotated;All
	// +kubebuilder:default=None
	// +optional
	Pods string `json:"pods,omitempty"`
	// ReadyTimeout bounds how long a replacement may take to become Ready
	// (and, for an endpoint-aware pod, ready in its Services'
	// EndpointSlices). Past it the replacement is removed, the pod stays,
	// and vacate tries again after as long. Default 5m.
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s') && duration(self) <= duration('24h')",message="must be a duration over 0s and at most 24h, such as 5m"
	// +optional
	ReadyTimeout *metav1.Duration `json:"readyTimeout,omitempty"`
}

// Values of Surge.Pods.
const (
	SurgeNone      = "None"
	SurgeAnnotated = "Annotated"
	SurgeAll       = "All"
)

// Schedule is a set of maintenance windows in one time zone.
type Schedule struct {
	// TimeZone is an IANA time zone name, such as Europe/Berlin, in which
	// the windows' days and hours are read. Default UTC.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	TimeZone string `json:"timeZone,omitempty"`
	// Windows are the times new drains may start.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	Windows []MaintenanceWindow `json:"windows"`
}

// MaintenanceWindow opens at Start on each of Days and closes at End.
// +kubebuilder:validation:XValidation:rule="self.start != self.end",message="start and end are the same time: the window would be empty (a whole day is 00:00 to 24:00)"
type MaintenanceWindow struct {
	// Days the window opens on; empty means every day.
	// +kubebuilder:validation:MaxItems=7
	// +listType=set
	// +optional
	Days []Weekday `json:"days,omitempty"`
	// Start is the opening time, "HH:MM" on a 24-hour clock.
	// +kubebuilder:validation:Pattern=`^([01][0-9]|2[0-3]):[0-5][0-9]$`
	// +kubebuilder:validation:MaxLength=5
	Start string `json:"start"`
	// End is the closing time, "HH:MM", or "24:00" for midnight at the end
	// of the day. An end before the start closes the window on the next day
	// (22:00 to 04:00 runs over midnight).
	// +kubebuilder:validation:Pattern=`^(([01][0-9]|2[0-3]):[0-5][0-9]|24:00)$`
	// +kubebuilder:validation:MaxLength=5
	End string `json:"end"`
}

// Weekday is a day of the week, in three letters.
// +kubebuilder:validation:Enum=Mon;Tue;Wed;Thu;Fri;Sat;Sun
type Weekday string

// Triggers are the signals that request a drain of a governed node.
type Triggers struct {
	// Taint: the taint vacate.dev/drain (any effect) requests a drain.
	// +kubebuilder:default=true
	// +optional
	Taint *bool `json:"taint,omitempty"`
	// OnUnschedulable: Drain drains a node anyone cordons; Ignore does not.
	// +kubebuilder:validation:Enum=Ignore;Drain
	// +kubebuilder:default=Ignore
	// +optional
	OnUnschedulable string `json:"onUnschedulable,omitempty"`
	// OnNodeDelete: Drain holds a deleted node (finalizer vacate.dev/drain)
	// until it is drained; Orphan lets it go at once.
	// +kubebuilder:validation:Enum=Orphan;Drain
	// +kubebuilder:default=Orphan
	// +optional
	OnNodeDelete string `json:"onNodeDelete,omitempty"`
	// OnMaintenancePlanned: Drain drains a node whose condition
	// MaintenancePlanned (Kubernetes 1.37's node maintenance conditions, set
	// by the admin's tooling) is True; Ignore does not.
	// +kubebuilder:validation:Enum=Ignore;Drain
	// +kubebuilder:default=Ignore
	// +optional
	OnMaintenancePlanned string `json:"onMaintenancePlanned,omitempty"`
	// ExternalTaints are other taint keys that request a drain. Default:
	// ToBeDeletedByClusterAutoscaler and karpenter.sh/disrupted.
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	// +optional
	ExternalTaints []string `json:"externalTaints,omitempty"`
}

// TopologyLimit bounds the nodes drained at once in one topology domain.
type TopologyLimit struct {
	// TopologyKey is a node label, such as topology.kubernetes.io/zone.
	// +kubebuilder:validation:MinLength=1
	TopologyKey string `json:"topologyKey"`
	// MaxUnavailable is how many domains of that key may have draining
	// nodes at once.
	// +kubebuilder:validation:Minimum=1
	MaxUnavailable int32 `json:"maxUnavailable"`
}

// Concurrency bounds how much happens at once.
type Concurrency struct {
	// MaxParallelNodes is how many governed nodes may drain at once, as a
	// number or a percentage of the governed nodes ("10%"). Default 1.
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^([1-9][0-9]?|100)%$')",message="must be a positive number or a percentage from 1% to 100%"
	// +optional
	MaxParallelNodes *intstr.IntOrString `json:"maxParallelNodes,omitempty"`
	// MaxParallelEvictionsPerNode bounds the evictions in flight per node.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +kubebuilder:default=10
	// +optional
	MaxParallelEvictionsPerNode int32 `json:"maxParallelEvictionsPerNode,omitempty"`
	// MaxUnavailablePerTopologyKey, for example one zone at a time.
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=topologyKey
	// +optional
	MaxUnavailablePerTopologyKey []TopologyLimit `json:"maxUnavailablePerTopologyKey,omitempty"`
	// BatchWindow gathers drains requested together: the batch closes this
	// long after its last request (at most five windows after a drain's own
	// request). Every drain of a batch is cordoned before any of them evicts
	// a pod, so evicted pods never land on a node about to be drained.
	// Default 2s; 0s admits drains as soon as they are requested.
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('0s')",message="must be a duration such as 2s or 1m"
	// +optional
	BatchWindow *metav1.Duration `json:"batchWindow,omitempty"`
}

// PodPolicy says what to do with each kind of pod on a draining node.
type PodPolicy struct {
	// DaemonSets: Ignore leaves DaemonSet pods (their controller would
	// recreate them); Evict evicts them too.
	// +kubebuilder:validation:Enum=Ignore;Evict
	// +kubebuilder:default=Ignore
	// +optional
	DaemonSets string `json:"daemonSets,omitempty"`
	// Unmanaged: pods without a controller. Block holds the drain until
	// someone moves them; Delete evicts them (they are not recreated).
	// +kubebuilder:validation:Enum=Block;Delete
	// +kubebuilder:default=Block
	// +optional
	Unmanaged string `json:"unmanaged,omitempty"`
	// LocalStorage: pods with emptyDir volumes. Block holds the drain;
	// Evict evicts them and their emptyDir data is lost.
	// +kubebuilder:validation:Enum=Block;Evict
	// +kubebuilder:default=Block
	// +optional
	LocalStorage string `json:"localStorage,omitempty"`
	// SkipSelector: pods matching it are left on the node.
	// +optional
	SkipSelector *metav1.LabelSelector `json:"skipSelector,omitempty"`
	// GracePeriodOverride replaces the pods' own termination grace period
	// (seconds) in evictions. Never 0.
	// +kubebuilder:validation:Minimum=1
	// +optional
	GracePeriodOverride *int64 `json:"gracePeriodOverride,omitempty"`
	// AnnotationNamespaceSelector limits the namespaces whose pods may hold
	// a drain by their own annotations (vacate.dev/drain: skip or
	// wait-completed, vacate.dev/evacuate-port). Elsewhere those annotations
	// are ignored and the pod gets an event saying why. Unset: every
	// namespace; an empty selector also selects every namespace.
	// +optional
	AnnotationNamespaceSelector *metav1.LabelSelector `json:"annotationNamespaceSelector,omitempty"`
}

// Timeouts bound how long a drain may take.
type Timeouts struct {
	// Drain bounds the whole drain, from admission. Unset: no bound.
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('0s')",message="must be a duration such as 90s, 15m or 1h30m"
	// +optional
	Drain *metav1.Duration `json:"drain,omitempty"`
	// Evacuation bounds each evacuation (an Evacuation resource or an HTTP
	// hook), counted from when the drain asked for it (at the earliest its
	// admission). One not Completed by then is reported EvacuationTimedOut
	// and handled by onTimeout; the pods it protects are never deleted.
	// Unset: no bound.
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('0s')",message="must be a duration such as 90s, 15m or 1h30m"
	// +optional
	Evacuation *metav1.Duration `json:"evacuation,omitempty"`
	// OnTimeout: Fail stops with the drain Failed and pods in place;
	// ForceDelete deletes the remaining pods with their own grace period,
	// except pods an unfinished evacuation or HTTP hook protects and pods
	// annotated wait-completed, which it lists. Either way the drain reaches
	// a final phase. ForceDelete is only ever used when chosen here.
	// +kubebuilder:validation:Enum=Fail;ForceDelete
	// +kubebuilder:default=Fail
	// +optional
	OnTimeout string `json:"onTimeout,omitempty"`
	// UnreachablePods: a pod that has been terminating this long on a node
	// that is not Ready (its kubelet cannot confirm the pod stopped) no
	// longer counts as remaining; it is reported, not waited on. Default 5m.
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('0s')",message="must be a duration such as 90s, 15m or 1h30m"
	// +optional
	UnreachablePods *metav1.Duration `json:"unreachablePods,omitempty"`
	// NodeDeletion bounds how long the finalizer vacate.dev/drain holds a
	// deleted node (triggers.onNodeDelete: Drain), whatever the drain's
	// state; when it passes the node is released with a Warning event.
	// Default 1h.
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('0s')",message="must be a duration such as 90s, 15m or 1h30m"
	// +optional
	NodeDeletion *metav1.Duration `json:"nodeDeletion,omitempty"`
	// Cancel bounds an undo: a provider or HTTP hook that has not confirmed
	// its cancel by then no longer keeps the node cordoned; the undo
	// completes with a Warning naming who did not confirm. Default 10m.
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('0s')",message="must be a duration such as 90s, 15m or 1h30m"
	// +optional
	Cancel *metav1.Duration `json:"cancel,omitempty"`
}

// HTTPHooks configures the HTTP evacuation protocol.
type HTTPHooks struct {
	// Enabled allows calling the hooks of annotated pods.
	// +optional
	Enabled bool `json:"enabled,omitempty"`
	// NamespaceSelector limits the namespaces whose pods may be called.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
}

// Endpoints configures endpoint-aware eviction: before evicting a pod with
// the readiness gate vacate.dev/serving, vacate sets that condition False,
// waits until every EndpointSlice that lists the pod shows it not ready,
// then waits SettleTime for the data planes that follow EndpointSlices
// (kube-proxy, ingress controllers, load balancers), then evicts.
type Endpoints struct {
	// SettleTime is how long vacate waits after the EndpointSlices show the
	// pod not ready. Default 2s.
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('0s') && duration(self) <= duration('10m')",message="must be a duration from 0s to 10m, such as 2s"
	// +optional
	SettleTime *metav1.Duration `json:"settleTime,omitempty"`
	// Timeout bounds the whole wait (the EndpointSlices, then the settle
	// time); past it vacate evicts the pod anyway and says so in an event.
	// Default 60s.
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s') && duration(self) <= duration('1h')",message="must be a duration over 0s and at most 1h, such as 60s"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// DrainPolicyStatus reports problems with the policy.
type DrainPolicyStatus struct {
	// ObservedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions, such as Overlapping when another policy selects the same nodes.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Nodes is how many nodes the policy governs.
	// +optional
	Nodes int32 `json:"nodes,omitempty"`
}

// Condition types and reasons on a DrainPolicy; the DrainPolicy controller
// is their only writer.
const (
	// ConditionValid: whether the policy's node selector parses.
	ConditionValid            = "Valid"
	ReasonValid               = "Valid"
	ReasonInvalidNodeSelector = "InvalidNodeSelector"
	// ConditionOverlapping: whether another policy selects some of the same
	// nodes.
	ConditionOverlapping   = "Overlapping"
	ReasonSelectorsOverlap = "SelectorsOverlap"
	ReasonNoOverlap        = "NoOverlap"
	// ConditionForceDeletePermitted is on a policy with onTimeout:
	// ForceDelete only: whether the controller may delete pods (the
	// ClusterRole vacate-controller-force-delete is bound to it).
	ConditionForceDeletePermitted = "ForceDeletePermitted"
	ReasonForceDeletePermitted    = "Permitted"
	ReasonMissingForceDeleteRole  = "MissingForceDeleteRole"
)

// DrainPolicy says how vacate drains a group of nodes.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=dp,categories=vacate
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.nodes`
// +kubebuilder:printcolumn:name="Overlapping",type=string,JSONPath=`.status.conditions[?(@.type=="Overlapping")].status`
// +kubebuilder:validation:XValidation:rule="self.metadata.name != 'default' || !has(self.spec) || !has(self.spec.nodeSelector)",message="the DrainPolicy named default governs the nodes no other policy selects: it takes no nodeSelector"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type DrainPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   DrainPolicySpec   `json:"spec,omitempty"`
	Status DrainPolicyStatus `json:"status,omitempty"`
}

// DrainPolicyList is a list of DrainPolicies.
// +kubebuilder:object:root=true
type DrainPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DrainPolicy `json:"items"`
}

func init() {
	knownTypes = append(knownTypes, &DrainPolicy{}, &DrainPolicyList{})
}
