// Package v1alpha1 holds vacate's API types, group vacate.dev, version
// v1alpha1: NodeDrain, DrainPolicy, EvacuationProvider and Evacuation (see
// docs/architecture.md). The types arrive with the issues that use them.
//
// +kubebuilder:object:generate=true
// +groupName=vacate.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of vacate's API.
	GroupVersion = schema.GroupVersion{Group: "vacate.dev", Version: "v1alpha1"}

	// SchemeBuilder registers vacate's types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds vacate's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// knownTypes lists the API's kinds; each type file appends to it.
var knownTypes []runtime.Object

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, knownTypes...)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
