// Package surge decides which pods a drain moves the way a rolling update
// would: a replacement is brought up on another node from the pod's
// ReplicaSet template, vacate waits until it is Ready, and only then is the
// pod evicted; the ReplicaSet then takes the replacement over. Its rules
// are pure functions (Read only gathers what they need): the NodeDrain
// controller carries their decisions out and `vacate plan` shows them.
//
// What a surge never touches: the Deployment and its ReplicaSets
// (spec.replicas stays the user's, the HPA's or GitOps'). The replacement is
// a pod of its own until the old pod has left: it lacks the label
// pod-template-hash, so no ReplicaSet selects it, and its only owner
// reference is the NodeDrain's (not a controller reference). When the old
// pod has left, the replacement gets its ReplicaSet's pod-template-hash and
// the ReplicaSet adopts it, as it adopts any orphan its selector matches.
//
// The labels find replacements; they do not prove one. Anyone who may
// create pods can label one: a pod is a drain's replacement only with the
// proof Mine checks (its namespace, and the drain's owner reference or the
// drain's own record of it). A pod that carries the labels without it is
// not vacate's: never evicted, patched or waited on.
package surge

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/drain"
)

// Names on pods.
const (
	// Annotation on a pod (set in its Deployment's pod template): "true"
	// opts it in under surge.pods Annotated, "false" opts it out under All.
	Annotation = "vacate.dev/surge"
	// LabelOf, on a replacement: the UID of the pod it replaces.
	LabelOf = drain.SurgeReplacementLabel
	// LabelDrain, on a replacement: the NodeDrain that brought it up.
	LabelDrain = "vacate.dev/surge-drain"
	// AnnotationPod, on a replacement: the name of the pod it replaces.
	AnnotationPod = "vacate.dev/surge-of-pod"
	// AnnotationReplicaSet, on a replacement: the ReplicaSet whose template
	// it was made from, which takes it over.
	AnnotationReplicaSet = "vacate.dev/surge-replicaset"
	// AnnotationDeployment, on a replacement: that ReplicaSet's Deployment,
	// whose maxSurge bounds the replacements at once.
	AnnotationDeployment = "vacate.dev/surge-deployment"
	// AnnotationCost, on a replacement: its template's deletion cost
	// (DeletionCost), given back once its ReplicaSet adopted it.
	AnnotationCost = "vacate.dev/surge-deletion-cost"
	// DeletionCost is the annotation a ReplicaSet deletes its pods by,
	// the lowest first. A replacement being handed over gets KeepCost.
	DeletionCost = "controller.kubernetes.io/pod-deletion-cost"
	// KeepCost is the highest deletion cost.
	KeepCost = "2147483647"
	// HashLabel is the label that ties a Deployment's pods to one of its
	// ReplicaSets.
	HashLabel = appsv1.DefaultDeploymentUniqueLabelKey
)

// DefaultReadyTimeout is surge.readyTimeout's default.
const DefaultReadyTimeout = 5 * time.Minute

// Mode is surge.pods.
type Mode string

// Wanted says whether the policy surges this pod, by its annotation, and
// why not. honoured says whether the pod's namespace may use annotations
// (pods.annotationNamespaceSelector).
func Wanted(mode Mode, pod *corev1.Pod, honoured bool) (bool, string) {
	v, annotated := pod.Annotations[Annotation]
	annotated = annotated && honoured
	switch string(mode) {
	case v1alpha1.SurgeAll:
		if annotated && v == "false" {
			return false, "annotated " + Annotation + ": \"false\""
		}
		return true, ""
	case v1alpha1.SurgeAnnotated:
		if annotated && v == "true" {
			return true, ""
		}
		if _, ok := pod.Annotations[Annotation]; ok && !honoured {
			return false, "its namespace may not use annotations (pods.annotationNamespaceSelector)"
		}
		return false, "not annotated " + Annotation + ": \"true\" (surge.pods: Annotated)"
	}
	return false, "the DrainPolicy does not surge (surge.pods: None)"
}

