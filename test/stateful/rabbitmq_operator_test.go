package stateful_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/utils/ptr"

	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testservers/rabbitmq"
	"github.com/vacate-dev/vacate/internal/hook"
)

// The pods TestRabbitMQ drains have the shape the RabbitMQ Cluster Operator
// gives a RabbitmqCluster's pods (v2.11.0, the last release whose default
// image is RabbitMQ 3.x: internal/resource/statefulset.go, read at commit
// 7f35974c; docs/recipes/operators.md), with the recipe's
// spec.override.statefulSet (examples/rabbitmq/manifests.yaml) merged into
// it as the operator merges it: a strategic merge patch of the pod template.
// The merged template is the StatefulSet's, so the test drains pods with the
// operator's containers, the recipe's sidecar, and the node's preStop hook,
// which the test runs as the kubelet would when a pod is evicted
// (rabbitmqRunPreStop).
//
// What differs from a real cluster, and why: the simulated pods run no
// containers (the test runs the node and the sidecar as processes on the
// pod's IP); the members have short node names (rabbit-N@IP) and are
// clustered by the test, not by peer discovery through the Kubernetes API;
// resource requests are the simulated nodes' small ones; the grace period is
// 60 s (the operator's default is a week), which also bounds the preStop; the
// preStop's `cat /etc/pod-info/skipPreStopChecks` finds no file and prints
// nothing, as the downward API file of a pod that is not being deleted with
// its cluster holds nothing.

// rabbitmqOperatorTemplate is the pod template of a RabbitmqCluster "orders"
// in namespace "messaging" as the Cluster Operator v2.11.0 builds it (the
// parts a pod's behaviour depends on; resources as the simulated nodes need).
func rabbitmqOperatorTemplate() corev1.PodTemplateSpec {
	const grace = 604800
	env := []corev1.EnvVar{
		{Name: "MY_POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
		{Name: "MY_POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}},
		{Name: "K8S_SERVICE_NAME", Value: "orders-nodes"},
		{Name: "RABBITMQ_ENABLED_PLUGINS_FILE", Value: "/operator/enabled_plugins"},
		{Name: "RABBITMQ_USE_LONGNAME", Value: "true"},
		{Name: "RABBITMQ_NODENAME", Value: "rabbit@$(MY_POD_NAME).$(K8S_SERVICE_NAME).$(MY_POD_NAMESPACE)"},
		{Name: "K8S_HOSTNAME_SUFFIX", Value: ".$(K8S_SERVICE_NAME).$(MY_POD_NAMESPACE)"},
	}
	preStop := `if [ ! -z "$(cat /etc/pod-info/skipPreStopChecks)" ]; then exit 0; fi; rabbitmq-upgrade await_online_quorum_plus_one -t 604800 && rabbitmq-upgrade await_online_synchronized_mirror -t 604800 || true && rabbitmq-upgrade drain -t 604800`
	small := corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}}
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		TerminationGracePeriodSeconds: ptr.To[int64](grace),
		SecurityContext:               &corev1.PodSecurityContext{FSGroup: ptr.To[int64](0), RunAsUser: ptr.To[int64](999)},
		InitContainers: []corev1.Container{{
			Name: "setup-container", Image: "rabbitmq:3.13.7-management", Resources: small,
			Command: []string{"sh", "-c", "cp /tmp/erlang-cookie-secret/.erlang.cookie /var/lib/rabbitmq/.erlang.cookie && chmod 600 /var/lib/rabbitmq/.erlang.cookie ; " +
				"cp /tmp/rabbitmq-plugins/enabled_plugins /operator/enabled_plugins ; sleep 30"},
			VolumeMounts: []corev1.VolumeMount{{Name: "plugins-conf", MountPath: "/tmp/rabbitmq-plugins/"}, {Name: "rabbitmq-erlang-cookie", MountPath: "/var/lib/rabbitmq/"},
				{Name: "erlang-cookie-secret", MountPath: "/tmp/erlang-cookie-secret/"}, {Name: "rabbitmq-plugins", MountPath: "/operator"}, {Name: "persistence", MountPath: "/var/lib/rabbitmq/mnesia/"}},
		}},
		Containers: []corev1.Container{{
			Name: "rabbitmq", Image: "rabbitmq:3.13.7-management", Env: env, Resources: small,
			Ports: []corev1.ContainerPort{{Name: "epmd", ContainerPort: 4369}, {Name: "amqp", ContainerPort: 5672}, {Name: "management", ContainerPort: 15672}, {Name: "prometheus", ContainerPort: 15692}},
			VolumeMounts: []corev1.VolumeMount{{Name: "rabbitmq-erlang-cookie", MountPath: "/var/lib/rabbitmq/"}, {Name: "persistence", MountPath: "/var/lib/rabbitmq/mnesia/"},
				{Name: "rabbitmq-plugins", MountPath: "/operator"}, {Name: "pod-info", MountPath: "/etc/pod-info/"}},
			Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/bash", "-c", preStop}}}},
		}},
		Volumes: []corev1.Volume{
			{Name: "plugins-conf", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "orders-plugins-conf"}}}},
			{Name: "rabbitmq-erlang-cookie", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "erlang-cookie-secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "orders-erlang-cookie"}}},
			{Name: "rabbitmq-plugins", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "persistence", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "pod-info", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "skipPreStopChecks", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['skipPreStopChecks']"}}}}}},
		},
	}}
}

