package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/evacuationprovider"
	er "github.com/vacate-dev/vacate/internal/evictionrequest"
	"github.com/vacate-dev/vacate/internal/hold"
	"github.com/vacate-dev/vacate/internal/policy"
	"github.com/vacate-dev/vacate/internal/providers"
)

// +kubebuilder:rbac:groups=vacate.dev,resources=evacuations,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=vacate.dev,resources=evacuationproviders,verbs=get;list;watch;patch

// The EvacuationProviders of a requested pod. vacate never evicts a pod
// before the EvacuationProviders that protect it have moved its data, as a
// drain never does: those that select the pod (BeforeEviction, taking part
// in Maintenance drains), and every unfinished Evacuation that records it,
// whatever the selectors say now (a hold recorded stays). They are asked in
// vacate's responder turn, for a pod that declares it, and checked again in
// the evictor's turn and right before the eviction call (MayEvict), for
// every pod: a move undone after vacate's turn, or a pod that declares no
// responder of vacate's, is asked again there.
//
// A provider is asked what a Maintenance drain of the pod's node would ask:
// the provider protocol is per node (pkg/evacuation: Evacuate(node),
// Cancel(node)), so there is one Evacuation per node and provider, whoever
// asks, under the drains' name:
//   - none: the pass creates one for the pod's Eviction, labelled
//     vacate.dev/eviction with the Eviction's UID, which is also its
//     drainUID (Evacuation.ForEviction: the Eviction owns it);
//   - another Eviction's: the pod joins it (its protectedPods grow), and
//     the provider answers again for the new generation; when its owner
//     ends, it is handed over to an Eviction of another of its pods that
//     still runs (or taken over when its owner is gone), and undone only
//     by the last;
//   - a drain's (a drain of the node takes an Eviction's over): it counts
//     once it records the pod, and the drain undoes it;
//   - one being undone: the pass waits until it is gone.
// When its last Eviction ends (the pod evicted, or every requester gone),
// the Evacuation is undone (desired Cancel: the provider gives the node
// back, as when a drain is undone) and deleted once the provider confirms,
// never took it up, is gone, the node is gone (what moved stays moved), or
// the node's policy's timeouts.cancel passed since the cancel was asked.

// AnnotationCancelAsked on an Evacuation of an Eviction's records when the
// coordinator asked for its undo: timeouts.cancel counts from there.
const AnnotationCancelAsked = "vacate.dev/cancel-asked"

// asksForEviction reports whether vacate asks the provider for a pod's
// eviction: it takes part in Maintenance drains and is BeforeEviction (an
// AfterEviction provider works once a drained node's pods are gone).
func asksForEviction(p *v1alpha1.EvacuationProvider) bool {
	return providers.TakesPart(p, v1alpha1.ModeMaintenance) && providers.Stage(p) == v1alpha1.StageBeforeEviction
}

// askProviders asks every provider that protects the pod, and says whether
// all are done with it, with a message per provider. An error the pass
// cannot get past is a message too: the turn stays (its heartbeat goes on)
// and the pod stays.
func (r *Reconciler) askProviders(ctx context.Context, ev *lifecyclev1alpha1.Eviction, pod *corev1.Pod, node *corev1.Node) (bool, []string) {
	done, msgs, err := r.askEach(ctx, ev, pod, node)
	if err != nil {
		return false, append(msgs, "vacate cannot tell whether the EvacuationProviders are done with the pod: "+err.Error())
	}
	return done, msgs
}

