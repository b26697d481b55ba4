// Package evictionrequest is vacate's side of Kubernetes 1.37's
// EvictionRequest API (KEP-4563, lifecycle.k8s.io/v1alpha1): whether the
// cluster serves it. The API is alpha, behind the API server's feature gate
// EvictionRequestAPI and its runtime-config, so discovery decides, never the
// server's version number.
package evictionrequest
