package surge

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

func ownedPod(kind, name string, annotations map[string]string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-abc-1", UID: "uid-1", Annotations: annotations}}
	if kind != "" {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: "owner", Controller: ptr.To(true)}}
	}
	return p
}

func workload(replicas int32, mutate func(*appsv1.ReplicaSet, *appsv1.Deployment)) Workload {
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "dep"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas)}}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-abc", UID: "rs",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "dep", Controller: ptr.To(true)}}},
		Spec: appsv1.ReplicaSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web", HashLabel: "abc"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web", HashLabel: "abc"}, Annotations: map[string]string{"a": "b"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "web:1"}}},
			},
		},
	}
	if mutate != nil {
		mutate(rs, dep)
	}
	return Workload{ReplicaSet: rs, Deployment: dep}
}

// TestEligible: only a Deployment's pods are surged, and only when the
// Deployment allows an extra pod and a second pod can mount its volumes.
func TestEligible(t *testing.T) {
	claim := func(modes ...corev1.PersistentVolumeAccessMode) func(*appsv1.ReplicaSet, *appsv1.Deployment) {
		return func(rs *appsv1.ReplicaSet, _ *appsv1.Deployment) {
			rs.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
		}
	}
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		w      Workload
		claims map[string]*corev1.PersistentVolumeClaim
		reason string
		says   string
	}{
		{name: "Deployment pod", pod: ownedPod("ReplicaSet", "web-abc", nil), w: workload(1, nil)},
		{name: "bare pod", pod: ownedPod("", "", nil), reason: RefusedKind, says: "no controller"},
		{name: "StatefulSet", pod: ownedPod("StatefulSet", "db", nil), reason: RefusedKind, says: "stable identity"},
		{name: "Job", pod: ownedPod("Job", "batch", nil), reason: RefusedKind, says: "runs to completion"},
		{name: "DaemonSet", pod: ownedPod("DaemonSet", "agent", nil), reason: RefusedKind, says: "its node"},
		{name: "other controller", pod: ownedPod("Rollout", "r", nil), reason: RefusedKind, says: "Rollout r"},
		{name: "ReplicaSet of no Deployment", pod: ownedPod("ReplicaSet", "web-abc", nil), w: Workload{ReplicaSet: workload(1, nil).ReplicaSet},
			reason: RefusedKind, says: "belongs to no Deployment"},
		{name: "Recreate", pod: ownedPod("ReplicaSet", "web-abc", nil), w: workload(1, func(_ *appsv1.ReplicaSet, d *appsv1.Deployment) {
			d.Spec.Strategy.Type = appsv1.RecreateDeploymentStrategyType
		}), reason: RefusedStrategy},
		{name: "maxSurge 0", pod: ownedPod("ReplicaSet", "web-abc", nil), w: workload(4, func(_ *appsv1.ReplicaSet, d *appsv1.Deployment) {
			d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxSurge: ptr.To(intstr.FromInt32(0))}
		}), reason: RefusedMaxSurge},
		{name: "no hash", pod: ownedPod("ReplicaSet", "web-abc", nil), w: workload(1, func(rs *appsv1.ReplicaSet, _ *appsv1.Deployment) {
			delete(rs.Spec.Selector.MatchLabels, HashLabel)
		}), reason: RefusedSelector},
		{name: "being deleted", pod: ownedPod("ReplicaSet", "web-abc", nil), w: workload(1, func(_ *appsv1.ReplicaSet, d *appsv1.Deployment) {
			d.DeletionTimestamp = ptr.To(metav1.Now())
		}), reason: RefusedDeleting},
		{name: "ReadWriteOnce claim", pod: ownedPod("ReplicaSet", "web-abc", nil), w: workload(1, claim()),
			claims: map[string]*corev1.PersistentVolumeClaim{"data": {ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}}},
			reason: RefusedVolume, says: "ReadWriteOnce"},
		{name: "claim not found", pod: ownedPod("ReplicaSet", "web-abc", nil), w: workload(1, claim()), reason: RefusedVolume, says: "not found"},
		{name: "kube-system", pod: func() *corev1.Pod { p := ownedPod("ReplicaSet", "web-abc", nil); p.Namespace = "kube-system"; return p }(),
			w: workload(1, nil), reason: RefusedNamespace, says: "kube-system"},
		{name: "host network", pod: ownedPod("ReplicaSet", "web-abc", nil), w: workload(1, func(rs *appsv1.ReplicaSet, _ *appsv1.Deployment) {
			rs.Spec.Template.Spec.HostNetwork = true
		}), reason: RefusedPrivileged, says: "hostNetwork"},
		{name: "hostPath", pod: ownedPod("ReplicaSet", "web-abc", nil), w: workload(1, func(rs *appsv1.ReplicaSet, _ *appsv1.Deployment) {
			rs.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		}), reason: RefusedPrivileged, says: "hostPath volume (root)"},
		{name: "privileged init container", pod: ownedPod("ReplicaSet", "web-abc", nil), w: workload(1, func(rs *appsv1.ReplicaSet, _ *appsv1.Deployment) {
			rs.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "init", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}
		}), reason: RefusedPrivileged, says: "container init is privileged"},
		{name: "SYS_ADMIN", pod: ownedPod("ReplicaSet", "web-abc", nil), w: workload(1, func(rs *appsv1.ReplicaSet, _ *appsv1.Deployment) {
			rs.Spec.Template.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE", "SYS_ADMIN"}}}
		}), reason: RefusedPrivileged, says: "SYS_ADMIN"},
		{name: "NET_BIND_SERVICE", pod: ownedPod("ReplicaSet", "web-abc", nil), w: workload(1, func(rs *appsv1.ReplicaSet, _ *appsv1.Deployment) {
			rs.Spec.Template.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}}}
		})},
		{name: "host port", pod: ownedPod("ReplicaSet", "web-abc", nil), w: workload(1, func(rs *appsv1.ReplicaSet, _ *appsv1.Deployment) {
			rs.Spec.Template.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 8080}}
		}), reason: RefusedPrivileged, says: "host port (8080)"},
		{name: "node name", pod: ownedPod("ReplicaSet", "web-abc", nil), w: workload(1, func(rs *appsv1.ReplicaSet, _ *appsv1.Deployment) {
			rs.Spec.Template.Spec.NodeName = "n1"
		}), reason: RefusedPrivileged, says: "nodeName n1"},
		{name: "ReadWriteMany claim", pod: ownedPod("ReplicaSet", "web-abc", nil), w: workload(1, claim()),
			claims: map[string]*corev1.PersistentVolumeClaim{"data": {ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.w.Claims = tc.claims
			got := Eligible(tc.pod, tc.w)
			switch {
			case tc.reason == "" && got != nil:
				t.Errorf("refused: %s: %s", got.Reason, got.Message)
			case tc.reason != "" && got == nil:
				t.Errorf("eligible, want refused %s", tc.reason)
			case got != nil && (got.Reason != tc.reason || !strings.Contains(got.Message, tc.says)):
				t.Errorf("refused %s %q, want %s saying %q", got.Reason, got.Message, tc.reason, tc.says)
			}
		})
	}
}

