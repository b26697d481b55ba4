package nodedrain

// What becomes of a drain's replacements once their pods no longer wait on
// them: handed over to the ReplicaSet when the pod left (the replacement
// then counts as one of its pods), removed when the pod stays (a cancel),
// left in place and reported when removing it is refused until
// timeouts.cancel.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/index"
	"github.com/vacate-dev/vacate/internal/eviction"
	"github.com/vacate-dev/vacate/internal/surge"
)

// replacements is the stage that tends the drain's replacements whose
// pods no longer wait on them (tendSurges), before the pods' next steps
// are taken; how many are not done yet keeps the drain from finishing
// (evict).
func (r *Reconciler) replacements(ctx context.Context, s *scope) (reconcile.Result, error) {
	n, err := r.tendSurges(ctx, s, s.plan.Evicting(), false)
	s.replacing = n
	return reconcile.Result{}, err
}

// tendSurges carries the drain's replacements whose pods no longer wait
// on them to their end: handed over to their ReplicaSet once their pod
// has left, removed when it stays (on cancel, cancel is set: every
// replacement whose pod is still here is removed). It returns how many
// replacements are not done yet.
func (r *Reconciler) tendSurges(ctx context.Context, s *scope, evicting map[types.UID]bool, cancel bool) (int, error) {
	sp, err := r.surges(ctx, s)
	if err != nil {
		return 0, err
	}
	if err := r.settleRecords(ctx, s, sp); err != nil {
		return 0, err
	}
	pending := 0
	for uid, rep := range sp.byPod {
		if !cancel && evicting[types.UID(uid)] {
			pending++ // its pod waits on it, or is on its way out
			continue
		}
		old := &corev1.Pod{}
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: rep.Namespace, Name: rep.Annotations[surge.AnnotationPod]}, old)
		if err != nil && !apierrors.IsNotFound(err) {
			return 0, err
		}
		here := err == nil && string(old.UID) == uid && old.DeletionTimestamp.IsZero()
		key := rep.Namespace + "/" + rep.Annotations[surge.AnnotationPod]
		switch {
		case !rep.DeletionTimestamp.IsZero():
			pending++
		case surge.Adopted(rep):
			if err := r.releaseReplacement(ctx, rep); err != nil {
				return 0, err
			}
			s.setSurgeOf(key, uid, rep.Name, v1alpha1.SurgeHandedOver, "pod left; its ReplicaSet adopted replacement "+rep.Name)
		case rep.Labels[surge.HashLabel] != "":
			pending++ // handed over; its ReplicaSet adopts it next
			s.recheckIn(time.Second)
		case !here && surge.Ready(rep):
			if err := r.handOver(ctx, rep); err != nil {
				return 0, err
			}
			s.log.Info("surge: replacement handed over", "pod", key, "replacement", rep.Name)
			pending++
			s.recheckIn(time.Second)
		default:
			why := "the drain was cancelled"
			switch {
			case !here:
				why = "the pod left before its replacement was Ready; its ReplicaSet replaces it"
			case !cancel:
				why = "the pod no longer leaves"
			}
			pending++
			if removed, err := r.removeReplacement(ctx, s, rep); err != nil || !removed {
				if err != nil {
					return 0, err
				}
				continue
			}
			s.log.Info("surge: replacement removed", "pod", key, "replacement", rep.Name, "why", why)
			s.setSurgeOf(key, uid, rep.Name, v1alpha1.SurgeCancelled, "replacement "+rep.Name+" removed: "+why)
		}
	}
	return pending, nil
}

// settleRecords ends the status records of surges whose replacement no
// longer carries the drain's labels: released after its ReplicaSet adopted
// it by a pass whose status write was lost (HandedOver), or gone.
func (r *Reconciler) settleRecords(ctx context.Context, s *scope, sp *surgePass) error {
	for i := range s.drain.Status.Surges {
		rec := s.drain.Status.Surges[i]
		if rec.Phase != v1alpha1.SurgeStarting && rec.Phase != v1alpha1.SurgeReady || rec.Replacement == "" || sp.byPod[rec.PodUID] != nil {
			continue
		}
		ns, _, _ := strings.Cut(rec.Pod, "/")
		rep := &corev1.Pod{}
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: rec.Replacement}, rep)
		switch {
		case apierrors.IsNotFound(err):
			if s.now.Sub(rec.Since.Time) > cacheGrace { // not one just created that the cache has yet to show
				s.setSurgeOf(rec.Pod, rec.PodUID, rec.Replacement, v1alpha1.SurgeCancelled, "replacement "+rec.Replacement+" is gone")
			}
		case err != nil:
			return err
		case surge.Adopted(rep) && rep.Labels[surge.LabelOf] == "":
			s.setSurgeOf(rec.Pod, rec.PodUID, rec.Replacement, v1alpha1.SurgeHandedOver, "pod left; its ReplicaSet adopted replacement "+rep.Name)
		}
	}
	return nil
}

