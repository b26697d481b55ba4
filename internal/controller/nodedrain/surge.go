package nodedrain

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/index"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/metrics"
	"github.com/vacate-dev/vacate/internal/serving"
	"github.com/vacate-dev/vacate/internal/surge"
)

// The pod create and patch a surge needs are the ClusterRole
// vacate-controller-surge (config/rbac/surge-role.yaml), bound only where a
// DrainPolicy surges: without it, a replacement's create is refused and the
// pod is blocked (SurgeFailed) saying so.
// +kubebuilder:rbac:groups=apps,resources=replicasets;deployments,verbs=get
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get

// Surge drains (docs/policies.md, "Surge"; the rules are internal/surge).
// A pod the policy surges, that a PodDisruptionBudget keeps on the node
// (or that is its Deployment's only ready pod, without one), is evicted
// only once a replacement is Ready elsewhere:
//
//  1. the replacement is created from the pod's ReplicaSet template,
//     without pod-template-hash, labelled with the pod's UID and the
//     drain: the pod is blocked (Surge) meanwhile;
//  2. once it is Ready (and, for an endpoint-aware pod, ready in each of
//     the pod's Services), the pod's eviction takes its usual path (the
//     PodDisruptionBudget now counts one more healthy pod);
//  3. once the pod has left (terminating or gone), the replacement gets the
//     ReplicaSet's pod-template-hash and loses the drain's owner reference
//     in one patch: its ReplicaSet adopts it, and the drain then removes
//     its own labels (HandedOver).
//
// A replacement not Ready within surge.readyTimeout is removed (Failed) and
// tried again after as long; one whose create is refused (a ResourceQuota,
// an admission policy, RBAC) blocks its pod alone (Failed, with the API's
// message) and is tried again after surgeCreateRetry; on cancel, or when
// its pod no longer leaves, it is removed (Cancelled), and an undo that
// cannot remove it by timeouts.cancel leaves it in place, no longer
// vacate's (leaveReplacements). The replacement pods are the state a
// restarted controller reads back (index.Surge), each checked to be the
// drain's own (surge.Mine: the labels alone prove nothing); status.surges
// records what happened.

// surgeRecheck bounds the wait for the next pass while a surge waits: a
// replacement's EndpointSlices may be ones no drain is woken by.
const surgeRecheck = 2 * time.Second

// surgeCreateRetry bounds the wait before a refused create is tried again
// (surge.readyTimeout, if shorter).
const surgeCreateRetry = 30 * time.Second

// surgeRefusals remember the last refused create of each pod's
// replacement: the drain's status records it too, but a status write that
// conflicts loses it, and the create must not be tried again before its
// time (surgeFailedWaits). A drain that stops forgets its node's.
type surgeRefusals struct {
	podMemory[surgeRefusal]
}

// surgeRefusal is a refused create of a pod's replacement.
type surgeRefusal struct {
	at  time.Time
	msg string
}

// refuse records a refused create of the pod's replacement.
func (f *surgeRefusals) refuse(pod *corev1.Pod, at time.Time, msg string) {
	f.update(pod.UID, pod.Spec.NodeName, func(r *surgeRefusal) bool {
		*r = surgeRefusal{at: at, msg: msg}
		return true
	})
}

// surgePass is what a pass knows of the drain's surges.
type surgePass struct {
	// byPod are the drain's replacements, by the UID of the pod each
	// replaces.
	byPod map[string]*corev1.Pod
	// workloads are the ReplicaSets and Deployments read this pass, by
	// namespace/ReplicaSet.
	workloads map[string]surge.Workload
	// refused are the API's refusals of removing a replacement this pass,
	// by the replacement's UID; left names the replacements an undo left
	// (leaveReplacements).
	refused map[types.UID]string
	left    []string
}

// leftMessage says which replacements an undo left in place; "" if none.
func (p *surgePass) leftMessage() string {
	if p == nil || len(p.left) == 0 {
		return ""
	}
	return "left replacement(s) " + strings.Join(p.left, ", ") + " in place: their removal was refused until timeouts.cancel passed; " +
		"they are no longer vacate's: delete them once their Deployment can spare them"
}

