package nodedrain_test

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/surge"
)

// TestSurgeIgnoresDecoys: tenants label pods of their own as a drain's
// replacement of a pod (vacate.dev/surge-of: its UID, vacate.dev/surge-drain:
// the drain), Ready on another node: one in another namespace carrying
// even the owner reference to the NodeDrain's UID (anyone who may read
// NodeDrains knows it), one in the pod's own namespace without that
// reference; and a third, not scheduled, with a finalizer that would keep
// it once deleted (kwok removes the finalizers of its nodes' pods). None is
// vacate's: no decoy stands in for the replacement (the pod waits for a
// replacement vacate creates, and leaves once that one is Ready), and none
// is evicted, patched or waited on, by the drain nor by its undo.
func TestSurgeIgnoresDecoys(t *testing.T) {
	c := testenv.Start(t)
	e := &env{c: c, cl: testenv.DrainClient(t, c)}
	ctx := testenv.Context(t)
	f := newSurgeFixture(t, e, "surge-decoy", nil, nil)

	// The drain exists before the controller runs: the decoys know its UID.
	requestAll(t, e, []string{f.node})
	nd := &v1alpha1.NodeDrain{}
	if err := e.cl.Get(ctx, types.NamespacedName{Name: f.node}, nd); err != nil {
		t.Fatal(err)
	}
	tenant := testenv.Namespace(t, c)
	decoys := []*corev1.Pod{createDecoy(t, e, f, nd, tenant, "decoy-elsewhere", true, string(f.pod.UID)),
		createDecoy(t, e, f, nd, f.ns, "decoy-here", false, string(f.pod.UID))}
	for _, d := range decoys {
		if _, err := devcluster.WaitForPodsReady(ctx, c.Client, d.Namespace, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: "decoy"}), 1, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	decoys = append(decoys, createDecoy(t, e, f, nd, tenant, "decoy-pending", false, "a-pod-that-left"))
	testenv.Controller(t, c)

	// The pod waits for a replacement of vacate's own, in its namespace;
	// the Ready decoys do not stand in for it.
	seen := e.waitDrain(t, f.node, "the pod blocked", 90*time.Second, func(nd *v1alpha1.NodeDrain) bool {
		b, ok := blockerOf(nd, f.ns, f.pod.Name)
		return ok && (b.Reason != v1alpha1.BlockerSurge || strings.Contains(b.Detail, "replacement web-"))
	})
	b, _ := blockerOf(seen, f.ns, f.pod.Name)
	t.Logf("blocker of %s: %s: %s", f.pod.Name, b.Reason, b.Detail)
	reps := replacements(t, e, f.ns)
	var real *corev1.Pod
	for i := range reps {
		if strings.HasPrefix(reps[i].Name, "web-") {
			real = &reps[i]
		}
	}
	switch {
	case b.Reason != v1alpha1.BlockerSurge || real == nil:
		t.Errorf("pod %s is blocked by %s (%s), and vacate created no replacement of its own: a decoy stood in for it", f.pod.Name, b.Reason, b.Detail)
	case !strings.Contains(b.Detail, "replacement "+real.Name):
		t.Errorf("pod %s waits on %q, want its replacement %s", f.pod.Name, b.Detail, real.Name)
	}
	if _, err := c.Client.CoreV1().Pods(f.ns).Get(ctx, f.pod.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("pod %s left before its replacement was Ready: %v", f.pod.Name, err)
	}
	if real != nil && !t.Failed() {
		// Once vacate's own replacement is Ready, the pod leaves; the
		// drain ends without waiting on the decoys.
		setGate(t, e, real)
		e.waitDrain(t, f.node, "Drained", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
	}

	// Its undo neither evicts a decoy nor waits on one.
	if err := e.cl.Delete(ctx, nd); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(e.cl.Get(ctx, types.NamespacedName{Name: f.node}, &v1alpha1.NodeDrain{})), nil
	})
	if err != nil {
		got := &v1alpha1.NodeDrain{}
		_ = e.cl.Get(ctx, types.NamespacedName{Name: f.node}, got)
		t.Errorf("the drain's undo did not end within a minute: %s", testenv.DescribeDrain(got))
	}
	checkDecoysUntouched(t, e, decoys)
}

