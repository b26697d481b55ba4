package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EvacuationStage says when a provider's evacuation must be Completed.
// +kubebuilder:validation:Enum=BeforeEviction;AfterEviction
type EvacuationStage string

// Stages of an evacuation.
const (
	// StageBeforeEviction: the pods the provider protects are evicted only
	// once its evacuation is Completed.
	StageBeforeEviction EvacuationStage = "BeforeEviction"
	// StageAfterEviction: the pods go first; the node is Drained only once
	// the evacuation is Completed (for example, deleting a replica that is
	// no longer in use).
	StageAfterEviction EvacuationStage = "AfterEviction"
)

// EvacuationProviderSpec says which pods a stateful system protects and how
// it takes part in drains.
// +kubebuilder:validation:XValidation:rule="has(self.namespaceSelector) || (has(self.podSelector.matchLabels) && size(self.podSelector.matchLabels) > 0) || (has(self.podSelector.matchExpressions) && size(self.podSelector.matchExpressions) > 0)",message="an EvacuationProvider must select its pods: an empty podSelector with no namespaceSelector would hold every pod of every drained node; set podSelector, or a namespaceSelector to protect whole namespaces"
type EvacuationProviderSpec struct {
	// PodSelector picks the pods the provider protects.
	PodSelector metav1.LabelSelector `json:"podSelector"`
	// NamespaceSelector limits the namespaces of those pods; unset means all.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// Stage: BeforeEviction (default) or AfterEviction.
	// +kubebuilder:default=BeforeEviction
	// +optional
	Stage EvacuationStage `json:"stage,omitempty"`
	// Modes are the drain modes the provider takes part in; default both.
	// +kubebuilder:validation:MaxItems=2
	// +listType=set
	// +optional
	Modes []DrainMode `json:"modes,omitempty"`
	// Timeout is how long the provider may go without a heartbeat on an
	// evacuation that is not finished; after it the drain reports the
	// provider stale and holds its pods. Default 1m.
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s')",message="must be a positive duration such as 30s or 2m"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// Reporter is who speaks for the provider: only this identity, or a
	// subject with the verb "report" on this EvacuationProvider, may write
	// the status of its Evacuations (the admission policy
	// vacate-evacuation-status), so no other system can complete them and
	// release the pods they protect. Unset: anyone allowed to write
	// evacuations/status can; vacate status and explain warn about it.
	// +optional
	Reporter *ProviderReporter `json:"reporter,omitempty"`
}

// ProviderReporter names the identity that reports for a provider: a
// service account, or a user as the API server names it.
// +kubebuilder:validation:XValidation:rule="has(self.serviceAccount) != has(self.user)",message="set exactly one of serviceAccount and user"
type ProviderReporter struct {
	// ServiceAccount the provider runs as.
	// +optional
	ServiceAccount *ServiceAccountReference `json:"serviceAccount,omitempty"`
	// User is a user name as the API server knows it (for a provider that
	// runs outside the cluster with a certificate or a token of its own).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	User string `json:"user,omitempty"`
}

// ServiceAccountReference names a service account.
type ServiceAccountReference struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// UserName is the name the API server gives the reporter in a request's
// user info ("system:serviceaccount:<namespace>:<name>" for a service
// account), or "" for none.
func (r *ProviderReporter) UserName() string {
	switch {
	case r == nil:
		return ""
	case r.ServiceAccount != nil:
		return "system:serviceaccount:" + r.ServiceAccount.Namespace + ":" + r.ServiceAccount.Name
	}
	return r.User
}

// EvacuationProviderStatus is reserved for what vacate reports about a provider.
type EvacuationProviderStatus struct {
	// ObservedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions about the provider.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// EvacuationProvider registers a stateful system that moves its data off a
// node when the node is drained.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=evp,categories=vacate
// +kubebuilder:printcolumn:name="Stage",type=string,JSONPath=`.spec.stage`
// +kubebuilder:printcolumn:name="Timeout",type=string,JSONPath=`.spec.timeout`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type EvacuationProvider struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   EvacuationProviderSpec   `json:"spec"`
	Status EvacuationProviderStatus `json:"status,omitempty"`
}

// EvacuationProviderList is a list of EvacuationProviders.
// +kubebuilder:object:root=true
type EvacuationProviderList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EvacuationProvider `json:"items"`
}

// Desired is what the controller asks of an evacuation.
// +kubebuilder:validation:Enum=Evacuate;Cancel
type Desired string

// What an evacuation is asked to do.
const (
	DesiredEvacuate Desired = "Evacuate"
	DesiredCancel   Desired = "Cancel"
)

// EvacuationPhase is where a provider is with an evacuation.
// +kubebuilder:validation:Enum=Pending;InProgress;Completed;Failed;Cancelled
type EvacuationPhase string

// Phases of an evacuation, written by the provider.
const (
	EvacuationPending    EvacuationPhase = "Pending"
	EvacuationInProgress EvacuationPhase = "InProgress"
	EvacuationCompleted  EvacuationPhase = "Completed"
	EvacuationFailed     EvacuationPhase = "Failed"
	EvacuationCancelled  EvacuationPhase = "Cancelled"
)