// handOverNow hands the evicted pod's replacement over as soon as the
// eviction is accepted, not a pass later: the ReplicaSet replaces the pod
// at once, and the sooner it adopts the replacement, the likelier its own
// new pod is not Ready yet when it deletes one of the two (a not-Ready pod
// goes first). A failure is left to the next pass (tendSurges).
func (r *Reconciler) handOverNow(o eviction.Outcome) {
	ctx := context.Background()
	list := &corev1.PodList{}
	if err := r.Client.List(ctx, list, client.InNamespace(o.Pod.Namespace), client.MatchingFields{index.Surge: o.Node},
		client.MatchingLabels{surge.LabelOf: string(o.UID)}); err != nil || len(list.Items) == 0 {
		return
	}
	nd := &v1alpha1.NodeDrain{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: o.Node}, nd); err != nil { // a drain is named after its node
		return
	}
	// The pod this drain evicted, as the eviction queue knew it.
	evicted := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: o.Pod.Namespace, Name: o.Pod.Name, UID: o.UID},
		Spec: corev1.PodSpec{NodeName: nd.Spec.NodeName}}
	var rep *corev1.Pod
	for i := range list.Items {
		if surge.Mine(&list.Items[i], nd, evicted) {
			rep = &list.Items[i]
		}
	}
	if rep == nil || rep.Labels[surge.HashLabel] != "" || !rep.DeletionTimestamp.IsZero() || !surge.Ready(rep) {
		return
	}
	if err := r.handOver(ctx, rep); err != nil {
		log.FromContext(ctx).Info("surge: handing the replacement over failed; the next pass tries again", "replacement", klog.KObj(rep), "error", err.Error())
	}
}

// handOver gives the replacement its ReplicaSet's pod-template-hash, and
// drops the drain's owner reference in the same patch (the NodeDrain may be
// deleted before the ReplicaSet adopts it; the garbage collector must not
// take it then). The patch holds the replacement's resourceVersion.
func (r *Reconciler) handOver(ctx context.Context, rep *corev1.Pod) error {
	rs := &appsv1.ReplicaSet{}
	err := r.fresh().Get(ctx, types.NamespacedName{Namespace: rep.Namespace, Name: rep.Annotations[surge.AnnotationReplicaSet]}, rs)
	if apierrors.IsNotFound(err) {
		_, err := r.removeReplacement(ctx, nil, rep) // its ReplicaSet is gone: a new revision's pods serve
		return err
	}
	if err != nil {
		return err
	}
	hash := rs.Spec.Template.Labels[surge.HashLabel]
	if hash == "" || rs.Spec.Selector == nil || rs.Spec.Selector.MatchLabels[surge.HashLabel] != hash {
		return fmt.Errorf("ReplicaSet %s/%s has no %s to hand replacement %s over with", rs.Namespace, rs.Name, surge.HashLabel, rep.Name)
	}
	// The ReplicaSet may have replaced the pod already: adopting the
	// replacement too, it has one pod over its replicas, and deletes one.
	// A not-Ready pod goes first; between two Ready ones, the lower
	// deletion cost: its own new pod, not the replacement that serves.
	return r.patchReplacement(ctx, rep, map[string]any{
		"labels":          map[string]any{surge.HashLabel: hash},
		"annotations":     map[string]any{surge.DeletionCost: surge.KeepCost},
		"ownerReferences": withoutDrain(rep.OwnerReferences),
	})
}

// releaseReplacement removes vacate's labels and annotations from a
// replacement its ReplicaSet adopted, and gives it back its template's
// deletion cost: it is one of the ReplicaSet's pods.
func (r *Reconciler) releaseReplacement(ctx context.Context, rep *corev1.Pod) error {
	var cost any // the template's, kept in the replacement's annotation
	if c, ok := rep.Annotations[surge.AnnotationCost]; ok && c != "" {
		cost = c
	}
	return r.patchReplacement(ctx, rep, map[string]any{
		"labels": map[string]any{surge.LabelOf: nil, surge.LabelDrain: nil},
		"annotations": map[string]any{surge.AnnotationPod: nil, surge.AnnotationReplicaSet: nil,
			surge.AnnotationDeployment: nil, surge.AnnotationCost: nil, surge.DeletionCost: cost},
		"ownerReferences": withoutDrain(rep.OwnerReferences),
	})
}