// surges reads the drain's replacements from the cache, once per pass.
func (r *Reconciler) surges(ctx context.Context, s *scope) (*surgePass, error) {
	if s.surge != nil {
		return s.surge, nil
	}
	list := &corev1.PodList{}
	if err := r.Client.List(ctx, list, client.MatchingFields{index.Surge: s.drain.Name}); err != nil {
		return nil, fmt.Errorf("listing the replacements of drain %s: %w", s.drain.Name, err)
	}
	p := &surgePass{byPod: map[string]*corev1.Pod{}, workloads: map[string]surge.Workload{}, refused: map[types.UID]string{}}
	for i := range list.Items {
		rep := &list.Items[i]
		mine, err := r.mine(ctx, s.drain, rep)
		if err != nil {
			return nil, err
		}
		if !mine {
			s.log.V(1).Info("surge: ignoring a pod that carries the drain's labels but is not its replacement", "pod", klog.KObj(rep))
			continue
		}
		p.byPod[surge.Of(rep)] = rep
	}
	s.surge = p
	return p, nil
}

// mine says whether rep, which carries the drain's labels, is the drain's
// replacement (surge.Mine), reading the pod it names as the one it
// replaces from the cache.
func (r *Reconciler) mine(ctx context.Context, nd *v1alpha1.NodeDrain, rep *corev1.Pod) (bool, error) {
	var replaced *corev1.Pod
	if ref := surge.DrainRef(rep); ref != nil && ref.UID == nd.UID && rep.Annotations[surge.AnnotationPod] != "" {
		p := &corev1.Pod{}
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: rep.Namespace, Name: rep.Annotations[surge.AnnotationPod]}, p)
		switch {
		case err == nil:
			replaced = p
		case !apierrors.IsNotFound(err):
			return false, err
		}
	}
	return surge.Mine(rep, nd, replaced), nil
}

// broughtUp says whether rep carries the owner reference of a NodeDrain
// that exists (this one, or another drain's, read from the cache): a
// replacement that counts against its Deployment's maxSurge.
func (r *Reconciler) broughtUp(ctx context.Context, nd *v1alpha1.NodeDrain, rep *corev1.Pod) (bool, error) {
	ref := surge.DrainRef(rep)
	switch {
	case ref == nil:
		return false, nil
	case ref.UID == nd.UID:
		return true, nil
	}
	other := &v1alpha1.NodeDrain{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: ref.Name}, other); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return other.UID == ref.UID, nil
}

// replacementsOf lists the namespace's replacements from the API server.
func (r *Reconciler) replacementsOf(ctx context.Context, namespace string) ([]corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := r.fresh().List(ctx, list, client.InNamespace(namespace), client.HasLabels{surge.LabelOf}); err != nil {
		return nil, fmt.Errorf("listing the replacements in namespace %s: %w", namespace, err)
	}
	return list.Items, nil
}

// surgeFacts are what a pass knows of one pod's surge, read from the
// cache: its replacement, or its ReplicaSet adopting another, or whether
// the policy wants one (surge.Consider).
type surgeFacts struct {
	// rep is the pod's replacement; serves and why say whether it serves
	// (and why not), known once rep is not being removed.
	rep    *corev1.Pod
	serves bool
	why    string
	// replicaSet is the pod's ReplicaSet; adopting names a replacement
	// handed over to it and not adopted yet.
	replicaSet, adopting string
	// need: the policy brings up a replacement before the pod goes, for
	// reason; workload is the pod's ReplicaSet and Deployment.
	need     bool
	reason   string
	workload surge.Workload
}

// waits says whether the pod's eviction waits on its surge.
func (f surgeFacts) waits() bool { return f.rep != nil || f.adopting != "" || f.need }