// createDecoy creates, in namespace ns, a tenant's pod labelled as the
// drain nd's replacement of the pod of UID of, on f's spare node if of is
// f's pod (else never scheduled), with a finalizer (dropped when the test
// ends) and, if owned, an owner reference to nd.
func createDecoy(t *testing.T, e *env, f *surgeFixture, nd *v1alpha1.NodeDrain, ns, name string, owned bool, of string) *corev1.Pod {
	t.Helper()
	ctx := testenv.Context(t)
	rs := metav1.GetControllerOf(&f.pod).Name
	p := devcluster.BarePod(ns, name, f.spare)
	if of != string(f.pod.UID) { // never scheduled
		p.Spec.NodeName, p.Spec.NodeSelector = "", map[string]string{testLabel: "nowhere"}
	}
	p.Labels = map[string]string{devcluster.AppLabel: "decoy", surge.LabelOf: of, surge.LabelDrain: f.node}
	p.Annotations = map[string]string{surge.AnnotationPod: f.pod.Name, surge.AnnotationReplicaSet: rs, surge.AnnotationDeployment: "web"}
	p.Finalizers = []string{"test.vacate.dev/keep"}
	if owned {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeDrain", Name: nd.Name, UID: nd.UID}}
	}
	dropFinalizers(t, e, ns, name)
	created, err := e.c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// checkDecoysUntouched checks, from the audit log and the pods as they are
// now, that no one evicted, deleted or changed a decoy, except the garbage
// collector deleting one that names the (deleted) drain as its owner.
func checkDecoysUntouched(t *testing.T, e *env, decoys []*corev1.Pod) {
	t.Helper()
	ctx := testenv.Context(t)
	c := e.c
	events, err := devcluster.ReadAudit(c.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	evicted := devcluster.SuccessfulEvictions(events)
	for _, d := range decoys {
		key := d.Namespace + "/" + d.Name
		if evicted[key] > 0 {
			t.Errorf("decoy %s was evicted", key)
		}
		now, err := c.Client.CoreV1().Pods(d.Namespace).Get(ctx, d.Name, metav1.GetOptions{})
		switch {
		case (apierrors.IsNotFound(err) || err == nil && !now.DeletionTimestamp.IsZero()) && len(d.OwnerReferences) > 0:
			// A decoy that names the drain as its owner is removed by
			// Kubernetes' garbage collector once the drain is gone: that
			// is no one's doing but the collector's.
			if who := deletedBy(events, d.Namespace, d.Name); who != "" {
				t.Errorf("decoy %s was deleted by %s, not by the garbage collector", key, who)
			}
		case err != nil:
			t.Errorf("decoy %s/%s: %v", d.Namespace, d.Name, err)
		case !now.DeletionTimestamp.IsZero():
			t.Errorf("decoy %s/%s was evicted or deleted", d.Namespace, d.Name)
		case !maps.Equal(now.Labels, d.Labels) || !maps.Equal(now.Annotations, d.Annotations) || len(now.OwnerReferences) != len(d.OwnerReferences):
			t.Errorf("decoy %s/%s was changed: labels %v annotations %v owners %v", d.Namespace, d.Name, now.Labels, now.Annotations, now.OwnerReferences)
		}
	}
}

// deletedBy names who deleted the pod, if anyone did besides the garbage
// collector and kwok (which finishes a deleted simulated pod).
func deletedBy(events []devcluster.AuditEvent, ns, name string) string {
	for _, e := range events {
		if e.Verb != "delete" || e.ObjectRef == nil || e.ObjectRef.Resource != "pods" || e.ObjectRef.Subresource != "" ||
			e.ObjectRef.Namespace != ns || e.ObjectRef.Name != name || !e.Succeeded() {
			continue
		}
		if u := e.User.Username; u != "system:serviceaccount:kube-system:generic-garbage-collector" && u != "kwok" {
			return u
		}
	}
	return ""
}
