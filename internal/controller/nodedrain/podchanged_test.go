package nodedrain

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// TestPodChanged: an update that changed nothing the cache keeps but the
// resourceVersion wakes no drain; any kept field changing does.
func TestPodChanged(t *testing.T) {
	old := testutil.Pod("web-1").OnNode("n1").OwnedBy("ReplicaSet", "web").Obj()
	old.ResourceVersion = "1"
	for _, tc := range []struct {
		name   string
		change func(*corev1.Pod)
		want   bool
	}{
		{"resourceVersion only", func(p *corev1.Pod) {}, false},
		{"managed fields only", func(p *corev1.Pod) { p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}} }, false},
		{"deletion", func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: time.Now()} }, true},
		{"phase", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }, true},
		{"labels", func(p *corev1.Pod) { p.Labels = map[string]string{"app": "web"} }, true},
		{"annotations", func(p *corev1.Pod) { p.Annotations = map[string]string{"vacate.dev/drain": "skip"} }, true},
		{"pod IP", func(p *corev1.Pod) { p.Status.PodIP = "10.0.0.1" }, true},
	} {
		n := old.DeepCopy()
		n.ResourceVersion = "2"
		tc.change(n)
		if got := podChanged(event.UpdateEvent{ObjectOld: old, ObjectNew: n}); got != tc.want {
			t.Errorf("%s: podChanged = %t, want %t", tc.name, got, tc.want)
		}
	}
}