// surgeFactsOf reads what the pass knows of the pod's surge. It changes
// nothing; a replacement that serves is recorded (SurgeReady).
func (r *Reconciler) surgeFactsOf(ctx context.Context, s *scope, d drain.Decision) (surgeFacts, error) {
	mode := s.policy.Surge
	if mode == "" || mode == v1alpha1.SurgeNone {
		return surgeFacts{}, nil
	}
	ref := metav1.GetControllerOfNoCopy(d.Pod)
	if ref == nil || ref.Kind != "ReplicaSet" {
		return surgeFacts{}, nil
	}
	sp, err := r.surges(ctx, s)
	if err != nil {
		return surgeFacts{}, err
	}
	f := surgeFacts{replicaSet: ref.Name}
	if rep := sp.byPod[string(d.Pod.UID)]; rep != nil {
		f.rep = rep
		if rep.DeletionTimestamp.IsZero() {
			f.serves, f.why, err = r.serves(ctx, d.Pod, rep)
		}
		if f.serves {
			s.surgeReady(d, rep)
		}
		return f, err
	}
	// A replacement handed over to the pod's ReplicaSet and not adopted
	// yet: the ReplicaSet may have replaced its pod too, and has one pod
	// over its replicas until it adopts the replacement and deletes one. The
	// PodDisruptionBudget counts that extra pod meanwhile; the pod waits for
	// the ReplicaSet to settle before its eviction is weighed.
	for _, rep := range sp.byPod {
		if rep.Annotations[surge.AnnotationReplicaSet] == ref.Name && rep.Labels[surge.HashLabel] != "" && !surge.Adopted(rep) {
			f.adopting = rep.Name
			return f, nil
		}
	}
	honoured := s.honoured[d.Pod.Namespace] // read with the plan (honouredNamespaces)
	if ok, _ := surge.Wanted(mode, d.Pod, honoured); !ok {
		return f, nil
	}
	if f.workload, err = r.workload(ctx, sp, d.Pod); err != nil {
		return f, err
	}
	f.need, f.reason = surge.Consider(mode, honoured, d.Pod, len(d.PDBs), d.PDBBlocked, f.workload)
	return f, nil
}

// surgePods is the stage that takes the Surge steps: each such pod waits
// for its replacement, or its ReplicaSet adopting one, or has one brought
// up (surge).
func (r *Reconciler) surgePods(ctx context.Context, s *scope) (reconcile.Result, error) {
	for _, p := range s.steps {
		if p.step != drain.StepSurge {
			continue
		}
		if err := r.surge(ctx, s, p.Decision, p.surge); err != nil {
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{}, nil
}

// surge carries out a pod's Surge step: it waits for the replacement the
// pod has, or for its ReplicaSet to adopt one, or brings one up; the pod's
// blocker says why. A replacement found around the cache that serves
// already lets the pod go on at the next pass, once the cache shows it.
func (r *Reconciler) surge(ctx context.Context, s *scope, d drain.Decision, f surgeFacts) error {
	switch {
	case f.rep != nil:
		return r.awaitReplacement(ctx, s, d, f.rep, f.serves, f.why)
	case f.adopting != "":
		s.surgeBlocker(d, v1alpha1.BlockerSurge, s.now, "waiting for ReplicaSet "+f.replicaSet+" to adopt replacement "+f.adopting)
		s.recheckIn(500 * time.Millisecond)
		return nil
	}
	if r.surgeFailedWaits(s, d) {
		return nil
	}
	// At most maxSurge replacements of one Deployment at once, the
	// Deployment's own idea of extra pods, and one per pod: counted around
	// the cache, which may not show a replacement created an instant ago.
	up, err := r.replacementsOf(ctx, d.Pod.Namespace)
	if err != nil {
		return err
	}
	busy := 0
	for i := range up {
		switch {
		case surge.Mine(&up[i], s.drain, d.Pod):
			serves, why, err := r.serves(ctx, d.Pod, &up[i])
			if err != nil {
				return err
			}
			return r.awaitReplacement(ctx, s, d, &up[i], serves, why)
		case up[i].Annotations[surge.AnnotationDeployment] == f.workload.Deployment.Name && up[i].Labels[surge.HashLabel] == "":
			counts, err := r.broughtUp(ctx, s.drain, &up[i])
			if err != nil {
				return err
			}
			if counts {
				busy++
			}
		}
	}
	if allowed := surge.MaxSurge(f.workload.Deployment); busy >= allowed {
		s.surgeBlocker(d, v1alpha1.BlockerSurge, s.now, fmt.Sprintf("%s; waiting for room: Deployment %s allows %d extra pod(s) (maxSurge) and %d replacement(s) are up",
			f.reason, f.workload.Deployment.Name, allowed, busy))
		s.recheckIn(surgeRecheck)
		return nil
	}
	return r.createReplacement(ctx, s, d, f)
}

// createReplacement brings up the pod's replacement, or records why the
// API server refused it.
func (r *Reconciler) createReplacement(ctx context.Context, s *scope, d drain.Decision, f surgeFacts) error {
	rep := surge.Replacement(d.Pod, f.workload, s.drain)
	if err := r.Client.Create(ctx, rep); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("creating a replacement for pod %s: %w", d.Key(), err)
		}
		r.createRefused(ctx, s, d, err)
		return nil
	}
	s.log.Info("surge: replacement created", "pod", d.Key(), "replacement", rep.Name, "why", f.reason)
	r.surgeRefused.forget(d.Pod.UID) // one was created
	s.surge.byPod[string(d.Pod.UID)] = rep
	r.surgeStep(s, d, rep.Name, v1alpha1.SurgeStarting, corev1.EventTypeNormal, v1alpha1.EventSurgeStarted, v1alpha1.BlockerSurge,
		fmt.Sprintf("replacement %s created (%s)", rep.Name, f.reason), surgeRecheck)
	return nil
}