// askEach is askProviders, with the first error that stops it.
func (r *Reconciler) askEach(ctx context.Context, ev *lifecyclev1alpha1.Eviction, pod *corev1.Pod, node *corev1.Node) (bool, []string, error) {
	selecting, err := r.selecting(ctx, pod)
	if err != nil {
		return false, nil, err
	}
	done, msgs := true, []string(nil)
	for _, p := range selecting {
		pdone, msg, err := r.askProvider(ctx, ev, pod, node, p)
		if err != nil {
			return false, msgs, err
		}
		done = done && pdone
		msgs = append(msgs, msg)
	}
	recorded, err := r.recording(ctx, pod, selecting)
	if err != nil {
		return false, msgs, err
	}
	for _, evac := range recorded {
		ok, why := r.judge(ctx, evac)
		done = done && ok
		msgs = append(msgs, "Evacuation "+evac.Name+" records the pod (its provider "+evac.Spec.Provider+" is not asked for it now): "+why)
	}
	return done, msgs, nil
}

// selecting are the providers vacate asks for the pod (asksForEviction)
// that select it. A provider whose selectors cannot be read fails the
// pass: it might select the pod.
func (r *Reconciler) selecting(ctx context.Context, pod *corev1.Pod) ([]*v1alpha1.EvacuationProvider, error) {
	list := &v1alpha1.EvacuationProviderList{}
	if err := r.Client.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing EvacuationProviders: %w", err)
	}
	labelsOf := policy.NamespaceLabelsFrom(ctx, r.Client)
	var out []*v1alpha1.EvacuationProvider
	var errs []error
	for i := range list.Items {
		p := &list.Items[i]
		if !asksForEviction(p) {
			continue
		}
		ok, err := providers.Selects(p, pod, labelsOf)
		switch {
		case err != nil:
			errs = append(errs, err)
		case ok:
			out = append(out, p)
		}
	}
	return out, errors.Join(errs...)
}

// recording are the unfinished BeforeEviction Evacuations that record the
// pod, of providers not in asked: a provider edited, or the pod relabelled,
// since it was recorded (its hold stays, as in a drain).
func (r *Reconciler) recording(ctx context.Context, pod *corev1.Pod, asked []*v1alpha1.EvacuationProvider) ([]*v1alpha1.Evacuation, error) {
	list := &v1alpha1.EvacuationList{}
	if err := r.Client.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing Evacuations: %w", err)
	}
	var out []*v1alpha1.Evacuation
	for i := range list.Items {
		evac := &list.Items[i]
		if evac.Spec.NodeName != pod.Spec.NodeName || !records(evac, pod) || providers.StageOf(evac) != v1alpha1.StageBeforeEviction ||
			slices.ContainsFunc(asked, func(p *v1alpha1.EvacuationProvider) bool { return p.Name == evac.Spec.Provider }) {
			continue
		}
		if evac.Spec.Desired == v1alpha1.DesiredEvacuate && evac.DeletionTimestamp.IsZero() {
			out = append(out, evac)
		}
	}
	return out, nil
}

// records reports whether the Evacuation records the pod (by UID).
func records(evac *v1alpha1.Evacuation, pod *corev1.Pod) bool {
	return slices.ContainsFunc(evac.Spec.ProtectedPods, func(pp v1alpha1.ProtectedPod) bool { return pp.UID == string(pod.UID) })
}

// judge says whether an Evacuation is done (Completed for its current
// generation, or released by a person as for a drain), and why not.
func (r *Reconciler) judge(ctx context.Context, evac *v1alpha1.Evacuation) (bool, string) {
	if rel := evac.Spec.Release; rel != nil {
		return true, "released by " + rel.By + ": " + rel.Reason
	}
	p := &v1alpha1.EvacuationProvider{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: evac.Spec.Provider}, p); err != nil {
		p = nil
	}
	done, why, _ := hold.Judge(evac, p, r.Clock.Now())
	return done, why
}

