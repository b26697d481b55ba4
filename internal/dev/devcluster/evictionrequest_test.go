package devcluster_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/evictionrequest"
)

// TestEvictionRequestAPIOnlyWithTheGate starts a dev cluster with
// Options.EvictionRequestAPI beside the package's shared one, which has it
// off (as every other test runs): only the first serves
// lifecycle.k8s.io/v1alpha1 (evictionrequest.Served, by discovery), keeps a
// pod's spec.evictionResponders and accepts an EvictionRequest, for which
// nothing in Kubernetes 1.37 creates an Eviction.
func TestEvictionRequestAPIOnlyWithTheGate(t *testing.T) {
	t.Parallel()
	plain := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	gated, err := devcluster.Up(ctx, devcluster.Options{Name: "eviction-requests", Dir: t.TempDir(), EvictionRequestAPI: true})
	if err != nil {
		t.Fatal(err)
	}
	defer gated.Stop()
	if !gated.EvictionRequestAPI || plain.EvictionRequestAPI {
		t.Errorf("the clusters' state says EvictionRequestAPI %v (gated) and %v (plain)", gated.EvictionRequestAPI, plain.EvictionRequestAPI)
	}

	for _, c := range []struct {
		name, ns string
		client   kubernetes.Interface
		served   bool
	}{{"gated", "default", gated.Client, true}, {"plain", testenv.Namespace(t, plain), plain.Client, false}} {
		served, err := evictionrequest.Served(c.client.Discovery())
		if err != nil || served != c.served {
			t.Errorf("%s cluster: Served = %v, %v; want %v", c.name, served, err, c.served)
		}
		if err := devcluster.WaitForServiceAccount(ctx, c.client, c.ns, time.Minute); err != nil {
			t.Fatal(err)
		}
		pod := devcluster.BarePod(c.ns, "responder", "nowhere")
		pod.Name, pod.GenerateName = "", "responder-"
		pod.Spec.EvictionResponders = []corev1.EvictionResponder{{Name: "example.com/mover", Priority: ptr.To[int32](10000)}}
		got, err := c.client.CoreV1().Pods(c.ns).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s cluster: creating a pod with responders: %v", c.name, err)
		}
		if kept := len(got.Spec.EvictionResponders) == 1; kept != c.served {
			t.Errorf("%s cluster: the pod's spec.evictionResponders stored as %v", c.name, got.Spec.EvictionResponders)
		}
		if !c.served {
			continue
		}
		er := &lifecyclev1alpha1.EvictionRequest{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"},
			Spec: lifecyclev1alpha1.EvictionRequestSpec{
				Target:    lifecyclev1alpha1.EvictionRequestTarget{Pod: &lifecyclev1alpha1.EvictionRequestPodReference{Name: got.Name, UID: got.UID}},
				Requester: "example.com/descheduler",
				Intent:    lifecyclev1alpha1.EvictionRequestIntentEviction,
			},
		}
		if _, err := c.client.LifecycleV1alpha1().EvictionRequests(c.ns).Create(ctx, er, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s cluster: creating an EvictionRequest: %v", c.name, err)
		}
		// Kubernetes 1.37 has no coordinator: the request is stored and
		// nothing acts on it (the controller manager runs every controller).
		time.Sleep(3 * time.Second)
		evictions, err := c.client.LifecycleV1alpha1().Evictions(c.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(evictions.Items); n != 0 {
			t.Errorf("%s cluster: %d Evictions exist; Kubernetes 1.37 was expected to create none", c.name, n)
		}
	}
}