// surgeFailedWaits says whether the pod's surge failed (its replacement
// refused, or not Ready in time) too recently to try again; its blocker
// says when it will be. A refused create is remembered by the controller
// too: a status write that conflicted may have lost its record, which is
// then written again, since it was.
func (r *Reconciler) surgeFailedWaits(s *scope, d drain.Decision) bool {
	rec := surgeRecord(s.drain, string(d.Pod.UID))
	if refused := r.surgeRefused.get(d.Pod.UID); !refused.at.IsZero() && (rec == nil || rec.Phase != v1alpha1.SurgeFailed) {
		s.setSurge(d, "", v1alpha1.SurgeFailed, refused.msg)
		rec = surgeRecord(s.drain, string(d.Pod.UID))
		rec.Since = metav1.NewTime(refused.at)
		nd, pod := s.drain, d.Pod
		s.podWarning(nd, pod, v1alpha1.EventSurgeFailed, "Surge", refused.msg)
	}
	if rec == nil || rec.Phase != v1alpha1.SurgeFailed {
		return false
	}
	timeout := s.policy.SurgeReadyTimeout
	if rec.Replacement == "" { // its create was refused
		timeout = min(timeout, surgeCreateRetry)
	}
	left := timeout - s.now.Sub(rec.Since.Time)
	if left <= 0 {
		return false
	}
	s.surgeBlocker(d, v1alpha1.BlockerSurgeFailed, rec.Since.Time,
		fmt.Sprintf("%s; trying again in %s", rec.Message, left.Round(time.Second)))
	s.recheckIn(left)
	return true
}

// createRefused makes a refused create of the pod's replacement its
// blocker (SurgeFailed, with the API server's message), tried again after
// surgeCreateRetry: the drain's other pods go on. When RBAC refuses it,
// the message names the role to bind.
func (r *Reconciler) createRefused(ctx context.Context, s *scope, d drain.Decision, err error) {
	msg := "vacate could not create its replacement: " + apiMessage(err)
	if apierrors.IsForbidden(err) {
		if may, rerr := r.mayCreatePods(ctx, d.Pod.Namespace); rerr == nil && !may {
			msg += "; vacate-controller may not create pods: bind the ClusterRole vacate-controller-surge " +
				"('vacate manifests surge | kubectl apply -f -', or the Helm chart's controller.surge: true)"
		}
	}
	r.surgeRefused.refuse(d.Pod, s.now, msg)
	retry := min(s.policy.SurgeReadyTimeout, surgeCreateRetry)
	s.log.Info("surge: creating a replacement was refused", "pod", d.Key(), "error", err.Error(), "retryIn", retry)
	r.surgeStep(s, d, "", v1alpha1.SurgeFailed, corev1.EventTypeWarning, v1alpha1.EventSurgeFailed, v1alpha1.BlockerSurgeFailed, msg, retry)
	s.surgeBlocker(d, v1alpha1.BlockerSurgeFailed, s.now, fmt.Sprintf("%s; trying again in %s", msg, retry))
}

// apiMessage is the API server's own message of an error (the Status it
// returned), or the error.
func apiMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Message != "" {
		return status.Status().Message
	}
	return err.Error()
}

// mayCreatePods asks the API server (a SelfSubjectAccessReview, which any
// authenticated user may create) whether the controller may create pods in
// the namespace.
func (r *Reconciler) mayCreatePods(ctx context.Context, namespace string) (bool, error) {
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: "create", Resource: "pods"},
	}}
	if err := r.Client.Create(ctx, review); err != nil {
		return false, fmt.Errorf("asking whether the controller may create pods: %w", err)
	}
	return review.Status.Allowed, nil
}

