package operator

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vacate-dev/vacate/internal/surge"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// bigPod is a realistic pod of a busy cluster, with every part set: managed
// fields of several managers, a last-applied annotation, three containers
// with environment, resources, probes and mounts, an init container, the
// projected service account token, affinity, tolerations, and a full
// status. i varies names and addresses. Every time in it is now (one
// metav1.Time, which its pointers share).
func bigPod(i int) *corev1.Pod {
	now := &metav1.Time{Time: time.Date(2026, 11, 23, 5, 0, 0, 0, time.UTC)}
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: bigPodMeta(i, now),
		Spec:       bigPodSpec(),
		Status:     bigPodStatus(i, now),
	}
}

// bigPodMeta is bigPod's metadata: owned by a ReplicaSet, terminating,
// with labels, annotations (vacate's among them), a finalizer and the
// managed fields of three managers.
func bigPodMeta(i int, now *metav1.Time) metav1.ObjectMeta {
	name := fmt.Sprintf("checkout-7d9f8b6c5-%05d", i)
	managed := func(manager string, op metav1.ManagedFieldsOperationType, sub string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, APIVersion: "v1", Time: now, FieldsType: "FieldsV1", Subresource: sub,
			FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:labels":{".":{},"f:app":{},"f:pod-template-hash":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"1\"}":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:env":{},"f:image":{},"f:name":{},"f:ports":{},"f:resources":{}}}},"f:status":{"f:conditions":{"k:{\"type\":\"Ready\"}":{".":{},"f:lastProbeTime":{},"f:status":{},"f:type":{}}},"f:containerStatuses":{},"f:podIP":{},"f:podIPs":{}}}`)}
	}
	return metav1.ObjectMeta{
		Name: name, GenerateName: "checkout-7d9f8b6c5-", Namespace: "shop", UID: types.UID(fmt.Sprintf("uid-%05d", i)),
		ResourceVersion: fmt.Sprint(100000 + i), Generation: 1, CreationTimestamp: *now,
		DeletionTimestamp: now, DeletionGracePeriodSeconds: ptr.To[int64](30),
		Labels: map[string]string{"app": "checkout", "pod-template-hash": "7d9f8b6c5", "team": "payments",
			"app.kubernetes.io/part-of": "shop", "app.kubernetes.io/version": "v1.42.7"},
		Annotations: map[string]string{
			"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat(`{"apiVersion":"v1","kind":"Pod"}`, 40),
			"prometheus.io/scrape":                             "true", "prometheus.io/port": "9090",
			corev1.MirrorPodAnnotationKey: "mirror-hash",
			"vacate.dev/drain":            "wait-completed", "vacate.dev/evacuate-port": "8080", "vacate.dev/evacuate-path": "/evacuate",
		},
		OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "checkout-7d9f8b6c5", UID: "rs-uid", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)},
			{APIVersion: "v1", Kind: "ConfigMap", Name: "checkout-owner", UID: "cm-uid"},
		},
		Finalizers: []string{"example.com/hold"},
		ManagedFields: []metav1.ManagedFieldsEntry{managed("kube-controller-manager", metav1.ManagedFieldsOperationUpdate, ""),
			managed("kubelet", metav1.ManagedFieldsOperationUpdate, "status"), managed("kube-scheduler", metav1.ManagedFieldsOperationUpdate, "status")},
	}
}

// bigPodSpec is bigPod's spec: an init container and three containers
// sharing one environment and resources, every kind of volume, readiness
// gates, the host network, tolerations, affinity and spread.
func bigPodSpec() corev1.PodSpec {
	env := make([]corev1.EnvVar, 0, 12)
	for j := range 10 {
		env = append(env, corev1.EnvVar{Name: fmt.Sprintf("CHECKOUT_SETTING_%d", j), Value: strings.Repeat("v", 24)})
	}
	env = append(env,
		corev1.EnvVar{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		corev1.EnvVar{Name: "DB_PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "checkout-db"}, Key: "password"}}})
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("512Mi")},
	}
	container := func(n string, port int32) corev1.Container {
		return corev1.Container{
			Name: n, Image: "registry.example.com/shop/" + n + ":v1.42.7@sha256:" + strings.Repeat("ab", 32),
			Args: []string{"--listen=:" + fmt.Sprint(port), "--log-format=json", "--metrics"},
			Env:  env, Resources: res,
			Ports:          []corev1.ContainerPort{{Name: "http", ContainerPort: port, Protocol: corev1.ProtocolTCP}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(port)}}, PeriodSeconds: 5},
			LivenessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/live", Port: intstr.FromInt32(port)}}, PeriodSeconds: 10},
			VolumeMounts: []corev1.VolumeMount{{Name: "cache", MountPath: "/cache"}, {Name: "config", MountPath: "/etc/checkout"},
				{Name: "kube-api-access-x7k2p", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}},
			TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			ImagePullPolicy: corev1.PullIfNotPresent,
		}
	}
	return corev1.PodSpec{
		InitContainers:     []corev1.Container{container("migrate", 8079)},
		Containers:         []corev1.Container{container("app", 8080), container("sidecar", 9090), container("proxy", 15001)},
		EvictionResponders: []corev1.EvictionResponder{{Name: "example.com/backup", Priority: ptr.To[int32](500)}},
		Volumes: []corev1.Volume{
			{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("1Gi"))}}},
			{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "checkout"}}}},
			{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-checkout"}}},
			{Name: "kube-api-access-x7k2p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
				{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
			}, DefaultMode: ptr.To[int32](420)}}},
		},
		ReadinessGates: []corev1.PodReadinessGate{{ConditionType: "example.com/lb-ready"}, {ConditionType: "vacate.dev/serving"}},
		NodeName:       "node-17", HostNetwork: true, ServiceAccountName: "checkout", SchedulerName: "default-scheduler",
		PriorityClassName: "shop-critical", Priority: ptr.To[int32](100000), TerminationGracePeriodSeconds: ptr.To[int64](30),
		DNSPolicy: corev1.DNSClusterFirst, RestartPolicy: corev1.RestartPolicyAlways,
		NodeSelector: map[string]string{"pool": "general"},
		Tolerations: []corev1.Toleration{
			{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
			{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
		},
		Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
			Weight: 100, PodAffinityTerm: corev1.PodAffinityTerm{TopologyKey: "kubernetes.io/hostname",
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "checkout"}}}}}}},
		TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone",
			WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "checkout"}}}},
	}
}

// bigPodStatus is bigPod's status: running, every condition, two IPs, and
// each container's status.
func bigPodStatus(i int, now *metav1.Time) corev1.PodStatus {
	ip := fmt.Sprintf("10.%d.%d.%d", i/65536%256, i/256%256, i%256)
	status := func(n string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: n, Ready: true, RestartCount: 1, Image: "registry.example.com/shop/" + n + ":v1.42.7",
			ImageID:     "registry.example.com/shop/" + n + "@sha256:" + strings.Repeat("cd", 32),
			ContainerID: "containerd://" + strings.Repeat("ef", 32),
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: *now}}}
	}
	cond := func(t corev1.PodConditionType) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: *now}
	}
	return corev1.PodStatus{
		Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{cond(corev1.PodInitialized), cond(corev1.PodReady), cond(corev1.ContainersReady), cond(corev1.PodScheduled),
			cond("example.com/lb-ready"), {Type: "vacate.dev/serving", Status: corev1.ConditionFalse, Reason: "Draining", Message: "drain node-17", LastTransitionTime: *now}},
		HostIP: "192.168.1.17", HostIPs: []corev1.HostIP{{IP: "192.168.1.17"}},
		PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}, {IP: "fd00::" + fmt.Sprint(i)}},
		StartTime: now, QOSClass: corev1.PodQOSBurstable,
		InitContainerStatuses: []corev1.ContainerStatus{status("migrate")},
		ContainerStatuses:     []corev1.ContainerStatus{status("app"), status("sidecar"), status("proxy")},
	}
}

// TestSlimPodKeepsWhatVacateReads: of a pod with every part set, the
// cache keeps exactly the fields slimPod's doc comment lists, and applying
// the transform again changes nothing.
func TestSlimPodKeepsWhatVacateReads(t *testing.T) {
	p := bigPod(7)
	want := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: "shop", UID: p.UID, ResourceVersion: p.ResourceVersion,
			DeletionTimestamp: p.DeletionTimestamp,
			Labels:            p.Labels,
			Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "mirror-hash",
				"vacate.dev/drain": "wait-completed", "vacate.dev/evacuate-port": "8080", "vacate.dev/evacuate-path": "/evacuate"},
			OwnerReferences: []metav1.OwnerReference{p.OwnerReferences[0]},
		},
		Spec: corev1.PodSpec{
			NodeName: "node-17", HostNetwork: true,
			Volumes:            []corev1.Volume{p.Spec.Volumes[0]},
			EvictionResponders: p.Spec.EvictionResponders,
			ReadinessGates:     []corev1.PodReadinessGate{{ConditionType: "vacate.dev/serving"}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs,
			Conditions: []corev1.PodCondition{p.Status.Conditions[5]}},
	}
	got, err := slimObjects(p.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(want, got) {
		t.Errorf("the cache keeps of a pod (-want +got):\n%s", diff.Diff(want, got))
	}
	again, err := slimObjects(got)
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(want, again) {
		t.Errorf("the transform is not idempotent (-want +got):\n%s", diff.Diff(want, again))
	}

	// Of a surge's replacement, also its creation time, every owner
	// reference and its Ready and PodScheduled conditions.
	rep := bigPod(8)
	rep.Labels[surge.LabelOf] = "uid-old"
	wantRep, err := slimObjects(rep.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	w := wantRep.(*corev1.Pod)
	if !w.CreationTimestamp.Equal(&rep.CreationTimestamp) || len(w.OwnerReferences) != 2 {
		t.Errorf("the cache keeps of a replacement creationTimestamp %v and owners %v", w.CreationTimestamp, w.OwnerReferences)
	}
	var types []corev1.PodConditionType
	for _, c := range w.Status.Conditions {
		types = append(types, c.Type)
	}
	if fmt.Sprint(types) != "[vacate.dev/serving Ready PodScheduled]" {
		t.Errorf("the cache keeps of a replacement the conditions %v, want vacate.dev/serving, Ready, PodScheduled", types)
	}
	if again, _ := slimObjects(w.DeepCopy()); !equality.Semantic.DeepEqual(w, again) {
		t.Errorf("the transform of a replacement is not idempotent (-want +got):\n%s", diff.Diff(w, again))
	}

	// Other kinds lose their managed fields only (nodes their image lists
	// too: TestSlimNodeDropsImages).
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Labels: map[string]string{"a": "b"}, ManagedFields: p.ManagedFields},
		Data: map[string]string{"k": "v"}}
	gotCM, err := slimObjects(cm.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	cm.ManagedFields = nil
	if !equality.Semantic.DeepEqual(cm, gotCM) {
		t.Errorf("the cache keeps of a ConfigMap (-want +got):\n%s", diff.Diff(cm, gotCM))
	}
}

// TestSlimSliceKeepsTargetsAndConditions: of an EndpointSlice, the cache
// keeps each endpoint's target pod, node and conditions, which
// endpoint-aware eviction reads, and nothing of addresses, ports or hints.
func TestSlimSliceKeepsTargetsAndConditions(t *testing.T) {
	ep := func(i int, ready bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.0.0.%d", i)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(ready), Terminating: ptr.To(false)},
			Hostname:   ptr.To(fmt.Sprint("h", i)),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: fmt.Sprint("web-", i), UID: types.UID(fmt.Sprint("uid-", i))},
			NodeName:   ptr.To("node-17"), Zone: ptr.To("a"),
			Hints: &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "a"}}},
		}
	}
	es := &discoveryv1.EndpointSlice{
		TypeMeta: metav1.TypeMeta{Kind: "EndpointSlice", APIVersion: "discovery.k8s.io/v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "web-x7k2p", Namespace: "shop", UID: "es-uid", ResourceVersion: "42",
			Labels:        map[string]string{discoveryv1.LabelServiceName: "web"},
			ManagedFields: bigPod(1).ManagedFields},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{ep(1, true), ep(2, false)},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
	}
	want := &discoveryv1.EndpointSlice{
		TypeMeta: es.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Name: "web-x7k2p", Namespace: "shop", UID: "es-uid", ResourceVersion: "42",
			Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for _, e := range es.Endpoints {
		want.Endpoints = append(want.Endpoints, discoveryv1.Endpoint{TargetRef: e.TargetRef, NodeName: e.NodeName, Conditions: e.Conditions})
	}
	got, err := slimObjects(es.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(want, got) {
		t.Errorf("the cache keeps of an EndpointSlice (-want +got):\n%s", diff.Diff(want, got))
	}
	again, err := slimObjects(got)
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(want, again) {
		t.Errorf("the transform is not idempotent (-want +got):\n%s", diff.Diff(want, again))
	}
}

// TestSlimNodeDropsImages: of a node, the cache keeps everything but its
// managed fields and status.images (up to 50 image names and sizes per
// node, which nothing in vacate reads).
func TestSlimNodeDropsImages(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 23, 5, 0, 0, 0, time.UTC))
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-17", UID: "node-uid", Labels: map[string]string{"topology.kubernetes.io/zone": "a"},
			Annotations:   map[string]string{"vacate.dev/cordoned-by": "node-17/uid"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:status":{}}`)}}},
		Spec: corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{{Key: "vacate.dev/drain", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: now}},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.1.17"}},
			Capacity:   corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")},
		},
	}
	want := node.DeepCopy()
	want.ManagedFields = nil
	for i := range 50 {
		node.Status.Images = append(node.Status.Images, corev1.ContainerImage{SizeBytes: 1 << 28,
			Names: []string{fmt.Sprintf("registry.example.com/team/app-%d@sha256:%s", i, strings.Repeat("ab", 32)), fmt.Sprintf("registry.example.com/team/app-%d:v1", i)}})
	}
	got, err := slimObjects(node)
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(want, got) {
		t.Errorf("the cache keeps of a node (-want +got):\n%s", diff.Diff(want, got))
	}
}