// askProvider asks one provider for the pod (the rules above) and says
// whether it is done with it.
func (r *Reconciler) askProvider(ctx context.Context, ev *lifecyclev1alpha1.Eviction, pod *corev1.Pod, node *corev1.Node, p *v1alpha1.EvacuationProvider) (bool, string, error) {
	name := v1alpha1.EvacuationName(node.Name, p.Name)
	have := &v1alpha1.Evacuation{}
	switch err := r.Client.Get(ctx, types.NamespacedName{Name: name}, have); {
	case apierrors.IsNotFound(err):
		if !p.DeletionTimestamp.IsZero() {
			return true, "EvacuationProvider " + p.Name + " is being deleted: it is asked nothing new", nil
		}
		return false, "EvacuationProvider " + p.Name + ": asked (Evacuation " + name + ")", r.createEvacuation(ctx, ev, pod, node, p, name)
	case err != nil:
		return false, "", fmt.Errorf("reading Evacuation %s: %w", name, err)
	}
	prefix := "EvacuationProvider " + p.Name + ", Evacuation " + name + ": "
	mine := have.ForEviction() && have.Spec.DrainUID == string(ev.UID)
	switch {
	case mine && (!have.DeletionTimestamp.IsZero() || have.Spec.Desired == v1alpha1.DesiredCancel):
		// Someone deleted it or asked for its undo meanwhile: it is undone
		// as at the end, then asked again.
		if _, err := r.undoEvacuation(ctx, ev, have); err != nil {
			return false, "", err
		}
		return false, prefix + "being undone (deleted or cancelled by someone else); asked again once it is gone", nil
	case !have.DeletionTimestamp.IsZero() || have.Spec.Desired == v1alpha1.DesiredCancel:
		return false, prefix + "being undone; asked again once it is gone", nil
	case have.ForEviction() && !mine:
		if joined, err := r.join(ctx, ev, pod, have); err != nil || !joined {
			return false, prefix + "asked for another pod's eviction; this pod joins it", err
		}
	case !records(have, pod):
		return false, prefix + "asked by a drain of node " + node.Name + " for other pods; waiting until the drain records this one", nil
	}
	done, why := r.judge(ctx, have)
	if !have.ForEviction() {
		why = "asked by a drain of node " + node.Name + ": " + why
	}
	return done, prefix + why, nil
}

// join makes the pod one of those another Eviction's Evacuation protects
// (the provider then answers for the new generation), or, when that
// Eviction is gone, takes it over for the pod's own (an Evacuation nobody
// would undo otherwise). It reports whether the Evacuation records the pod
// as it was read.
func (r *Reconciler) join(ctx context.Context, ev *lifecyclev1alpha1.Eviction, pod *corev1.Pod, evac *v1alpha1.Evacuation) (bool, error) {
	owner, err := r.owner(ctx, evac)
	if err != nil {
		return false, err
	}
	if owner != nil && records(evac, pod) {
		return true, nil
	}
	patch := client.MergeFromWithOptions(evac.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if owner == nil {
		evac.Labels[v1alpha1.LabelEviction], evac.Spec.DrainUID = string(ev.UID), string(ev.UID)
		logf.FromContext(ctx).Info("taking over an Evacuation whose Eviction is gone", "evacuation", evac.Name, "pod", client.ObjectKeyFromObject(pod))
	}
	if !records(evac, pod) {
		evac.Spec.ProtectedPods = append(evac.Spec.ProtectedPods, v1alpha1.ProtectedPod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)})
	}
	if err := r.Client.Patch(ctx, evac, patch); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("adding pod %s/%s to Evacuation %s: %w", pod.Namespace, pod.Name, evac.Name, err)
	}
	return false, nil // the next pass reads what the provider says of it
}

// owner is the Eviction that owns an Evacuation of Evictions' (the one of
// its protected pods whose UID the label holds, named after that pod), read
// from the API server; nil when it is gone.
func (r *Reconciler) owner(ctx context.Context, evac *v1alpha1.Evacuation) (*lifecyclev1alpha1.Eviction, error) {
	for _, pp := range evac.Spec.ProtectedPods {
		got := &lifecyclev1alpha1.Eviction{}
		switch err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: pp.Namespace, Name: pp.Name}, got); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("reading the Eviction of pod %s/%s: %w", pp.Namespace, pp.Name, err)
		case string(got.UID) == evac.Labels[v1alpha1.LabelEviction]:
			return got, nil
		}
	}
	return nil, nil
}

