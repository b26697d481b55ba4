package coordinator_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	er "github.com/vacate-dev/vacate/internal/evictionrequest"
)

// The tests share one dev cluster that serves the EvictionRequest API, and
// run vacate's controller in process, where it coordinates (auto: the API
// is served). The requesters and responders here are the test's own,
// written against the upstream types only, as another project's would be.
func TestMain(m *testing.M) { os.Exit(testenv.Main(m, testenv.EvictionRequestAPI)) }

// backup is the responder the workload declares, an operator that moves the
// pod's data before it goes.
const backup = "backup.example.com/mover"

// descheduler is the requester the test acts as.
const descheduler = "descheduler.example.com/rebalance"

type world struct {
	t    *testing.T
	c    *devcluster.Cluster
	cs   kubernetes.Interface
	node string
	ns   string
	pods []corev1.Pod
}

// newWorld starts vacate's controller and a Deployment "api" of n pods on a
// node of their own, which declare backup as their responder, behind a PDB
// that allows maxUnavailable.
func newWorld(t *testing.T, n int32, maxUnavailable string, tune ...func(*appsv1.Deployment)) *world {
	t.Helper()
	w := newWorkload(t, n, maxUnavailable, tune...)
	testenv.Controller(t, w.c)
	return w
}

// newWorkload is newWorld without vacate's controller.
func newWorkload(t *testing.T, n int32, maxUnavailable string, tune ...func(*appsv1.Deployment)) *world {
	t.Helper()
	c := testenv.Start(t)
	ctx := testenv.Context(t)
	w := &world{t: t, c: c, cs: c.Client, ns: testenv.Namespace(t, c)}
	// A node of the test's own name (the namespace's random suffix): a
	// drain of it must not meet the NodeDrain of a node of the same name
	// that an earlier test left being undone.
	node := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "er-" + w.ns[strings.LastIndex(w.ns, "-")+1:], Count: 1, Labels: map[string]string{"pool": "er-" + w.ns}})[0]
	w.node = node
	dep := devcluster.Deployment(w.ns, "api", n)
	dep.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	dep.Spec.Template.Spec.EvictionResponders = []corev1.EvictionResponder{{Name: backup, Priority: ptr.To[int32](5000)}}
	for _, f := range tune {
		f(dep)
	}
	if _, err := w.cs.AppsV1().Deployments(w.ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.cs.PolicyV1().PodDisruptionBudgets(w.ns).Create(ctx, devcluster.PDB(w.ns, "api", "api", "", maxUnavailable), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, err := devcluster.WaitForPodsReady(ctx, w.cs, w.ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: "api"}), int(n), 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.WaitForPDB(ctx, w.cs, w.ns, "api", n, time.Minute); err != nil {
		t.Fatal(err)
	}
	w.pods = pods
	return w
}

// request asks for the pod's eviction as the descheduler.
func (w *world) request(pod corev1.Pod, name string) *lifecyclev1alpha1.EvictionRequest {
	w.t.Helper()
	req := &lifecyclev1alpha1.EvictionRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns},
		Spec: lifecyclev1alpha1.EvictionRequestSpec{
			Target:    lifecyclev1alpha1.EvictionRequestTarget{Pod: &lifecyclev1alpha1.EvictionRequestPodReference{Name: pod.Name, UID: pod.UID}},
			Requester: descheduler, Intent: lifecyclev1alpha1.EvictionRequestIntentEviction,
		},
	}
	req, err := w.cs.LifecycleV1alpha1().EvictionRequests(w.ns).Create(context.Background(), req, metav1.CreateOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	return req
}

// waitEviction waits until the pod's Eviction satisfies cond.
func (w *world) waitEviction(pod corev1.Pod, what string, cond func(*lifecyclev1alpha1.Eviction) bool) *lifecyclev1alpha1.Eviction {
	w.t.Helper()
	return w.waitEvictionFor(pod, what, time.Minute, cond)
}