// Workload is what a pod's surge depends on, read from the cluster.
type Workload struct {
	// ReplicaSet is the pod's controller; nil if it has none or another.
	ReplicaSet *appsv1.ReplicaSet
	// Deployment is the ReplicaSet's controller; nil if it has none.
	Deployment *appsv1.Deployment
	// Claims are the PersistentVolumeClaims the template mounts, by name;
	// a claim not found is missing.
	Claims map[string]*corev1.PersistentVolumeClaim
}

// Refusal is why a pod is never surged.
type Refusal struct {
	Reason  string
	Message string
}

func (r *Refusal) Error() string { return r.Message }

// Reasons of a Refusal.
const (
	RefusedKind     = "NotADeploymentPod"
	RefusedStrategy = "RecreateStrategy"
	RefusedMaxSurge = "MaxSurgeZero"
	RefusedVolume   = "ExclusiveVolume"
	RefusedSelector = "NoTemplateHash"
	RefusedDeleting = "WorkloadDeleting"
	// RefusedNamespace: the pod is in a namespace of the cluster's own
	// (SystemNamespaces), where vacate-controller never creates pods.
	RefusedNamespace = "SystemNamespace"
	// RefusedPrivileged: the pod's template asks for more than a
	// replacement may have (Privileged): vacate-controller may not create
	// such a pod (admission policy vacate-controller-surge).
	RefusedPrivileged = "PrivilegedTemplate"
)

// SystemNamespaces are the namespaces whose pods are never surged: the
// admission policy vacate-controller-surge refuses the controller's pod
// creates there.
var SystemNamespaces = []string{"kube-system", "kube-public", "kube-node-lease"}

// BaselineCapabilities are the capabilities a replacement's containers may
// add: those of the Pod Security Standards' baseline level.
var BaselineCapabilities = []corev1.Capability{"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
	"NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}

// Privileged says what in a pod spec a replacement may not have, "" if
// nothing: a node of its own (nodeName), the host's network, PID or IPC
// namespace, a hostPath volume, a privileged container, a capability
// beyond the baseline's, a host port. The admission policy
// vacate-controller-surge refuses the same for the controller's creates,
// so that a stolen controller token cannot run such a pod; a Deployment
// whose pods need them is not surged.
func Privileged(spec *corev1.PodSpec) string {
	switch {
	case spec.NodeName != "":
		return "its template names a node (nodeName " + spec.NodeName + ")"
	case spec.HostNetwork:
		return "its template uses the host's network (hostNetwork)"
	case spec.HostPID:
		return "its template uses the host's PID namespace (hostPID)"
	case spec.HostIPC:
		return "its template uses the host's IPC namespace (hostIPC)"
	}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			return "its template mounts a hostPath volume (" + v.Name + ")"
		}
	}
	var containers []corev1.Container
	containers = append(containers, spec.InitContainers...)
	containers = append(containers, spec.Containers...)
	for _, c := range spec.EphemeralContainers {
		containers = append(containers, corev1.Container(c.EphemeralContainerCommon))
	}
	for _, c := range containers {
		if why := privilegedContainer(c); why != "" {
			return "its container " + c.Name + " " + why
		}
	}
	return ""
}

func privilegedContainer(c corev1.Container) string {
	if sc := c.SecurityContext; sc != nil {
		if sc.Privileged != nil && *sc.Privileged {
			return "is privileged"
		}
		if sc.Capabilities != nil {
			for _, cap := range sc.Capabilities.Add {
				if !slices.Contains(BaselineCapabilities, cap) {
					return "adds the capability " + string(cap)
				}
			}
		}
	}
	for _, p := range c.Ports {
		if p.HostPort != 0 {
			return fmt.Sprintf("uses a host port (%d)", p.HostPort)
		}
	}
	return ""
}

