package install

import (
	"bytes"
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/vacate-dev/vacate/internal/cli"
)

// kustomize builds the kustomization in dir (relative to the repository)
// with the kustomize Go API, as `kubectl apply -k` does.
func kustomize(t testing.TB, dir string) []*unstructured.Unstructured {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(repoRoot(t), dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	y, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return decodeYAML(t, y)
}

// TestKustomizations builds config/default and the overlays with the
// kustomize Go API, checks what each holds and the images they run, and
// applies each to the dev cluster (server-side), then removes it.
func TestKustomizations(t *testing.T) {
	_, cl := startCluster(t)
	installPrometheusOperatorCRDs(t, cl)
	base := map[string]int{"CustomResourceDefinition": 4, "Namespace": 1, "ClusterRole": 4, "Role": 1, "ServiceAccount": 1,
		"ClusterRoleBinding": 1, "RoleBinding": 1, "Deployment": 1, "PodDisruptionBudget": 1, "Service": 2, "Secret": 1,
		"MutatingWebhookConfiguration": 1, "ValidatingWebhookConfiguration": 1, "ValidatingAdmissionPolicy": 11, "ValidatingAdmissionPolicyBinding": 11}
	with := func(extras ...map[string]int) map[string]int {
		out := map[string]int{}
		for k, n := range base {
			out[k] = n
		}
		for _, extra := range extras {
			for k, n := range extra {
				out[k] += n
			}
		}
		return out
	}
	agent := map[string]int{"ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1, "DaemonSet": 1,
		"ValidatingAdmissionPolicy": 1, "ValidatingAdmissionPolicyBinding": 1}
	monitoring := map[string]int{"ServiceMonitor": 1, "PodMonitor": 1, "PrometheusRule": 1, "ConfigMap": 1}
	for _, tc := range []struct {
		dir    string
		kinds  map[string]int
		images map[string]string
	}{
		{"config/default", base, map[string]string{"vacate-controller": "ghcr.io/vacate-dev/vacate-controller:v0.1.0"}},
		{"config/overlays/agent", with(agent), map[string]string{"vacate-controller": "ghcr.io/vacate-dev/vacate-controller:v0.1.0",
			"vacate-agent": "ghcr.io/vacate-dev/vacate-agent:v0.1.0"}},
		{"config/overlays/monitoring", with(monitoring), map[string]string{"vacate-controller": "ghcr.io/vacate-dev/vacate-controller:v0.1.0"}},
		{"config/overlays/full", with(agent, monitoring), map[string]string{"vacate-controller": "ghcr.io/vacate-dev/vacate-controller:v0.1.0",
			"vacate-agent": "ghcr.io/vacate-dev/vacate-agent:v0.1.0"}},
	} {
		t.Run(filepath.Base(tc.dir), func(t *testing.T) {
			objs := kustomize(t, tc.dir)
			if got := kinds(objs); !reflect.DeepEqual(got, tc.kinds) {
				t.Errorf("kustomize build %s: %v, want %v", tc.dir, got, tc.kinds)
			}
			if got := workloadImages(t, objs); !reflect.DeepEqual(got, tc.images) {
				t.Errorf("kustomize build %s runs images %v, want %v", tc.dir, got, tc.images)
			}
			if tc.dir == "config/default" {
				sameAsManifests(t, objs, "manifests", "install", "--image", tc.images["vacate-controller"])
			}
			applyAll(t, cl, "kustomize-test", objs)
			deleteAll(t, cl, objs, true)
		})
	}
}

// workloadImages maps each Deployment's and DaemonSet's name to the image of
// its one container.
func workloadImages(t testing.TB, objs []*unstructured.Unstructured) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, o := range objs {
		var spec *appsv1.DeploymentSpec
		switch o.GetKind() {
		case "Deployment":
			d := &appsv1.Deployment{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, d); err != nil {
				t.Fatal(err)
			}
			spec = &d.Spec
		case "DaemonSet":
			d := &appsv1.DaemonSet{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, d); err != nil {
				t.Fatal(err)
			}
			spec = &appsv1.DeploymentSpec{Template: d.Spec.Template}
		default:
			continue
		}
		if n := len(spec.Template.Spec.Containers); n != 1 {
			t.Fatalf("%s %s has %d containers, want 1", o.GetKind(), o.GetName(), n)
		}
		out[o.GetName()] = spec.Template.Spec.Containers[0].Image
	}
	return out
}

// sameAsManifests checks that objs are, object for object, what `vacate
// manifests` prints with args: two ways to install, one content.
func sameAsManifests(t *testing.T, objs []*unstructured.Unstructured, args ...string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := cli.Run(context.Background(), args, cli.Streams{In: strings.NewReader(""), Out: &out, Err: &errOut}, clock.RealClock{}); code != 0 {
		t.Fatalf("vacate %s: exit %d: %s", strings.Join(args, " "), code, errOut.String())
	}
	want := map[string]*unstructured.Unstructured{}
	for _, o := range decodeYAML(t, out.Bytes()) {
		want[o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName()] = o
	}
	for _, o := range objs {
		key := o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
		w, ok := want[key]
		if !ok {
			t.Errorf("%s is not in vacate %s", key, strings.Join(args, " "))
			continue
		}
		delete(want, key)
		if !equality.Semantic.DeepEqual(w.Object, o.Object) {
			t.Errorf("%s differs from vacate %s's", key, strings.Join(args, " "))
		}
	}
	for key := range want {
		t.Errorf("vacate %s has %s, the kustomization not", strings.Join(args, " "), key)
	}
}