// waitEvictionFor is waitEviction, waiting up to timeout.
func (w *world) waitEvictionFor(pod corev1.Pod, what string, timeout time.Duration, cond func(*lifecyclev1alpha1.Eviction) bool) *lifecyclev1alpha1.Eviction {
	w.t.Helper()
	var last *lifecyclev1alpha1.Eviction
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ev, err := w.cs.LifecycleV1alpha1().Evictions(w.ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		last = ev
		return cond(ev), nil
	})
	if err != nil {
		w.t.Fatalf("the Eviction of %s: %s: %v; last seen:\n%s", pod.Name, what, err, describe(last))
	}
	return last
}

// respond writes the responder's own entry as an operator would: change
// gets the entry of the stored Eviction.
func (w *world) respond(pod corev1.Pod, responder string, change func(*lifecyclev1alpha1.ResponderStatus)) {
	w.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ev, err := w.cs.LifecycleV1alpha1().Evictions(w.ns).Get(context.Background(), pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i := range ev.Status.Responders {
			if ev.Status.Responders[i].Name == responder {
				change(&ev.Status.Responders[i])
			}
		}
		_, err = w.cs.LifecycleV1alpha1().Evictions(w.ns).UpdateStatus(context.Background(), ev, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		w.t.Fatalf("responder %s: %v", responder, err)
	}
}

// acceptedEvictions counts the evictions of the pod the API server
// accepted, from its audit log.
func (w *world) acceptedEvictions(pod corev1.Pod) int {
	w.t.Helper()
	events, err := devcluster.ReadAudit(w.c.AuditLog)
	if err != nil {
		w.t.Fatal(err)
	}
	return devcluster.SuccessfulEvictions(events)[w.ns+"/"+pod.Name]
}

// waitRequestEvicted waits until the request's status says TargetEvicted,
// at its generation.
func (w *world) waitRequestEvicted(req *lifecyclev1alpha1.EvictionRequest) {
	w.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := w.cs.LifecycleV1alpha1().EvictionRequests(w.ns).Get(ctx, req.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		req = got
		return meta.IsStatusConditionTrue(got.Status.Conditions, string(lifecyclev1alpha1.EvictionConditionTargetEvicted)), nil
	})
	if err != nil || ptr.Deref(req.Status.ObservedGeneration, 0) != req.Generation {
		w.t.Errorf("the request's status %+v: want TargetEvicted at generation %d (%v)", req.Status, req.Generation, err)
	}
}

// pod reads the pod; nil once it is gone.
func (w *world) pod(p corev1.Pod) *corev1.Pod {
	w.t.Helper()
	got, err := w.cs.CoreV1().Pods(w.ns).Get(context.Background(), p.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && got.UID != p.UID) {
		return nil
	}
	if err != nil {
		w.t.Fatal(err)
	}
	return got
}

// setMaxUnavailable sets the PDB's maxUnavailable and waits until the
// disruption controller has counted with it.
func (w *world) setMaxUnavailable(n int) {
	w.t.Helper()
	defer func() {
		err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			pdb, err := w.cs.PolicyV1().PodDisruptionBudgets(w.ns).Get(ctx, "api", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return pdb.Status.ObservedGeneration == pdb.Generation && (n == 0) == (pdb.Status.DisruptionsAllowed == 0), nil
		})
		if err != nil {
			w.t.Fatalf("the PDB did not take maxUnavailable %d: %v", n, err)
		}
	}()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pdb, err := w.cs.PolicyV1().PodDisruptionBudgets(w.ns).Get(context.Background(), "api", metav1.GetOptions{})
		if err != nil {
			return err
		}
		pdb.Spec.MaxUnavailable = ptr.To(intstr.FromInt32(int32(n)))
		_, err = w.cs.PolicyV1().PodDisruptionBudgets(w.ns).Update(context.Background(), pdb, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		w.t.Fatal(err)
	}
}