// Eligible says whether a pod can be surged at all: a Deployment's pod
// (through its ReplicaSet) whose Deployment allows extra pods (its
// rollingUpdate maxSurge is not 0, its strategy is not Recreate) and whose
// volumes a second pod can mount. StatefulSets' pods (a stable identity:
// two pods of one name cannot run), Jobs' pods and pods of no controller
// are never surged, nor pods of the cluster's own namespaces
// (SystemNamespaces) or pods whose template asks for more than a
// replacement may have (Privileged).
func Eligible(pod *corev1.Pod, w Workload) *Refusal {
	ref := metav1.GetControllerOfNoCopy(pod)
	switch {
	case ref == nil:
		return &Refusal{RefusedKind, "a pod of no controller: nothing would take a replacement over"}
	case ref.Kind != "ReplicaSet":
		why := map[string]string{
			"StatefulSet": "a StatefulSet's pod has a stable identity: a second pod of its name cannot run",
			"Job":         "a Job's pod runs to completion: a replacement would run the work twice",
			"DaemonSet":   "a DaemonSet's pod belongs to its node",
		}[ref.Kind]
		if why == "" {
			why = "only Deployments' pods are surged; its controller is " + ref.Kind + " " + ref.Name
		}
		return &Refusal{RefusedKind, why}
	case w.ReplicaSet == nil || w.Deployment == nil:
		return &Refusal{RefusedKind, "its ReplicaSet " + ref.Name + " belongs to no Deployment"}
	}
	rs, dep := w.ReplicaSet, w.Deployment
	if slices.Contains(SystemNamespaces, pod.Namespace) {
		return &Refusal{RefusedNamespace, "a pod of namespace " + pod.Namespace + ": vacate never creates pods in the cluster's own namespaces (" +
			strings.Join(SystemNamespaces, ", ") + ")"}
	}
	if why := Privileged(&rs.Spec.Template.Spec); why != "" {
		return &Refusal{RefusedPrivileged, why + ": vacate-controller may not create such a pod"}
	}
	if !rs.DeletionTimestamp.IsZero() || !dep.DeletionTimestamp.IsZero() {
		return &Refusal{RefusedDeleting, "its Deployment or ReplicaSet is being deleted"}
	}
	if rs.Spec.Selector == nil || rs.Spec.Selector.MatchLabels[HashLabel] == "" || rs.Spec.Template.Labels[HashLabel] == "" {
		return &Refusal{RefusedSelector, "its ReplicaSet " + rs.Name + " does not select its pods by " + HashLabel + ": a replacement could not be kept apart from it"}
	}
	if dep.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		return &Refusal{RefusedStrategy, "Deployment " + dep.Name + " has strategy Recreate: it never runs two pods of one version at once"}
	}
	if MaxSurge(dep) < 1 {
		return &Refusal{RefusedMaxSurge, "Deployment " + dep.Name + " allows no extra pod (rollingUpdate.maxSurge: 0)"}
	}
	for _, v := range rs.Spec.Template.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		name := v.PersistentVolumeClaim.ClaimName
		c := w.Claims[name]
		if c == nil {
			return &Refusal{RefusedVolume, "its PersistentVolumeClaim " + name + " was not found"}
		}
		if !shared(c) {
			return &Refusal{RefusedVolume, fmt.Sprintf("its PersistentVolumeClaim %s is %s: a second pod on another node could not mount it", name, modes(c))}
		}
	}
	return nil
}

// shared says whether pods on several nodes can mount the claim.
func shared(c *corev1.PersistentVolumeClaim) bool {
	am := c.Status.AccessModes
	if len(am) == 0 {
		am = c.Spec.AccessModes
	}
	return slices.Contains(am, corev1.ReadWriteMany) || slices.Contains(am, corev1.ReadOnlyMany)
}

