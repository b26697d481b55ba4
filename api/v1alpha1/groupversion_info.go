// Package v1alpha1 holds vacate's API types, group vacate.dev, version
// v1alpha1: NodeDrain, DrainPolicy, EvacuationProvider and Evacuation (see
// docs/architecture.md). The types arrive with the issues that use them.
//
// +kubebuilder:object:generate=true
// +groupName=vacate.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of vacate's API.
	GroupVersion = schema.GroupVersion{Group: "vacate.dev", Version: "v1alpha1"}

	// SchemeBuilder registers vacate's types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds vacate's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