// createEvacuation asks the provider for the pod's Eviction: the
// provider's finalizer first (it cannot vanish while the Evacuation is
// unfinished), then the Eviction's (it stays until its Evacuations are
// undone or handed over), then the Evacuation, with vacate.dev/cancel
// (deleting it never skips the undo). Nothing is asked for an Eviction
// being deleted: its finalizer could not be added, and nothing would undo
// what was asked.
func (r *Reconciler) createEvacuation(ctx context.Context, ev *lifecyclev1alpha1.Eviction, pod *corev1.Pod, node *corev1.Node, p *v1alpha1.EvacuationProvider, name string) error {
	if !ev.DeletionTimestamp.IsZero() {
		return nil
	}
	if ok, err := evacuationprovider.AddFinalizer(ctx, r.Client, p); err != nil || !ok {
		return err
	}
	if err := r.holdForHook(ctx, ev); err != nil {
		return err
	}
	evac := &v1alpha1.Evacuation{
		ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: []string{v1alpha1.FinalizerCancel},
			Labels: map[string]string{v1alpha1.LabelEviction: string(ev.UID)}},
		Spec: v1alpha1.EvacuationSpec{NodeName: node.Name, NodeUID: string(node.UID), Provider: p.Name, Mode: v1alpha1.ModeMaintenance,
			Desired: v1alpha1.DesiredEvacuate, DrainUID: string(ev.UID), Stage: v1alpha1.StageBeforeEviction, Reporter: p.Spec.Reporter.UserName(),
			ProtectedPods: []v1alpha1.ProtectedPod{{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)}}},
	}
	switch err := r.Client.Create(ctx, evac); {
	case apierrors.IsAlreadyExists(err):
		return nil // the cache is behind; the next pass reads it
	case err != nil:
		return fmt.Errorf("creating Evacuation %s for the eviction of pod %s/%s: %w", name, pod.Namespace, pod.Name, err)
	}
	logf.FromContext(ctx).Info("asked an EvacuationProvider for a pod's eviction", "pod", client.ObjectKeyFromObject(pod), "provider", p.Name, "evacuation", name)
	r.Events.Eventf(ev, pod, corev1.EventTypeNormal, ReasonAskedProvider, "Evacuate",
		"asked EvacuationProvider %s to evacuate node %s for the pod (Evacuation %s)", p.Name, node.Name, name)
	return nil
}

// endEvacuations hands over or undoes the Evacuations an ended Eviction
// owns (those a drain took over are the drain's), read from the API server
// (one created a moment ago must not be missed: nothing else would undo
// it), and says whether a pass must come back for them.
func (r *Reconciler) endEvacuations(ctx context.Context, ev *lifecyclev1alpha1.Eviction) (reconcile.Result, bool, error) {
	list := &v1alpha1.EvacuationList{}
	if err := r.APIReader.List(ctx, list, client.MatchingLabels{v1alpha1.LabelEviction: string(ev.UID)}); err != nil {
		return reconcile.Result{}, false, fmt.Errorf("listing the Evacuations of Eviction %s/%s: %w", ev.Namespace, ev.Name, err)
	}
	pending := false
	for i := range list.Items {
		evac := &list.Items[i]
		if !evac.ForEviction() || (!evac.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(evac, v1alpha1.FinalizerCancel)) {
			continue
		}
		handed, err := r.handOver(ctx, ev, evac)
		if err != nil {
			return reconcile.Result{}, false, err
		}
		if handed {
			pending = true // the next pass sees it is another's
			continue
		}
		waits, err := r.undoEvacuation(ctx, ev, evac)
		if err != nil {
			return reconcile.Result{}, false, err
		}
		pending = pending || waits
	}
	if pending {
		return reconcile.Result{RequeueAfter: hookPoll}, true, nil
	}
	return reconcile.Result{}, false, nil
}