func modes(c *corev1.PersistentVolumeClaim) string {
	var out []string
	for _, m := range c.Spec.AccessModes {
		out = append(out, string(m))
	}
	return strings.Join(out, ", ")
}

// MaxSurge is how many pods over its replicas the Deployment allows, as
// its controller computes it (a percentage rounds up; default 25%).
func MaxSurge(dep *appsv1.Deployment) int {
	if dep.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		return 0
	}
	ms := intstr.FromString("25%")
	if ru := dep.Spec.Strategy.RollingUpdate; ru != nil && ru.MaxSurge != nil {
		ms = *ru.MaxSurge
	}
	replicas := 1
	if dep.Spec.Replicas != nil {
		replicas = int(*dep.Spec.Replicas)
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&ms, replicas, true)
	if err != nil {
		return 0
	}
	return n
}

// Needed says whether the pod needs a surge to leave without lowering its
// Deployment's ready pods: a PodDisruptionBudget refuses its eviction now
// (pdbBlocked), or it is its Deployment's only ready pod (with or without a
// PodDisruptionBudget: one that allows its eviction allows an outage).
func Needed(pdbs int, pdbBlocked bool, dep *appsv1.Deployment) (bool, string) {
	switch {
	case pdbBlocked:
		return true, "its PodDisruptionBudget allows no disruption now"
	case dep.Status.ReadyReplicas <= 1 && pdbs == 0:
		return true, "no PodDisruptionBudget guards it and it is the only ready pod of Deployment " + dep.Name
	case dep.Status.ReadyReplicas <= 1:
		return true, "it is the only ready pod of Deployment " + dep.Name + " (its PodDisruptionBudget would let it go)"
	}
	return false, ""
}

// Replacement is the pod a surge brings up for pod: its ReplicaSet's
// template, without pod-template-hash (so the ReplicaSet does not adopt
// it before the pod has left), with vacate's labels and annotations and an
// owner reference to the drain (garbage collected with it; not a
// controller reference).
func Replacement(pod *corev1.Pod, w Workload, nd *v1alpha1.NodeDrain) *corev1.Pod {
	tpl := w.ReplicaSet.Spec.Template.DeepCopy()
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:    pod.Namespace,
			GenerateName: w.ReplicaSet.Name + "-",
			Labels:       tpl.Labels,
			Annotations:  tpl.Annotations,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeDrain", Name: nd.Name, UID: nd.UID,
			}},
		},
		Spec: tpl.Spec,
	}
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	delete(out.Labels, HashLabel)
	out.Labels[LabelOf] = string(pod.UID)
	out.Labels[LabelDrain] = nd.Name
	out.Annotations[AnnotationPod] = pod.Name
	out.Annotations[AnnotationReplicaSet] = w.ReplicaSet.Name
	out.Annotations[AnnotationDeployment] = w.Deployment.Name
	if c, ok := out.Annotations[DeletionCost]; ok {
		out.Annotations[AnnotationCost] = c
	}
	return out
}

// Of is the UID of the pod a replacement replaces; "" if p is none.
func Of(p *corev1.Pod) string { return p.Labels[LabelOf] }

// DrainRef is a replacement's owner reference to the NodeDrain that
// brought it up: group vacate.dev, kind NodeDrain, named as its label
// LabelDrain, not a controller reference. Nil if it has none.
func DrainRef(p *corev1.Pod) *metav1.OwnerReference {
	for i, ref := range p.OwnerReferences {
		if ref.Kind == "NodeDrain" && strings.HasPrefix(ref.APIVersion, v1alpha1.GroupVersion.Group+"/") &&
			ref.Name == p.Labels[LabelDrain] && ref.Name != "" && (ref.Controller == nil || !*ref.Controller) {
			return &p.OwnerReferences[i]
		}
	}
	return nil
}