// surgeStep records a surge's new phase, its event once the status
// recording it is written, and the pod's blocker, saying msg.
func (r *Reconciler) surgeStep(s *scope, d drain.Decision, replacement, phase, eventType, event, blocker, msg string, recheck time.Duration) {
	s.setSurge(d, replacement, phase, msg)
	nd, pod := s.drain, d.Pod
	if eventType == corev1.EventTypeWarning {
		s.podWarning(nd, pod, event, "Surge", msg)
	} else {
		s.podEvent(nd, pod, eventType, event, "Surge", "", msg)
	}
	s.surgeBlocker(d, blocker, s.now, msg)
	s.recheckIn(recheck)
}

// awaitReplacement: the pod's eviction goes ahead once its replacement
// serves; a replacement past surge.readyTimeout is removed.
func (r *Reconciler) awaitReplacement(ctx context.Context, s *scope, d drain.Decision, rep *corev1.Pod, serves bool, why string) error {
	if !rep.DeletionTimestamp.IsZero() {
		s.surgeBlocker(d, v1alpha1.BlockerSurge, s.now, "replacement "+rep.Name+" is being removed")
		s.recheckIn(surgeRecheck)
		return nil
	}
	if serves {
		s.surgeReady(d, rep)
		s.recheckIn(0)
		return nil
	}
	timeout := s.policy.SurgeReadyTimeout
	started := rep.CreationTimestamp.Time
	if rec := surgeRecord(s.drain, string(d.Pod.UID)); started.IsZero() && rec != nil {
		started = rec.Since.Time
	}
	if age := s.now.Sub(started); !started.IsZero() && age >= timeout {
		if removed, err := r.removeReplacement(ctx, s, rep); err != nil || !removed {
			s.surgeBlocker(d, v1alpha1.BlockerSurge, s.now, "replacement "+rep.Name+" is past surge.readyTimeout and being removed")
			return err
		}
		msg := fmt.Sprintf("replacement %s was not Ready within %s (surge.readyTimeout): %s; removed, the pod stays", rep.Name, timeout, why)
		s.log.Info("surge: replacement removed", "pod", d.Key(), "replacement", rep.Name, "why", why)
		r.surgeStep(s, d, rep.Name, v1alpha1.SurgeFailed, corev1.EventTypeWarning, v1alpha1.EventSurgeFailed, v1alpha1.BlockerSurgeFailed, msg, timeout)
		return nil
	}
	since := s.now
	if rec := surgeRecord(s.drain, string(d.Pod.UID)); rec != nil && rec.Phase == v1alpha1.SurgeStarting {
		since = rec.Since.Time
	}
	s.setSurge(d, rep.Name, v1alpha1.SurgeStarting, "replacement "+rep.Name+": "+why)
	s.surgeBlocker(d, v1alpha1.BlockerSurge, since, "replacement "+rep.Name+": "+why)
	s.recheckIn(surgeRecheck)
	return nil
}

// serves says whether the replacement is Ready and, when the pod it
// replaces is endpoint-aware, ready in each Service that lists that pod;
// if not, why not.
func (r *Reconciler) serves(ctx context.Context, pod, rep *corev1.Pod) (bool, string, error) {
	if !surge.Ready(rep) {
		return false, notReady(rep), nil
	}
	if !v1alpha1.ServingGated(pod) {
		return true, "", nil
	}
	mine, err := index.SlicesOfPod(ctx, r.Client, pod)
	if err != nil {
		return false, "", err
	}
	theirs, err := index.SlicesOfPod(ctx, r.Client, rep)
	if err != nil {
		return false, "", err
	}
	var missing []string
	for _, svc := range servicesOf(mine) {
		ready := slices.ContainsFunc(theirs, func(es discoveryv1.EndpointSlice) bool {
			return es.Labels[discoveryv1.LabelServiceName] == svc && !serving.Endpoints([]discoveryv1.EndpointSlice{es}, rep.UID).Updated()
		})
		if !ready {
			missing = append(missing, svc)
		}
	}
	if len(missing) > 0 {
		return false, "Ready, not yet ready in the EndpointSlices of Service(s) " + strings.Join(missing, ", "), nil
	}
	return true, "", nil
}