// TestMaxSurge resolves maxSurge as the Deployment controller does: a
// percentage of replicas rounded up, 25% by default.
func TestMaxSurge(t *testing.T) {
	for _, tc := range []struct {
		replicas int32
		surge    *intstr.IntOrString
		want     int
	}{
		{1, nil, 1}, {4, nil, 1}, {5, nil, 2}, {10, ptr.To(intstr.FromString("10%")), 1},
		{3, ptr.To(intstr.FromInt32(2)), 2}, {3, ptr.To(intstr.FromString("0%")), 0},
	} {
		dep := workload(tc.replicas, nil).Deployment
		if tc.surge != nil {
			dep.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxSurge: tc.surge}
		}
		if got := MaxSurge(dep); got != tc.want {
			t.Errorf("replicas %d maxSurge %v: %d, want %d", tc.replicas, tc.surge, got, tc.want)
		}
	}
}

// TestWantedAndNeeded: the policy's mode and the pod's annotation say
// whether a pod is surged; its PDB or its being the only ready pod say
// whether it needs it.
func TestWantedAndNeeded(t *testing.T) {
	yes, no := map[string]string{Annotation: "true"}, map[string]string{Annotation: "false"}
	for _, tc := range []struct {
		mode     string
		ann      map[string]string
		honoured bool
		want     bool
	}{
		{v1alpha1.SurgeNone, yes, true, false},
		{v1alpha1.SurgeAnnotated, nil, true, false},
		{v1alpha1.SurgeAnnotated, yes, true, true},
		{v1alpha1.SurgeAnnotated, yes, false, false},
		{v1alpha1.SurgeAll, nil, true, true},
		{v1alpha1.SurgeAll, no, true, false},
		{v1alpha1.SurgeAll, no, false, true},
	} {
		got, why := Wanted(Mode(tc.mode), ownedPod("ReplicaSet", "web-abc", tc.ann), tc.honoured)
		if got != tc.want || (!got && why == "") {
			t.Errorf("mode %s annotations %v honoured %t: %t (%q), want %t", tc.mode, tc.ann, tc.honoured, got, why, tc.want)
		}
	}
	dep := workload(3, nil).Deployment
	dep.Status.ReadyReplicas = 1
	for _, tc := range []struct {
		pdbs    int
		blocked bool
		ready   int32
		want    bool
	}{
		{1, true, 3, true}, {1, false, 1, true}, {1, false, 2, false}, {0, false, 1, true}, {0, false, 2, false},
	} {
		dep.Status.ReadyReplicas = tc.ready
		if got, _ := Needed(tc.pdbs, tc.blocked, dep); got != tc.want {
			t.Errorf("pdbs %d blocked %t ready %d: %t, want %t", tc.pdbs, tc.blocked, tc.ready, got, tc.want)
		}
	}
}

