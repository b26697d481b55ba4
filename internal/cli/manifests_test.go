package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/internal/dev/testenv"
)

// TestInstallManifestsAreAccepted: what `vacate manifests install` prints is
// accepted by a real API server (server-side apply, dry run; only the
// namespace is created), and the image is the one given.
func TestInstallManifestsAreAccepted(t *testing.T) {
	c := testenv.Start(t)
	testenv.DrainClient(t, c) // the CRDs exist: applying them again must be accepted too
	u := user{t: t, kubeconfig: c.Kubeconfig}
	const image = "registry.example/vacate-controller:v0.1.0"
	code, out, errOut := u.vacate("manifests", "install", "--image", image)
	if code != ExitOK {
		t.Fatalf("manifests install: exit %d: %s", code, errOut)
	}
	cl, err := client.New(c.RESTConfig, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kinds := map[string]int{}
	dec := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(out)))
	for {
		doc, err := dec.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(doc), 4096).Decode(&obj.Object); err != nil {
			t.Fatalf("decoding %s: %v", doc, err)
		}
		if len(obj.Object) == 0 {
			continue // a document of comments only
		}
		kinds[obj.GetKind()]++
		if obj.GetKind() == "Namespace" {
			// Another test's controller may have made it already (its
			// service account requests the hooks' tokens).
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: obj.GetName()}}
			switch err := cl.Create(ctx, ns); {
			case apierrors.IsAlreadyExists(err):
			case err != nil:
				t.Fatal(err)
			default:
				t.Cleanup(func() { _ = cl.Delete(context.Background(), ns) })
			}
			continue
		}
		if err := cl.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner("manifests-test"), client.ForceOwnership, client.DryRunAll); err != nil {
			t.Errorf("the API server refuses %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		if obj.GetKind() == "Deployment" {
			containers, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
			if len(containers) != 1 || containers[0].(map[string]any)["image"] != image {
				t.Errorf("deployment containers %v, want one running %s", containers, image)
			}
		}
	}
	want := map[string]int{"CustomResourceDefinition": 4, "ClusterRole": 4, "Namespace": 1, "ServiceAccount": 1,
		"ClusterRoleBinding": 1, "Role": 1, "RoleBinding": 1, "Deployment": 1, "PodDisruptionBudget": 1,
		"ValidatingAdmissionPolicy": 11, "ValidatingAdmissionPolicyBinding": 11,
		"MutatingWebhookConfiguration": 1, "ValidatingWebhookConfiguration": 1, "Secret": 1, "Service": 2}
	for k, n := range want {
		if kinds[k] != n {
			t.Errorf("manifests install has %d %s, want %d (all: %v)", kinds[k], k, n, kinds)
		}
	}
}