// TestAnEvictionRequestIsCoordinatedToTheEnd: a descheduler (the test)
// asks for a pod's eviction. vacate creates the pod's Eviction, with the
// pod's responder before the evictor; the responder has the turn first and
// the pod stays while it works (it heartbeats), though its PDB would allow
// the eviction; when it completes, the turn passes to the evictor, whose
// eviction waits on the pod's PodDisruptionBudget, tightened meanwhile (the
// evictor says so), and goes through once the budget allows. The Eviction
// and the request end TargetEvicted.
func TestAnEvictionRequestIsCoordinatedToTheEnd(t *testing.T) {
	w := newWorld(t, 2, "1")
	target := w.pods[0]
	req := w.request(target, "rebalance-1")

	ev := w.waitEviction(target, "the responder has the turn", func(ev *lifecyclev1alpha1.Eviction) bool {
		return state(ev, backup) == lifecyclev1alpha1.ResponderStateActive
	})
	if got := responderOrder(ev); got != backup+","+er.Evictor {
		t.Errorf("responders %s, want %s then the evictor", got, backup)
	}
	if ev.Labels[descheduler] != string(lifecyclev1alpha1.EvictionParticipantRoleRequester) || ev.Labels[backup] != string(lifecyclev1alpha1.EvictionParticipantRoleResponder) {
		t.Errorf("labels %v, want the requester's and the responder's roles", ev.Labels)
	}
	if len(ev.OwnerReferences) != 1 || ev.OwnerReferences[0].UID != req.UID {
		t.Errorf("owners %v, want the request", ev.OwnerReferences)
	}
	w.respond(target, backup, func(r *lifecyclev1alpha1.ResponderStatus) {
		r.HeartbeatTime, r.Message = ptr.To(metav1.Now()), ptr.To("copying 3 GiB to another replica")
	})
	time.Sleep(2 * time.Second) // the coordinator's passes come and go: the turn stays, the pod stays
	ev = w.waitEviction(target, "still the responder's turn", func(ev *lifecyclev1alpha1.Eviction) bool { return true })
	if state(ev, backup) != lifecyclev1alpha1.ResponderStateActive || w.pod(target) == nil || w.pod(target).DeletionTimestamp != nil {
		t.Fatalf("while the responder works, the pod must stay and the turn be its own:\n%s", describe(ev))
	}

	w.setMaxUnavailable(0)
	w.respond(target, backup, func(r *lifecyclev1alpha1.ResponderStatus) {
		r.CompletionTime, r.Message = ptr.To(metav1.Now()), ptr.To("copied")
	})
	ev = w.waitEviction(target, "the evictor waits on the PDB", func(ev *lifecyclev1alpha1.Eviction) bool {
		return state(ev, backup) == lifecyclev1alpha1.ResponderStateCompleted && state(ev, er.Evictor) == lifecyclev1alpha1.ResponderStateActive &&
			strings.Contains(message(ev, er.Evictor), "PDBBlocked")
	})
	if p := w.pod(target); p == nil || p.DeletionTimestamp != nil {
		t.Fatalf("the pod was evicted past a PDB that allows nothing:\n%s", describe(ev))
	}

	w.setMaxUnavailable(1)
	ev = w.waitEviction(target, "TargetEvicted", func(ev *lifecyclev1alpha1.Eviction) bool {
		return meta.IsStatusConditionTrue(ev.Status.Conditions, string(lifecyclev1alpha1.EvictionConditionTargetEvicted))
	})
	if state(ev, er.Evictor) != lifecyclev1alpha1.ResponderStateCompleted {
		t.Errorf("the evictor ended %s, want Completed:\n%s", state(ev, er.Evictor), describe(ev))
	}
	if p := w.pod(target); p != nil && p.DeletionTimestamp == nil {
		t.Errorf("the Eviction says TargetEvicted, the pod is not going")
	}
	w.waitRequestEvicted(req)
	if other := w.pod(w.pods[1]); other == nil || other.DeletionTimestamp != nil {
		t.Error("the other pod, which nobody asked for, was evicted")
	}
}