// handOver gives an ended Eviction's Evacuation to the unfinished Eviction
// of another of its pods, if any (the ended one's pod leaves its protected
// pods; the provider answers again for the new generation), and reports
// whether it did. One being undone is not handed over.
func (r *Reconciler) handOver(ctx context.Context, ev *lifecyclev1alpha1.Eviction, evac *v1alpha1.Evacuation) (bool, error) {
	if evac.Spec.Desired != v1alpha1.DesiredEvacuate || !evac.DeletionTimestamp.IsZero() {
		return false, nil
	}
	for _, pp := range evac.Spec.ProtectedPods {
		if pp.Namespace == ev.Namespace && pp.Name == ev.Name {
			continue
		}
		next := &lifecyclev1alpha1.Eviction{}
		if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: pp.Namespace, Name: pp.Name}, next); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return false, fmt.Errorf("reading the Eviction of pod %s/%s: %w", pp.Namespace, pp.Name, err)
		}
		if next.Spec.Target.Pod == nil || string(next.Spec.Target.Pod.UID) != pp.UID || er.Final(next) || !next.DeletionTimestamp.IsZero() {
			continue
		}
		patch := client.MergeFromWithOptions(evac.DeepCopy(), client.MergeFromWithOptimisticLock{})
		evac.Labels[v1alpha1.LabelEviction], evac.Spec.DrainUID = string(next.UID), string(next.UID)
		evac.Spec.ProtectedPods = slices.DeleteFunc(evac.Spec.ProtectedPods, func(p v1alpha1.ProtectedPod) bool {
			return p.Namespace == ev.Namespace && p.Name == ev.Name
		})
		if err := r.Client.Patch(ctx, evac, patch); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("handing Evacuation %s over to the Eviction of pod %s/%s: %w", evac.Name, pp.Namespace, pp.Name, err)
		}
		logf.FromContext(ctx).Info("handed an Evacuation over to another pod's Eviction", "evacuation", evac.Name, "to", klogRef(pp))
		return true, nil
	}
	return false, nil
}

// klogRef names a protected pod in logs.
func klogRef(pp v1alpha1.ProtectedPod) string { return pp.Namespace + "/" + pp.Name }

// undoEvacuation asks the provider to undo an Eviction's Evacuation, and
// lets it go once it may (the rules of a drain's undo, nodedrain
// cancelOne): the provider confirmed or never took it up, the provider or
// the node is gone (what moved stays moved), or timeouts.cancel passed
// since the undo was asked. It says whether it is still waiting. Every
// write is to the version read: a drain that took the Evacuation over
// meanwhile keeps it.
func (r *Reconciler) undoEvacuation(ctx context.Context, ev *lifecyclev1alpha1.Eviction, evac *v1alpha1.Evacuation) (bool, error) {
	settled := evacuationprovider.CancelSettled(evac)
	providerGone := apierrors.IsNotFound(r.Client.Get(ctx, types.NamespacedName{Name: evac.Spec.Provider}, &v1alpha1.EvacuationProvider{}))
	node := &corev1.Node{}
	nodeGone := apierrors.IsNotFound(r.Client.Get(ctx, types.NamespacedName{Name: evac.Spec.NodeName}, node)) ||
		(evac.Spec.NodeUID != "" && evac.Spec.NodeUID != string(node.UID))
	limit := r.cancelLimit(ctx, evac.Spec.NodeName)
	asked, hasAsked := cancelAsked(evac)
	expired := hasAsked && r.Clock.Now().Sub(asked) >= limit
	if settled || providerGone || nodeGone || expired {
		switch {
		case settled, nodeGone:
		case providerGone:
			r.Events.Eventf(ev, nil, corev1.EventTypeWarning, v1alpha1.EventProviderGone, "Cancel",
				"EvacuationProvider %s is gone: nobody can undo Evacuation %s; deleting it", evac.Spec.Provider, evac.Name)
		default:
			r.Events.Eventf(ev, nil, corev1.EventTypeWarning, v1alpha1.EventCancelTimeout, "Cancel",
				"EvacuationProvider %s did not confirm the undo of Evacuation %s within %s (timeouts.cancel): what it moved may stay moved",
				evac.Spec.Provider, evac.Name, limit)
		}
		if err := evacuationprovider.LetGo(ctx, r.Client, evac, true); apierrors.IsConflict(err) {
			return true, nil
		} else if err != nil {
			return false, err
		}
		return false, nil
	}
	if evac.Spec.Desired != v1alpha1.DesiredCancel || !hasAsked {
		patch := client.MergeFromWithOptions(evac.DeepCopy(), client.MergeFromWithOptimisticLock{})
		evac.Spec.Desired = v1alpha1.DesiredCancel
		if !hasAsked {
			if evac.Annotations == nil {
				evac.Annotations = map[string]string{}
			}
			evac.Annotations[AnnotationCancelAsked] = r.Clock.Now().UTC().Format(time.RFC3339)
		}
		if err := r.Client.Patch(ctx, evac, patch); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("undoing Evacuation %s: %w", evac.Name, err)
		}
	}
	return true, nil
}

