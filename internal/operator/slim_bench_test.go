package operator

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// cachedPods is how many pods BenchmarkPodCacheMemory caches.
const cachedPods = 10000

// ordinaryPod is bigPod as most pods are: running, no finalizer, none of
// vacate's annotations, not on the host network.
func ordinaryPod(i int) *corev1.Pod {
	p := bigPod(i)
	p.DeletionTimestamp, p.DeletionGracePeriodSeconds, p.Finalizers = nil, nil, nil
	for k := range p.Annotations {
		if k == corev1.MirrorPodAnnotationKey || strings.HasPrefix(k, vacatePrefix) {
			delete(p.Annotations, k)
		}
	}
	p.Spec.HostNetwork = false
	return p
}

// BenchmarkPodCacheMemory measures the heap an informer's store holds per
// cached pod (ns/pod key, namespace and node indexes, as the controller's
// cache has) for 10,000 realistic pods decoded from JSON as they come from
// the API server, with no transform, with the transform vacate had before
// (managed fields and container statuses dropped) and with slimObjects.
// Run it with `make bench-pods`; it is not part of `make test`.
func BenchmarkPodCacheMemory(b *testing.B) {
	raw := make([][]byte, cachedPods)
	for i := range raw {
		var err error
		if raw[i], err = json.Marshal(ordinaryPod(i)); err != nil {
			b.Fatal(err)
		}
	}
	for _, v := range []struct {
		name      string
		transform toolscache.TransformFunc
	}{
		{"none", func(o any) (any, error) { return o, nil }},
		{"managed-fields-and-container-statuses", stripManagedAndContainerStatuses},
		{"slim", slimObjects},
	} {
		b.Run(v.name, func(b *testing.B) {
			var perPod float64
			for b.Loop() {
				perPod = heapPerPod(b, raw, v.transform)
			}
			b.ReportMetric(perPod, "heap-B/pod")
		})
	}
}

// stripManagedAndContainerStatuses is the cache transform vacate had
// before slimObjects, for comparison.
func stripManagedAndContainerStatuses(obj any) (any, error) {
	obj, err := cache.TransformStripManagedFields()(obj)
	if p, ok := obj.(*corev1.Pod); ok {
		p.Status.ContainerStatuses, p.Status.InitContainerStatuses, p.Status.EphemeralContainerStatuses = nil, nil, nil
	}
	return obj, err
}

// heapPerPod decodes the pods, transforms them into an indexed store and
// returns the heap the store holds per pod, after garbage collection.
func heapPerPod(b *testing.B, raw [][]byte, transform toolscache.TransformFunc) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	store := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{
		toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc,
		"spec.nodeName": func(o any) ([]string, error) {
			return []string{o.(*corev1.Pod).Spec.NodeName}, nil
		},
	})
	for _, r := range raw {
		p := &corev1.Pod{}
		if err := json.Unmarshal(r, p); err != nil {
			b.Fatal(err)
		}
		o, err := transform(p)
		if err != nil {
			b.Fatal(err)
		}
		if err := store.Add(o); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(store)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(len(raw))
}