// EvacuationSpec is the controller's request to one provider for one drain.
// +kubebuilder:validation:XValidation:rule="self.nodeName == oldSelf.nodeName && self.provider == oldSelf.provider",message="nodeName and provider are immutable"
// +kubebuilder:validation:XValidation:rule="self.drainUID != oldSelf.drainUID || !(has(self.nodeUID) == has(oldSelf.nodeUID) && (!has(self.nodeUID) || self.nodeUID == oldSelf.nodeUID)) || !has(oldSelf.protectedPods) || (has(self.protectedPods) && oldSelf.protectedPods.all(p, self.protectedPods.exists(q, q.uid == p.uid)))",message="spec.protectedPods only grows while the evacuation belongs to the same drain and node: a protected pod is released only by Completed or spec.release"
// +kubebuilder:validation:XValidation:rule="self.drainUID != oldSelf.drainUID || !(has(self.nodeUID) == has(oldSelf.nodeUID) && (!has(self.nodeUID) || self.nodeUID == oldSelf.nodeUID)) || !has(oldSelf.release) || (has(self.release) && self.release == oldSelf.release)",message="spec.release cannot be withdrawn or changed once set for this drain"
type EvacuationSpec struct {
	// NodeName is the node being drained.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName"`
	// Provider is the EvacuationProvider asked.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Provider string `json:"provider"`
	// Mode is the drain's mode.
	// +kubebuilder:validation:Enum=Maintenance;Decommission
	Mode DrainMode `json:"mode"`
	// Desired: Evacuate, or Cancel to undo what was done.
	Desired Desired `json:"desired"`
	// DrainUID is the UID of the NodeDrain this evacuation belongs to, or,
	// where the label vacate.dev/eviction holds the same UID, of the
	// Eviction (lifecycle.k8s.io) of one pod it was asked for.
	// +kubebuilder:validation:MaxLength=64
	DrainUID string `json:"drainUID"`
	// NodeUID is the UID of the node when the drain asked. A node deleted
	// and created again under the same name is another node: an Evacuation
	// of the old one never counts for it.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	NodeUID string `json:"nodeUID,omitempty"`
	// Stage is the provider's stage when the drain asked: the pods below
	// are held (BeforeEviction) or the node is not Drained (AfterEviction)
	// until this evacuation is Completed, whatever happens to the provider
	// afterwards. Empty (written before the field existed) is BeforeEviction.
	// +optional
	Stage EvacuationStage `json:"stage,omitempty"`
	// ProtectedPods are the pods of the node this evacuation protects,
	// recorded when the drain asks. Pods are only ever added for the same
	// drain: editing or deleting the provider, or relabelling a pod, never
	// releases one. Only Completed for the current generation, or an
	// explicit release, lets them go. At most 256 (a node's pods: kubelet
	// runs 110 by default).
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	// +optional
	ProtectedPods []ProtectedPod `json:"protectedPods,omitempty"`
	// Reporter is the user (as the API server names it) who may write this
	// Evacuation's status: the provider's spec.reporter when the drain
	// asked, kept in step with it. Empty when the provider names none.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Reporter string `json:"reporter,omitempty"`
	// Release, when set, lets the drain go on without this evacuation: the
	// only way to evict pods whose provider cannot finish (it was deleted,
	// say). Written by `vacate release`; recorded as an event and in the
	// drain's status.
	// +optional
	Release *EvacuationRelease `json:"release,omitempty"`
}

// ProtectedPod names one pod an evacuation protects.
type ProtectedPod struct {
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// +kubebuilder:validation:MaxLength=64
	UID string `json:"uid"`
}

// EvacuationRelease records who let a drain go on without an evacuation, and why.
type EvacuationRelease struct {
	// By is the user who released it, as the API server knows them.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	By string `json:"by"`
	// Reason is free text for people, such as a ticket number.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Reason string `json:"reason,omitempty"`
	// Time is when it was released.
	Time metav1.Time `json:"time"`
}

// EvacuationStatus is written by the provider.
type EvacuationStatus struct {
	// Phase: Pending, InProgress, Completed, Failed or Cancelled.
	// +optional
	Phase EvacuationPhase `json:"phase,omitempty"`
	// Message says what the provider is doing or why it failed.
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	Message string `json:"message,omitempty"`
	// Remaining is how much is left to move (items or bytes, the provider's unit).
	// +optional
	Remaining int64 `json:"remaining,omitempty"`
	// HeartbeatTime is when the provider last reported, finished or not.
	// +optional
	HeartbeatTime *metav1.Time `json:"heartbeatTime,omitempty"`
	// ObservedGeneration is the spec generation the phase answers; a phase
	// for an older generation (before a Cancel, say) does not count.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// Evacuation asks one provider to move its data off one node, for one drain.
// The controller creates it and sets spec.desired; the provider writes the
// status.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=evac,categories=vacate
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.provider`
// +kubebuilder:printcolumn:name="Desired",type=string,JSONPath=`.spec.desired`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Remaining",type=integer,JSONPath=`.status.remaining`
// +kubebuilder:printcolumn:name="Heartbeat",type=date,JSONPath=`.status.heartbeatTime`
type Evacuation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   EvacuationSpec   `json:"spec"`
	Status EvacuationStatus `json:"status,omitempty"`
}

// EvacuationList is a list of Evacuations.
// +kubebuilder:object:root=true
type EvacuationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Evacuation `json:"items"`
}

func init() {
	knownTypes = append(knownTypes, &EvacuationProvider{}, &EvacuationProviderList{}, &Evacuation{}, &EvacuationList{})
}