// cancelAsked is when the coordinator asked for the Evacuation's undo.
func cancelAsked(evac *v1alpha1.Evacuation) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339, evac.Annotations[AnnotationCancelAsked])
	return t, err == nil
}

// cancelLimit is timeouts.cancel of the policy of the node, or the default
// when it cannot be read.
func (r *Reconciler) cancelLimit(ctx context.Context, nodeName string) time.Duration {
	node := &corev1.Node{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: nodeName}, node); err == nil {
		if p, err := policy.Resolve(ctx, r.Client, "", node); err == nil {
			return p.CancelTimeout
		}
	}
	return policy.DefaultCancelTimeout
}

// providersHold says, right before an eviction call, why the pod must
// stay for its EvacuationProviders ("" when none holds it): one that
// selects it has no Evacuation of its node that records the pod and is
// done, or an Evacuation that records it is unfinished or being undone.
// It asks nothing: the pass does.
func (r *Reconciler) providersHold(ctx context.Context, pod *corev1.Pod) string {
	selecting, err := r.selecting(ctx, pod)
	if err != nil {
		return "cannot tell whether the EvacuationProviders are done with the pod: " + err.Error()
	}
	for _, p := range selecting {
		evac := &v1alpha1.Evacuation{}
		err := r.Client.Get(ctx, types.NamespacedName{Name: v1alpha1.EvacuationName(pod.Spec.NodeName, p.Name)}, evac)
		switch {
		case apierrors.IsNotFound(err):
			if p.DeletionTimestamp.IsZero() {
				return "EvacuationProvider " + p.Name + " has not been asked for the pod"
			}
			continue
		case err != nil:
			return "cannot read the Evacuation of EvacuationProvider " + p.Name + ": " + err.Error()
		}
		if why := r.unfinished(ctx, evac, pod); why != "" {
			return why
		}
	}
	list := &v1alpha1.EvacuationList{}
	if err := r.Client.List(ctx, list); err != nil {
		return "cannot list Evacuations: " + err.Error()
	}
	for i := range list.Items {
		evac := &list.Items[i]
		if evac.Spec.NodeName == pod.Spec.NodeName && records(evac, pod) && providers.StageOf(evac) == v1alpha1.StageBeforeEviction {
			if why := r.unfinished(ctx, evac, pod); why != "" {
				return why
			}
		}
	}
	return ""
}

// unfinished says why an Evacuation does not let the pod go yet, or "".
func (r *Reconciler) unfinished(ctx context.Context, evac *v1alpha1.Evacuation, pod *corev1.Pod) string {
	switch {
	case !evac.DeletionTimestamp.IsZero() || evac.Spec.Desired == v1alpha1.DesiredCancel:
		return "Evacuation " + evac.Name + " is being undone"
	case !records(evac, pod):
		return "Evacuation " + evac.Name + " does not record the pod yet"
	}
	if done, why := r.judge(ctx, evac); !done {
		return "Evacuation " + evac.Name + ": " + why
	}
	return ""
}