// TestReplacement: the template without pod-template-hash (no ReplicaSet
// adopts it early), vacate's labels, and the drain as its only owner, not
// a controller.
func TestReplacement(t *testing.T) {
	w := workload(1, nil)
	nd := &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "nd-uid"}}
	p := Replacement(ownedPod("ReplicaSet", "web-abc", nil), w, nd)
	if _, ok := p.Labels[HashLabel]; ok {
		t.Errorf("the replacement has %s", HashLabel)
	}
	if p.Labels["app"] != "web" || p.Labels[LabelOf] != "uid-1" || p.Labels[LabelDrain] != "node-1" ||
		p.Annotations[AnnotationPod] != "web-abc-1" || p.Annotations[AnnotationReplicaSet] != "web-abc" ||
		p.Annotations[AnnotationDeployment] != "web" || p.Annotations["a"] != "b" {
		t.Errorf("labels %v annotations %v", p.Labels, p.Annotations)
	}
	if p.GenerateName != "web-abc-" || p.Namespace != "shop" || p.Spec.Containers[0].Image != "web:1" {
		t.Errorf("name %q namespace %q spec %+v", p.GenerateName, p.Namespace, p.Spec)
	}
	if len(p.OwnerReferences) != 1 || metav1.GetControllerOf(p) != nil || p.OwnerReferences[0].UID != "nd-uid" {
		t.Errorf("owner references %+v, want the drain's only, not a controller", p.OwnerReferences)
	}
	if w.ReplicaSet.Spec.Template.Labels[HashLabel] != "abc" {
		t.Error("the ReplicaSet's template was changed")
	}
}

// TestMine: the labels find a replacement, the proof makes it the drain's:
// the drain's owner reference and the replaced pod's namespace (from the
// pod itself, or from the drain's record); once handed over (no owner
// reference), the drain's record alone.
func TestMine(t *testing.T) {
	nd := &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "nd-uid"}, Spec: v1alpha1.NodeDrainSpec{NodeName: "n1"}}
	replaced := ownedPod("ReplicaSet", "web-abc", nil)
	replaced.Spec.NodeName = "n1"
	real := Replacement(replaced, workload(1, nil), nd)
	real.Name = "web-abc-r"
	recorded := nd.DeepCopy()
	recorded.Status.Surges = []v1alpha1.SurgeStatus{{Pod: "shop/web-abc-1", PodUID: "uid-1", Replacement: "web-abc-r", Phase: v1alpha1.SurgeReady}}
	with := func(f func(*corev1.Pod)) *corev1.Pod {
		p := real.DeepCopy()
		f(p)
		return p
	}
	elsewhere := replaced.DeepCopy()
	elsewhere.Namespace = "tenant"
	otherNode := replaced.DeepCopy()
	otherNode.Spec.NodeName = "n2"
	handedOver := with(func(p *corev1.Pod) { p.OwnerReferences = nil; p.Labels[HashLabel] = "abc" })
	for _, tc := range []struct {
		name     string
		p        *corev1.Pod
		nd       *v1alpha1.NodeDrain
		replaced *corev1.Pod
		want     bool
	}{
		{"vacate's, its pod here", real, nd, replaced, true},
		{"vacate's, its pod gone, recorded", real, recorded, nil, true},
		{"vacate's, its pod gone, not recorded", real, nd, nil, false},
		{"no owner reference", with(func(p *corev1.Pod) { p.OwnerReferences = nil }), nd, replaced, false},
		{"another drain's UID", with(func(p *corev1.Pod) { p.OwnerReferences[0].UID = "other" }), nd, replaced, false},
		{"a controller reference to the drain", with(func(p *corev1.Pod) { p.OwnerReferences[0].Controller = ptr.To(true) }), nd, replaced, false},
		{"another drain's label", with(func(p *corev1.Pod) { p.Labels[LabelDrain] = "n2" }), nd, replaced, false},
		{"in another namespace than its pod", with(func(p *corev1.Pod) { p.Namespace = "tenant" }), nd, replaced, false},
		// A tenant who knows the drain's UID can stand in only for its own
		// pods on the node, in its own namespace.
		{"naming a pod of its own namespace on the node", with(func(p *corev1.Pod) { p.Namespace = "tenant" }), nd, elsewhere, true},
		{"naming a pod of its namespace that is not the one replaced", with(func(p *corev1.Pod) { p.Namespace = "tenant" }), nd,
			func() *corev1.Pod { p := elsewhere.DeepCopy(); p.UID = "uid-x"; return p }(), false},
		{"naming a pod of another node", real, nd, otherNode, false},
		{"in another namespace than its record", with(func(p *corev1.Pod) { p.Namespace = "tenant" }), recorded, nil, false},
		{"another name than its record", with(func(p *corev1.Pod) { p.Name = "decoy" }), recorded, nil, false},
		{"handed over, recorded", handedOver, recorded, nil, true},
		{"handed over, not recorded", handedOver, nd, replaced, false},
		{"no label", with(func(p *corev1.Pod) { delete(p.Labels, LabelOf) }), recorded, replaced, false},
	} {
		if got := Mine(tc.p, tc.nd, tc.replaced); got != tc.want {
			t.Errorf("%s: %t, want %t", tc.name, got, tc.want)
		}
	}
}