// TestWithdrawalCancelsAndThePodStays: when the only requester withdraws
// (intent Withdrawn) while the responder has the turn, the Eviction ends
// Failed (CanceledDueToNoRequesters), the responder's turn ends Canceled, and
// the pod stays. Asked again, the pod gets a new Eviction.
func TestWithdrawalCancelsAndThePodStays(t *testing.T) {
	w := newWorld(t, 1, "1")
	target := w.pods[0]
	req := w.request(target, "rebalance-2")
	first := w.waitEviction(target, "the responder has the turn", func(ev *lifecyclev1alpha1.Eviction) bool {
		return state(ev, backup) == lifecyclev1alpha1.ResponderStateActive
	})
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		got, err := w.cs.LifecycleV1alpha1().EvictionRequests(w.ns).Get(context.Background(), req.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		got.Spec.Intent = lifecyclev1alpha1.EvictionRequestIntentWithdrawn
		_, err = w.cs.LifecycleV1alpha1().EvictionRequests(w.ns).Update(context.Background(), got, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	ev := w.waitEviction(target, "cancelled", func(ev *lifecyclev1alpha1.Eviction) bool {
		c := meta.FindStatusCondition(ev.Status.Conditions, string(lifecyclev1alpha1.EvictionConditionFailed))
		return c != nil && c.Status == metav1.ConditionTrue
	})
	c := meta.FindStatusCondition(ev.Status.Conditions, string(lifecyclev1alpha1.EvictionConditionFailed))
	if c.Reason != string(lifecyclev1alpha1.EvictionConditionReasonCanceledDueToNoRequesters) || state(ev, backup) != lifecyclev1alpha1.ResponderStateCanceled ||
		state(ev, er.Evictor) != lifecyclev1alpha1.ResponderStateInactive {
		t.Errorf("after the withdrawal:\n%s\nwant Failed CanceledDueToNoRequesters, the responder Canceled, the evictor never active", describe(ev))
	}
	time.Sleep(2 * time.Second)
	if p := w.pod(target); p == nil || p.DeletionTimestamp != nil {
		t.Fatal("the pod was evicted after every requester withdrew")
	}

	// Asked again: a new Eviction, the responder's turn first again.
	w.request(target, "rebalance-3")
	second := w.waitEviction(target, "a new Eviction", func(ev *lifecyclev1alpha1.Eviction) bool {
		return ev.UID != first.UID && state(ev, backup) == lifecyclev1alpha1.ResponderStateActive
	})
	if len(second.OwnerReferences) != 2 {
		t.Errorf("the new Eviction's owners %v, want both requests", second.OwnerReferences)
	}
}

// TestARestartMidwayEvictsOnce: vacate's controller stops while the
// evictor has the turn and the pod's PDB refuses its eviction; another
// starts (as after a crash or a new leader), finds where the Eviction
// stands in the objects alone, and evicts the pod once the PDB allows:
// the API server accepted exactly one eviction of the pod.
func TestARestartMidwayEvictsOnce(t *testing.T) {
	w := newWorkload(t, 2, "1")
	_, stop := testenv.StartController(t, w.c)
	target := w.pods[0]
	w.request(target, "rebalance-4")
	w.waitEviction(target, "the responder has the turn", func(ev *lifecyclev1alpha1.Eviction) bool {
		return state(ev, backup) == lifecyclev1alpha1.ResponderStateActive
	})
	w.setMaxUnavailable(0)
	w.respond(target, backup, func(r *lifecyclev1alpha1.ResponderStatus) {
		r.CompletionTime, r.Message = ptr.To(metav1.Now()), ptr.To("copied")
	})
	w.waitEviction(target, "the evictor waits on the PDB", func(ev *lifecyclev1alpha1.Eviction) bool {
		return state(ev, er.Evictor) == lifecyclev1alpha1.ResponderStateActive && strings.Contains(message(ev, er.Evictor), "PDBBlocked")
	})
	if err := stop(); err != nil {
		t.Fatalf("the first controller: %v", err)
	}
	testenv.Controller(t, w.c)
	w.setMaxUnavailable(1)
	ev := w.waitEviction(target, "TargetEvicted", func(ev *lifecyclev1alpha1.Eviction) bool {
		return meta.IsStatusConditionTrue(ev.Status.Conditions, string(lifecyclev1alpha1.EvictionConditionTargetEvicted))
	})
	if state(ev, backup) != lifecyclev1alpha1.ResponderStateCompleted || state(ev, er.Evictor) != lifecyclev1alpha1.ResponderStateCompleted {
		t.Errorf("after the restart:\n%s\nwant both turns Completed", describe(ev))
	}
	if n := w.acceptedEvictions(target); n != 1 {
		t.Errorf("the API server accepted %d evictions of %s, want exactly 1", n, target.Name)
	}
}

func state(ev *lifecyclev1alpha1.Eviction, name string) lifecyclev1alpha1.ResponderStateType {
	for _, r := range ev.Status.TargetResponders {
		if r.Name == name {
			return r.State
		}
	}
	return ""
}

func message(ev *lifecyclev1alpha1.Eviction, name string) string {
	for _, r := range ev.Status.Responders {
		if r.Name == name {
			return ptr.Deref(r.Message, "")
		}
	}
	return ""
}

func responderOrder(ev *lifecyclev1alpha1.Eviction) string {
	var names []string
	for _, r := range ev.Status.TargetResponders {
		names = append(names, r.Name)
	}
	return strings.Join(names, ",")
}

// describe prints an Eviction's status for a failure.
func describe(ev *lifecyclev1alpha1.Eviction) string {
	if ev == nil {
		return "  (none)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  eviction %s (uid %s)\n", types.NamespacedName{Namespace: ev.Namespace, Name: ev.Name}, ev.UID)
	for _, r := range ev.Status.Requesters {
		fmt.Fprintf(&b, "  requester %s: %s\n", r.Name, r.Intent)
	}
	for _, r := range ev.Status.TargetResponders {
		fmt.Fprintf(&b, "  responder %s (%d): %s: %s\n", r.Name, ptr.Deref(r.Priority, -1), r.State, message(ev, r.Name))
	}
	for _, c := range ev.Status.Conditions {
		fmt.Fprintf(&b, "  condition %s=%s %s: %s\n", c.Type, c.Status, c.Reason, c.Message)
	}
	return b.String()
}

// TestAForgedEvictionCannotSkipTheResponders is the abuse test of the
// Eviction's trust (from a review): someone who may write Evictions (every
// responder's operator may write their status) makes the pod's Eviction
// first, listing only the evictor. The API server accepts that list (it
// never checks it against the pod); vacate does not: it deletes the forged
// Eviction and makes the pod's own, whose responder has the first turn, and
// the pod is not evicted.
func TestAForgedEvictionCannotSkipTheResponders(t *testing.T) {
	w := newWorld(t, 2, "1")
	target := w.pods[0]
	ctx := testenv.Context(t)
	forged := &lifecyclev1alpha1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: target.Name, Namespace: w.ns},
		Spec: lifecyclev1alpha1.EvictionSpec{Target: lifecyclev1alpha1.EvictionTarget{
			Pod: &lifecyclev1alpha1.EvictionPodReference{Name: target.Name, UID: target.UID}}},
	}
	forged, err := w.cs.LifecycleV1alpha1().Evictions(w.ns).Create(ctx, forged, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	forged.Status.TargetResponders = []lifecyclev1alpha1.TargetResponder{{Name: er.Evictor, Priority: ptr.To[int32](100), State: lifecyclev1alpha1.ResponderStateActive}}
	forged.Status.Responders = []lifecyclev1alpha1.ResponderStatus{{Name: er.Evictor, StartTime: ptr.To(metav1.Now())}}
	if _, err := w.cs.LifecycleV1alpha1().Evictions(w.ns).UpdateStatus(ctx, forged, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		t.Fatalf("the API server refused the forged status (the test needs it accepted): %v", err)
	}
	w.request(target, "rebalance-6")
	ev := w.waitEviction(target, "the pod's own Eviction, its responder first", func(ev *lifecyclev1alpha1.Eviction) bool {
		return ev.UID != forged.UID && state(ev, backup) == lifecyclev1alpha1.ResponderStateActive
	})
	time.Sleep(2 * time.Second)
	if p := w.pod(target); p == nil || p.DeletionTimestamp != nil {
		t.Fatalf("the pod was evicted past its responder:\n%s", describe(ev))
	}
	if n := w.acceptedEvictions(target); n != 0 {
		t.Errorf("the API server accepted %d evictions of %s, want none", n, target.Name)
	}
}
