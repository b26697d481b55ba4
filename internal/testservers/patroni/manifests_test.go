package patroni

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/vacate-dev/vacate/internal/testenv"
)

// recipeDir holds the recipe as the ConfigMap mounts it at /etc/vacate-hook.
const recipeDir = "../../../examples/postgresql-patroni"

// TestManifestsCarryTheRecipe checks that examples/postgresql-patroni's
// manifests deploy the recipe test/stateful's TestPostgreSQLPatroni proves
// with vacate-hook on the dev cluster: the ConfigMap holds the
// configuration and script unchanged, the StatefulSet runs vacate-hook as a
// native sidecar in the database's image with them mounted and the
// annotation set, and the NetworkPolicy lets only vacate-controller reach
// the hook.
func TestManifestsCarryTheRecipe(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(recipeDir, "manifests.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var (
		cm  corev1.ConfigMap
		sts appsv1.StatefulSet
		np  networkingv1.NetworkPolicy
	)
	for _, o := range testenv.Objects(t, string(text)) {
		var into any
		switch o.GetKind() {
		case "ConfigMap":
			into = &cm
		case "StatefulSet":
			into = &sts
		case "NetworkPolicy":
			into = &np
		default:
			t.Fatalf("unexpected %s in the manifests", o.GetKind())
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, into, true); err != nil {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}

	for key, file := range map[string]string{"config.yaml": "vacate-hook.yaml", "patroni.sh": "patroni.sh"} {
		want, err := os.ReadFile(filepath.Join(recipeDir, file))
		if err != nil {
			t.Fatal(err)
		}
		if cm.Data[key] != string(want) {
			t.Errorf("ConfigMap %s: %s differs from %s", cm.Name, key, file)
		}
	}

	pod := sts.Spec.Template
	if pod.Annotations["vacate.dev/evacuate-port"] != "7070" {
		t.Errorf("the pods lack vacate.dev/evacuate-port: 7070: %v", pod.Annotations)
	}
	i := slices.IndexFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == "vacate-hook" })
	if i < 0 {
		t.Fatal("no vacate-hook init container")
	}
	hook := pod.Spec.InitContainers[i]
	db := pod.Spec.Containers[0]
	if hook.RestartPolicy == nil || *hook.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Error("vacate-hook is not a native sidecar (restartPolicy: Always)")
	}
	if hook.Image != db.Image {
		t.Errorf("vacate-hook runs %s, not the database's image %s", hook.Image, db.Image)
	}
	mounts := map[string]string{}
	for _, m := range hook.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	var configVolume string
	for _, v := range pod.Spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
			configVolume = v.Name
		}
	}
	if configVolume == "" || mounts["/etc/vacate-hook"] != configVolume {
		t.Errorf("the ConfigMap %s is not mounted at /etc/vacate-hook: %v", cm.Name, mounts)
	}
	if sc := hook.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("vacate-hook must run as non-root with a read-only root filesystem")
	}

	var hookRule *networkingv1.NetworkPolicyIngressRule
	for j, r := range np.Spec.Ingress {
		for _, p := range r.Ports {
			if p.Port != nil && p.Port.IntValue() == 7070 {
				hookRule = &np.Spec.Ingress[j]
			}
		}
	}
	if hookRule == nil || len(hookRule.From) != 1 || hookRule.From[0].PodSelector == nil ||
		hookRule.From[0].PodSelector.MatchLabels["app.kubernetes.io/name"] != "vacate-controller" ||
		hookRule.From[0].NamespaceSelector == nil ||
		hookRule.From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "vacate-system" {
		t.Errorf("port 7070 is not limited to vacate-controller's pods: %+v", hookRule)
	}
}