// patchReplacement merge-patches a replacement's metadata, holding its
// resourceVersion and UID.
func (r *Reconciler) patchReplacement(ctx context.Context, rep *corev1.Pod, meta map[string]any) error {
	meta["resourceVersion"], meta["uid"] = rep.ResourceVersion, string(rep.UID)
	data, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	target := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: rep.Namespace, Name: rep.Name}}
	if err := r.Client.Patch(ctx, target, client.RawPatch(types.MergePatchType, data)); err != nil {
		return fmt.Errorf("patching replacement %s/%s: %w", rep.Namespace, rep.Name, err)
	}
	return nil
}

// withoutDrain is a pod's owner references without the NodeDrain's (a
// merge patch replaces the whole list).
func withoutDrain(refs []metav1.OwnerReference) []metav1.OwnerReference {
	out := []metav1.OwnerReference{}
	for _, ref := range refs {
		if ref.Kind != "NodeDrain" || !strings.HasPrefix(ref.APIVersion, v1alpha1.GroupVersion.Group+"/") {
			out = append(out, ref)
		}
	}
	return out
}

// removeReplacement evicts a replacement, by its UID: vacate-controller
// may not delete pods (RBAC), and the eviction API lets a pod that is not
// Ready go while its PDB keeps its healthy pods. A refusal by the API
// server (its PDB: 429; a policy) leaves it for a later pass (removed is
// false; s, when set, rechecks soon and keeps the refusal's message for
// an undo that gives up: leaveReplacements).
func (r *Reconciler) removeReplacement(ctx context.Context, s *scope, rep *corev1.Pod) (removed bool, err error) {
	ev := &policyv1.Eviction{DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &rep.UID}}}
	err = r.Client.SubResource("eviction").Create(ctx, rep, ev)
	var status apierrors.APIStatus
	switch {
	case err == nil, apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return true, nil
	case errors.As(err, &status) && ctx.Err() == nil:
		if s != nil {
			s.log.Info("surge: removing a replacement was refused; trying again", "replacement", klog.KObj(rep), "why", err.Error())
			s.recheckIn(gateRetry)
			if s.surge != nil {
				s.surge.refused[rep.UID] = apiMessage(err)
			}
		}
		return false, nil
	}
	return false, fmt.Errorf("removing replacement %s/%s: %w", rep.Namespace, rep.Name, err)
}

// leaveReplacements ends an undo's wait for the drain's replacements once
// timeouts.cancel has passed (limit): one whose removal is still refused
// (its PodDisruptionBudget counts on it, or a policy keeps it) is left in
// place, no longer vacate's: its labels and the drain's owner reference are
// removed, so that the garbage collector does not delete it with the
// drain, past its PodDisruptionBudget, and no later drain takes it for a
// replacement. Each is reported (a Warning event, the log, its record in
// status.surges, and leftMessage for the drain's condition). One handed
// over to its ReplicaSet and not yet adopted loses vacate's labels and
// stays the ReplicaSet's to adopt; one terminating is left to go.
func (r *Reconciler) leaveReplacements(ctx context.Context, s *scope, limit time.Duration) error {
	sp, err := r.surges(ctx, s)
	if err != nil {
		return err
	}
	for uid, rep := range sp.byPod {
		if !rep.DeletionTimestamp.IsZero() {
			continue
		}
		if err := r.releaseReplacement(ctx, rep); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		if rep.Labels[surge.HashLabel] != "" {
			continue // handed over: its ReplicaSet adopts it
		}
		key := rep.Namespace + "/" + rep.Name
		why := sp.refused[rep.UID]
		if why == "" {
			why = "not removed yet"
		}
		msg := fmt.Sprintf("replacement %s left in place: removing it through the Eviction API was refused until timeouts.cancel (%s) passed (%s); "+
			"it no longer carries vacate's labels: delete it once its Deployment can spare it (kubectl delete pod -n %s %s)",
			key, limit, why, rep.Namespace, rep.Name)
		s.log.Info("surge: undo leaves a replacement in place", "replacement", klog.KObj(rep), "why", why)
		r.podWarning(s.drain, rep, v1alpha1.EventSurgeLeft, "Restore", "%s", msg)
		pod := rep.Namespace + "/" + rep.Annotations[surge.AnnotationPod]
		s.setSurgeOf(pod, uid, rep.Name, v1alpha1.SurgeCancelled, msg)
		sp.left = append(sp.left, key)
	}
	sort.Strings(sp.left)
	return nil
}