// rabbitmqOverride is the recipe's spec.override.statefulSet.spec.template,
// as examples/rabbitmq/manifests.yaml writes it.
func rabbitmqOverride(t *testing.T) map[string]any {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(recipeDir(t, "rabbitmq"), "manifests.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range testenv.Objects(t, string(text)) {
		if o.GetKind() != "RabbitmqCluster" {
			continue
		}
		tmpl, found, err := unstructured.NestedMap(o.Object, "spec", "override", "statefulSet", "spec", "template")
		if err != nil || !found {
			t.Fatalf("the recipe's RabbitmqCluster has no override.statefulSet.spec.template (%v)", err)
		}
		return tmpl
	}
	t.Fatal("examples/rabbitmq/manifests.yaml holds no RabbitmqCluster")
	return nil
}

// rabbitmqOperatorShape shapes the test's pod template as the operator
// shapes a RabbitmqCluster's, with the recipe's override merged in. The
// test's own labels, scheduling and hook port stay: they place the pods on
// the test's nodes and tell vacate where each sidecar listens.
func rabbitmqOperatorShape(t *testing.T) func(*corev1.PodTemplateSpec) {
	t.Helper()
	base, err := json.Marshal(rabbitmqOperatorTemplate())
	if err != nil {
		t.Fatal(err)
	}
	patch, err := json.Marshal(rabbitmqOverride(t))
	if err != nil {
		t.Fatal(err)
	}
	merged, err := strategicpatch.StrategicMergePatch(base, patch, corev1.PodTemplateSpec{})
	if err != nil {
		t.Fatalf("merging the recipe's override into the operator's template: %v", err)
	}
	var shaped corev1.PodTemplateSpec
	if err := json.Unmarshal(merged, &shaped); err != nil {
		t.Fatal(err)
	}
	return func(tmpl *corev1.PodTemplateSpec) {
		port := tmpl.Annotations[hook.AnnotationPort]
		spec := shaped.Spec.DeepCopy()
		spec.NodeSelector, spec.Affinity = tmpl.Spec.NodeSelector, tmpl.Spec.Affinity
		spec.TerminationGracePeriodSeconds = ptr.To[int64](60)
		tmpl.Spec = *spec
		for k, v := range shaped.Annotations {
			tmpl.Annotations[k] = v
		}
		tmpl.Annotations[hook.AnnotationPort] = port
	}
}

// rabbitmqPreStop is the preStop command of a pod's rabbitmq container.
func rabbitmqPreStop(t *testing.T, a *app, i int) []string {
	t.Helper()
	for _, c := range a.pods[i].Spec.Containers {
		if c.Name == "rabbitmq" && c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Exec != nil {
			return c.Lifecycle.PreStop.Exec.Command
		}
	}
	t.Fatalf("pod %s has no preStop exec hook on its rabbitmq container", a.pods[i].Name)
	return nil
}

// preStopRun is one run of a pod's preStop hook.
type preStopRun struct {
	ordinal int
	err     error
	output  string
	took    time.Duration
}

// rabbitmqRunPreStop runs member i's preStop as the kubelet runs it when the
// pod is deleted: in the node's container (its environment: the node's
// name, the cookie), bounded by the pod's grace period, before the node
// gets SIGTERM.
func rabbitmqRunPreStop(a *app, rc *rabbitmq.Cluster, command []string, i int) preStopRun {
	grace := time.Duration(*a.pods[i].Spec.TerminationGracePeriodSeconds) * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	cmd := exec.CommandContext(ctx, command[0], command[1:]...)
	cmd.Env = rc.Env(i)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	start := time.Now()
	out, err := cmd.CombinedOutput()
	return preStopRun{ordinal: i, err: err, output: strings.TrimSpace(string(out)), took: time.Since(start)}
}