// servicesOf names the Services of these EndpointSlices, sorted.
func servicesOf(list []discoveryv1.EndpointSlice) []string {
	var out []string
	for _, es := range list {
		if svc := es.Labels[discoveryv1.LabelServiceName]; svc != "" && !slices.Contains(out, svc) {
			out = append(out, svc)
		}
	}
	sort.Strings(out)
	return out
}

// notReady says why a replacement is not Ready, for people.
func notReady(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
			msg := "not scheduled"
			if c.Message != "" {
				msg += ": " + c.Message
			}
			return msg + " (room on a node that is not draining?)"
		}
	}
	if p.Spec.NodeName == "" {
		return "not scheduled yet"
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Message != "" {
			return "on node " + p.Spec.NodeName + ", not Ready: " + c.Message
		}
	}
	return "on node " + p.Spec.NodeName + ", not Ready (its image, its readiness probe?)"
}

// workload reads the pod's ReplicaSet, its Deployment and the claims its
// template mounts, around the cache (they are not cached), once per pass.
func (r *Reconciler) workload(ctx context.Context, sp *surgePass, pod *corev1.Pod) (surge.Workload, error) {
	ref := metav1.GetControllerOfNoCopy(pod)
	key := pod.Namespace + "/" + ref.Name
	if w, ok := sp.workloads[key]; ok {
		return w, nil
	}
	w, err := surge.Read(ctx, r.fresh(), pod.Namespace, ref.Name)
	if err != nil {
		return w, err
	}
	sp.workloads[key] = w
	return w, nil
}

// surgeRecord is the drain's record of the pod's surge; nil if none.
func surgeRecord(nd *v1alpha1.NodeDrain, uid string) *v1alpha1.SurgeStatus {
	for i := range nd.Status.Surges {
		if nd.Status.Surges[i].PodUID == uid {
			return &nd.Status.Surges[i]
		}
	}
	return nil
}

// surgeReady records that the pod's replacement serves: the pod goes on.
func (s *scope) surgeReady(d drain.Decision, rep *corev1.Pod) {
	s.setSurge(d, rep.Name, v1alpha1.SurgeReady, "replacement "+rep.Name+" is Ready on node "+rep.Spec.NodeName)
}

// setSurge records the pod's surge in status.surges.
func (s *scope) setSurge(d drain.Decision, replacement, phase, msg string) {
	s.setSurgeOf(d.Key(), string(d.Pod.UID), replacement, phase, msg)
}

// setSurgeOf records a surge in status.surges; its since changes with
// its phase. At most v1alpha1.MaxSurges are kept: ended ones go first.
func (s *scope) setSurgeOf(pod, uid, replacement, phase, msg string) {
	st := &s.drain.Status
	rec := surgeRecord(s.drain, uid)
	if rec == nil {
		st.Surges = append(st.Surges, v1alpha1.SurgeStatus{Pod: pod, PodUID: uid})
		rec = &st.Surges[len(st.Surges)-1]
	}
	if rec.Phase != phase {
		rec.Since = metav1.NewTime(s.now)
		if phase != v1alpha1.SurgeReady {
			s.afterWrite(func() { metrics.Surges.WithLabelValues(phase).Inc() })
		}
	}
	rec.Replacement, rec.Phase, rec.Message = replacement, phase, truncate(msg, 1024)
	for len(st.Surges) > v1alpha1.MaxSurges {
		drop := 0
		for i, x := range st.Surges {
			if x.Phase == v1alpha1.SurgeHandedOver || x.Phase == v1alpha1.SurgeCancelled {
				drop = i
				break
			}
		}
		st.Surges = slices.Delete(st.Surges, drop, drop+1)
	}
}

// surgeBlocker sets the pod's blocker while it waits on its surge.
func (s *scope) surgeBlocker(d drain.Decision, reason string, since time.Time, detail string) {
	if s.surging == nil {
		s.surging = map[types.UID]v1alpha1.Blocker{}
	}
	holder := ""
	if ref := metav1.GetControllerOfNoCopy(d.Pod); ref != nil {
		holder = "ReplicaSet " + d.Pod.Namespace + "/" + ref.Name
	}
	s.surging[d.Pod.UID] = v1alpha1.Blocker{Pod: d.Key(), Reason: reason, Holder: holder, Since: metav1.NewTime(since),
		Detail: detail}
}