// Record is the drain's record of the surge of the pod of this UID
// (status.surges); nil if none.
func Record(nd *v1alpha1.NodeDrain, podUID string) *v1alpha1.SurgeStatus {
	for i := range nd.Status.Surges {
		if nd.Status.Surges[i].PodUID == podUID {
			return &nd.Status.Surges[i]
		}
	}
	return nil
}

// Mine says whether p is a replacement the drain nd brought up. Its
// labels name nd and the UID of the pod it replaces; that is not enough,
// since anyone who may create a pod may label it. The proof is what a
// tenant cannot forge for another namespace's pods (one who may read
// NodeDrains knows nd's UID, but can then stand in only for its own pods on
// the node, in its own namespace):
//   - p is in the namespace of the pod it replaces: replaced (that pod as
//     read, by the name p's annotation gives; nil if not found) has p's
//     label's UID, that namespace and nd's node; or nd's own record of the
//     surge (status.surges, which only vacate writes) names p in that
//     namespace;
//   - and p carries the (non-controller) owner reference to nd's UID, or,
//     handed over to its ReplicaSet (which drops that reference: the
//     garbage collector must not take it with the drain), nd's record
//     names it.
func Mine(p *corev1.Pod, nd *v1alpha1.NodeDrain, replaced *corev1.Pod) bool {
	uid := Of(p)
	if uid == "" || p.Labels[LabelDrain] != nd.Name {
		return false
	}
	recorded := false
	if rec := Record(nd, uid); rec != nil {
		ns, _, _ := strings.Cut(rec.Pod, "/")
		recorded = rec.Replacement == p.Name && ns == p.Namespace
	}
	if ref := DrainRef(p); ref != nil && ref.UID == nd.UID {
		return recorded || replaced != nil && string(replaced.UID) == uid && replaced.Namespace == p.Namespace &&
			replaced.Spec.NodeName == nd.Spec.NodeName
	}
	return recorded && p.Labels[HashLabel] != ""
}

// Ready says whether a pod is Ready.
func Ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Adopted says whether the replacement's ReplicaSet took it over.
func Adopted(p *corev1.Pod) bool {
	ref := metav1.GetControllerOfNoCopy(p)
	return ref != nil && ref.Kind == "ReplicaSet"
}

// Consider says whether a drain surges the pod now, and why (or why not):
// the policy wants it (Wanted), the pod can be (Eligible), and needs it
// (Needed). A pod that needs no surge gets no reason.
func Consider(mode Mode, honoured bool, pod *corev1.Pod, pdbs int, pdbBlocked bool, w Workload) (bool, string) {
	if ok, why := Wanted(mode, pod, honoured); !ok {
		return false, why
	}
	if r := Eligible(pod, w); r != nil {
		return false, r.Message
	}
	if w.Deployment == nil {
		return false, ""
	}
	return Needed(pdbs, pdbBlocked, w.Deployment)
}

// Read reads a ReplicaSet, its Deployment and the claims its template
// mounts; what is not found is left nil.
func Read(ctx context.Context, c client.Reader, namespace, replicaSet string) (Workload, error) {
	var w Workload
	rs := &appsv1.ReplicaSet{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: replicaSet}, rs); err != nil {
		return w, client.IgnoreNotFound(err)
	}
	w.ReplicaSet = rs
	ref := metav1.GetControllerOfNoCopy(rs)
	if ref == nil || ref.Kind != "Deployment" {
		return w, nil
	}
	dep := &appsv1.Deployment{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: ref.Name}, dep); err != nil {
		return w, client.IgnoreNotFound(err)
	}
	if dep.UID != ref.UID {
		return w, nil
	}
	w.Deployment = dep
	for _, v := range rs.Spec.Template.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		pvc := &corev1.PersistentVolumeClaim{}
		err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: v.PersistentVolumeClaim.ClaimName}, pvc)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return w, err
		}
		if w.Claims == nil {
			w.Claims = map[string]*corev1.PersistentVolumeClaim{}
		}
		w.Claims[pvc.Name] = pvc
	}
	return w, nil
}
