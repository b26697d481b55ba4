package operator

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/vacate-dev/vacate/internal/serving"
	"github.com/vacate-dev/vacate/internal/surge"
)

// vacatePrefix starts every pod annotation vacate reads (vacate.dev/drain,
// vacate.dev/evacuate-port, vacate.dev/evacuate-path).
const vacatePrefix = "vacate.dev/"

// slimObjects is the cache's transform: it drops what vacate never reads
// from cached objects: managed fields everywhere, of pods everything but
// what slimPod keeps, of EndpointSlices everything but what slimSlice
// keeps, and of nodes their image lists (status.images: up to 50 image
// names and sizes per node).
func slimObjects(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return slimPod(o), nil
	case *discoveryv1.EndpointSlice:
		return slimSlice(o), nil
	case *corev1.Node:
		o.Status.Images = nil
	}
	return cache.TransformStripManagedFields()(obj)
}

var _ toolscache.TransformFunc = slimObjects

// slimPod is what the controller's pod informer keeps of a pod: a new
// object with only the fields that code reading the controller's cache
// uses, so the memory of the cache grows with the number of pods, not their
// size (containers, environment, managed fields, statuses). Idempotent. A
// field read from cached pods must be added here, with its reader:
//
//   - name, namespace, uid: every reader (the planner's keys, the eviction
//     request and its UID precondition, Evacuation.spec.protectedPods, the
//     hook target, blockers, events); resourceVersion: the informer itself
//     and events' object references.
//   - labels: selectors (PodDisruptionBudgets in the planner, the budgets,
//     admission and the PDB watch; EvacuationProviders' podSelector; the
//     policy's skipSelector; vacate's own component label).
//   - annotations: only the mirror-pod annotation (the planner skips static
//     pods) and vacate's own, vacate.dev/... (the planner's
//     vacate.dev/drain, the HTTP hook's port and path, the annotations a
//     policy may ignore); anything else, such as
//     kubectl.kubernetes.io/last-applied-configuration, is dropped.
//   - the controller owner reference: the planner (DaemonSet pods,
//     unmanaged pods).
//   - deletionTimestamp: the planner (terminating pods, unreachable nodes).
//   - spec.nodeName: the pod-by-node index, the pod watch, the eviction
//     request.
//   - spec.hostNetwork: the HTTP hook never calls a host-network pod.
//   - spec.evictionResponders: the EvictionRequest coordinator
//     (internal/controller/coordinator) lists them as the responders of
//     the pod's Eviction.
//   - spec.volumes, only emptyDir ones with their name: the planner's
//     local-storage rule.
//   - status.phase: the planner (completed pods).
//   - status.podIP, status.podIPs: the HTTP hook's address and the check
//     before every call.
//   - spec.readinessGates and status.conditions, only vacate.dev/serving's:
//     endpoint-aware eviction (internal/serving) and the serving
//     controller.
//   - of a surge's replacement only (label vacate.dev/surge-of), also its
//     creationTimestamp, owner references, and its Ready and PodScheduled
//     conditions: the surge waits for it to be Ready within
//     surge.readyTimeout, says why it is not, and sees its ReplicaSet
//     adopt it (internal/controller/nodedrain/surge.go).
func slimPod(p *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{
		TypeMeta: p.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name:              p.Name,
			Namespace:         p.Namespace,
			UID:               p.UID,
			ResourceVersion:   p.ResourceVersion,
			Labels:            p.Labels,
			Annotations:       readAnnotations(p.Annotations),
			DeletionTimestamp: p.DeletionTimestamp,
		},
		Spec: corev1.PodSpec{
			NodeName:           p.Spec.NodeName,
			HostNetwork:        p.Spec.HostNetwork,
			Volumes:            emptyDirs(p.Spec.Volumes),
			EvictionResponders: p.Spec.EvictionResponders,
		},
		Status: corev1.PodStatus{
			Phase:  p.Status.Phase,
			PodIP:  p.Status.PodIP,
			PodIPs: p.Status.PodIPs,
		},
	}
	for _, g := range p.Spec.ReadinessGates {
		if g.ConditionType == serving.Condition {
			out.Spec.ReadinessGates = []corev1.PodReadinessGate{g}
		}
	}
	if c := serving.Get(p); c != nil {
		out.Status.Conditions = []corev1.PodCondition{*c}
	}
	if ref := metav1.GetControllerOfNoCopy(p); ref != nil {
		out.OwnerReferences = []metav1.OwnerReference{*ref}
	}
	if p.Labels[surge.LabelOf] != "" {
		out.CreationTimestamp = p.CreationTimestamp
		out.OwnerReferences = p.OwnerReferences
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady || c.Type == corev1.PodScheduled {
				out.Status.Conditions = append(out.Status.Conditions, c)
			}
		}
	}
	return out
}

// slimSlice is what the controller's EndpointSlice informer keeps of a
// slice: what endpoint-aware eviction reads (serving.Endpoints, the index
// by pod, the drains to wake): each endpoint's target pod, node and
// conditions, and the slice's Service (label kubernetes.io/service-name: a
// surge's replacement must be ready in each Service of the pod it
// replaces). Addresses, ports, hints and zones are dropped.
func slimSlice(es *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	out := &discoveryv1.EndpointSlice{
		TypeMeta: es.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name:            es.Name,
			Namespace:       es.Namespace,
			UID:             es.UID,
			ResourceVersion: es.ResourceVersion,
		},
		AddressType: es.AddressType,
	}
	if svc := es.Labels[discoveryv1.LabelServiceName]; svc != "" {
		out.Labels = map[string]string{discoveryv1.LabelServiceName: svc}
	}
	if len(es.Endpoints) > 0 {
		out.Endpoints = make([]discoveryv1.Endpoint, 0, len(es.Endpoints))
	}
	for _, ep := range es.Endpoints {
		out.Endpoints = append(out.Endpoints, discoveryv1.Endpoint{TargetRef: ep.TargetRef, NodeName: ep.NodeName, Conditions: ep.Conditions})
	}
	return out
}

// readAnnotations are the annotations vacate reads (see slimPod); nil when
// there are none.
func readAnnotations(all map[string]string) map[string]string {
	var out map[string]string
	for k, v := range all {
		if k != corev1.MirrorPodAnnotationKey && !strings.HasPrefix(k, vacatePrefix) {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out
}

// emptyDirs are the emptyDir volumes, name and source only; nil when there
// are none.
func emptyDirs(vols []corev1.Volume) []corev1.Volume {
	var out []corev1.Volume
	for _, v := range vols {
		if v.EmptyDir != nil {
			out = append(out, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{EmptyDir: v.EmptyDir}})
		}
	}
	return out
}
