package rbac

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/requests"
	"github.com/vacate-dev/vacate/internal/surge"
)

// Messages of the admission policies about surge (config/admission/pods.yaml).
const (
	surgeCreates = "vacate-controller may create only surge replacements"
	surgeChanges = "vacate-controller may change only the metadata of its surge replacements"
	surgeForged  = "only vacate-controller creates surge replacements"
)

// bindSurge applies what 'vacate manifests surge' prints (the binding of
// the ClusterRole vacate-controller-surge to the controller), and deletes
// it when the test ends.
func bindSurge(t *testing.T, c *devcluster.Cluster, cl client.Client) {
	t.Helper()
	code, out := vacate(t, c.Kubeconfig, "manifests", "surge")
	if code != 0 {
		t.Errorf("vacate manifests surge: exit %d", code)
		return
	}
	applyYAML(t, cl, out)
	t.Cleanup(func() {
		_ = c.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), "vacate-controller-surge", metav1.DeleteOptions{})
	})
}

// surgeDrain is a NodeDrain of node, made by an admin, that the test's
// replacements name as their owner; no controller runs it.
func surgeDrain(t *testing.T, cl client.Client, node string) *v1alpha1.NodeDrain {
	t.Helper()
	ctx := testenv.Context(t)
	if err := requests.Apply(ctx, cl, node, v1alpha1.Requester{Name: "rbac-test"}, v1alpha1.ModeMaintenance, ""); err != nil {
		t.Fatal(err)
	}
	nd := &v1alpha1.NodeDrain{}
	if err := cl.Get(ctx, types.NamespacedName{Name: node}, nd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), nd) })
	return nd
}

// trueReplacement is the pod a surge drain creates: the labels, no
// pod-template-hash, the drain's owner reference, nothing of the host's.
func trueReplacement(ns string, nd *v1alpha1.NodeDrain) *corev1.Pod {
	p := devcluster.BarePod(ns, "", "")
	p.Name, p.GenerateName = "", "web-abc-"
	p.Labels[surge.LabelOf] = "uid-2"
	p.Labels[surge.LabelDrain] = nd.Name
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeDrain", Name: nd.Name, UID: nd.UID}}
	return p
}

// TestControllerCreatesAndChangesOnlyReplacements (issues 26 and 40):
// vacate-controller may create pods only with the ClusterRole
// vacate-controller-surge bound ('vacate manifests surge'), and the policy
// vacate-controller-surge keeps that right to true replacements: labelled
// vacate.dev/surge-of and vacate.dev/surge-drain, with the owner reference
// to that NodeDrain, no pod-template-hash, no controller reference, and
// nothing a stolen token could use against the node or the cluster: no
// node of its choice, no host namespace, hostPath, privileged container,
// capability beyond the baseline's or host port, never in kube-system. It
// may change only a replacement's labels, annotations and (fewer) owner
// references; never another pod, a spec or finalizers; it may not delete
// a pod at all (it removes a replacement through the Eviction API).
func TestControllerCreatesAndChangesOnlyReplacements(t *testing.T) {
	c := testenv.Start(t)
	cl := install(t, c)
	ctx := testenv.Context(t)
	node := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "rbac-surge", Count: 1})[0]
	ns := testenv.Namespace(t, c)
	nd := surgeDrain(t, cl, node)
	sa := clientset(t, asServiceAccount(c)).CoreV1()
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}

	// Without the binding, RBAC refuses every pod create.
	if _, err := sa.Pods(ns).Create(ctx, trueReplacement(ns, nd), dry); !apierrors.IsForbidden(err) || !strings.Contains(fmt.Sprint(err), "cannot create resource") {
		t.Errorf("the service account creating a replacement without vacate-controller-surge bound: %v, want forbidden by RBAC", err)
	}
	bindSurge(t, c, cl)
	check(t, "the service account creating a replacement with the binding", func() error {
		_, err := sa.Pods(ns).Create(ctx, trueReplacement(ns, nd), dry)
		return err
	})
	check(t, "the policy refusing a pod without the label", func() error {
		p := trueReplacement(ns, nd)
		delete(p.Labels, surge.LabelOf)
		_, err := sa.Pods(ns).Create(ctx, p, dry)
		return refused(err, surgeCreates)
	})

	container := func(f func(*corev1.Container)) func(*corev1.Pod) {
		return func(p *corev1.Pod) { f(&p.Spec.Containers[0]) }
	}
	for _, tc := range []struct {
		what    string
		ns      string
		mutate  func(*corev1.Pod)
		refusal string
	}{
		{"a replacement", "", func(*corev1.Pod) {}, ""},
		{"a replacement adding NET_BIND_SERVICE", "", container(func(c *corev1.Container) {
			c.SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}}}
		}), ""},
		{"a pod without the label", "", func(p *corev1.Pod) { delete(p.Labels, surge.LabelOf) }, surgeCreates},
		{"a pod without the drain's label", "", func(p *corev1.Pod) { delete(p.Labels, surge.LabelDrain) }, surgeCreates},
		{"a pod with pod-template-hash", "", func(p *corev1.Pod) { p.Labels[surge.HashLabel] = "abc" }, surgeCreates},
		{"a pod with a controller", "", func(p *corev1.Pod) {
			p.OwnerReferences = append(p.OwnerReferences, metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-abc", UID: "rs", Controller: ptr.To(true)})
		}, surgeCreates},
		{"a pod without the drain's owner reference", "", func(p *corev1.Pod) { p.OwnerReferences = nil }, surgeCreates},
		{"a pod owned by another drain than its label's", "", func(p *corev1.Pod) { p.OwnerReferences[0].Name = "elsewhere" }, surgeCreates},
		{"a pod bound to a node", "", func(p *corev1.Pod) { p.Spec.NodeName = node }, surgeCreates},
		{"a pod on the host's network", "", func(p *corev1.Pod) { p.Spec.HostNetwork = true }, surgeCreates},
		{"a pod in the host's PID namespace", "", func(p *corev1.Pod) { p.Spec.HostPID = true }, surgeCreates},
		{"a pod in the host's IPC namespace", "", func(p *corev1.Pod) { p.Spec.HostIPC = true }, surgeCreates},
		{"a pod mounting a hostPath", "", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		}, surgeCreates},
		{"a privileged container", "", container(func(c *corev1.Container) {
			c.SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		}), surgeCreates},
		{"a privileged init container", "", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: p.Spec.Containers[0].Image,
				SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}
		}, surgeCreates},
		{"a container adding SYS_ADMIN", "", container(func(c *corev1.Container) {
			c.SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}}
		}), surgeCreates},
		{"a container on a host port", "", container(func(c *corev1.Container) {
			c.Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 80}}
		}), surgeCreates},
		{"a replacement in kube-system", "kube-system", func(*corev1.Pod) {}, surgeCreates},
	} {
		in := ns
		if tc.ns != "" {
			in = tc.ns
		}
		p := trueReplacement(in, nd)
		tc.mutate(p)
		_, err := sa.Pods(in).Create(ctx, p, dry)
		if tc.refusal == "" && err != nil || tc.refusal != "" && refused(err, tc.refusal) != nil {
			t.Errorf("creating %s: %v, want refused: %q", tc.what, err, tc.refusal)
		}
	}

	// A replacement the service account made, and a pod of someone else.
	rep, err := sa.Pods(ns).Create(ctx, trueReplacement(ns, nd), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, devcluster.BarePod(ns, "someone", node), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ what, pod, patch, refusal string }{
		{"hand a replacement over", rep.Name, `{"metadata":{"labels":{"pod-template-hash":"abc"},"ownerReferences":null}}`, ""},
		{"label another pod", "someone", `{"metadata":{"labels":{"pod-template-hash":"abc"}}}`, surgeChanges},
		{"change a replacement's spec", rep.Name, `{"spec":{"activeDeadlineSeconds":5}}`, surgeChanges},
		{"add a finalizer to a replacement", rep.Name, `{"metadata":{"finalizers":["example.com/keep"]}}`, surgeChanges},
		{"give a replacement another owner", rep.Name, `{"metadata":{"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"x","uid":"x","controller":true}]}}`, surgeChanges},
	} {
		_, err := sa.Pods(ns).Patch(ctx, tc.pod, types.MergePatchType, []byte(tc.patch), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		if tc.refusal == "" && err != nil || tc.refusal != "" && refused(err, tc.refusal) != nil {
			t.Errorf("%s: %v, want refused: %q", tc.what, err, tc.refusal)
		}
	}
	err = sa.Pods(ns).Delete(ctx, rep.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsForbidden(err) {
		t.Errorf("vacate-controller deleting a pod: %v, want Forbidden (RBAC)", err)
	}
}

// TestTenantsCannotForgeReplacements: the policy vacate-surge-labels lets
// no one but vacate-controller create a pod that carries vacate's surge
// labels or an owner reference to a NodeDrain, or add them to a pod: not a
// tenant with the right to edit pods in its namespace, nor an admin. A
// tenant's own pods are not affected, and removing the labels (as a person
// cleaning up a replacement left behind) is allowed.
func TestTenantsCannotForgeReplacements(t *testing.T) {
	c := testenv.Start(t)
	cl := install(t, c)
	ctx := testenv.Context(t)
	node := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "rbac-forge", Count: 1})[0]
	ns := testenv.Namespace(t, c)
	nd := surgeDrain(t, cl, node)
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tina-edit"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "tina"}}}
	if _, err := c.Client.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tina := userClient(t, c, "tina")
	check(t, "tina creating a pod of her own", func() error {
		return tina.Create(ctx, devcluster.BarePod(ns, "mine", node), client.DryRunAll)
	})
	forged := func(f func(*corev1.Pod)) *corev1.Pod {
		p := devcluster.BarePod(ns, "forged", node)
		f(p)
		return p
	}
	check(t, "the policy refusing a tenant's pod labelled as a replacement", func() error {
		return refused(tina.Create(ctx, forged(func(p *corev1.Pod) { p.Labels[surge.LabelOf] = "uid-1" }), client.DryRunAll), surgeForged)
	})
	for _, tc := range []struct {
		what string
		pod  *corev1.Pod
	}{
		{"the label vacate.dev/surge-of", forged(func(p *corev1.Pod) { p.Labels[surge.LabelOf] = "uid-1" })},
		{"the label vacate.dev/surge-drain", forged(func(p *corev1.Pod) { p.Labels[surge.LabelDrain] = node })},
		{"an owner reference to the NodeDrain", forged(func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeDrain", Name: nd.Name, UID: nd.UID}}
		})},
	} {
		for who, as := range map[string]client.Client{"tina": tina, "an admin": cl} {
			if err := refused(as.Create(ctx, tc.pod.DeepCopy(), client.DryRunAll), surgeForged); err != nil {
				t.Errorf("%s creating a pod with %s: %v", who, tc.what, err)
			}
		}
	}
	mine := devcluster.BarePod(ns, "mine", node)
	if err := tina.Create(ctx, mine); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ what, patch string }{
		{"label her pod vacate.dev/surge-of", `{"metadata":{"labels":{"vacate.dev/surge-of":"uid-1"}}}`},
		{"label her pod vacate.dev/surge-drain", `{"metadata":{"labels":{"vacate.dev/surge-drain":"` + node + `"}}}`},
		{"make the NodeDrain her pod's owner", `{"metadata":{"ownerReferences":[{"apiVersion":"vacate.dev/v1alpha1","kind":"NodeDrain","name":"` +
			nd.Name + `","uid":"` + string(nd.UID) + `"}]}}`},
	} {
		err := tina.Patch(ctx, mine.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(tc.patch)), client.DryRunAll)
		if err := refused(err, surgeForged); err != nil {
			t.Errorf("tina trying to %s: %v", tc.what, err)
		}
	}

	// A replacement vacate made, left behind: a person may remove its labels.
	bindSurge(t, c, cl)
	sa := clientset(t, asServiceAccount(c)).CoreV1()
	var rep *corev1.Pod
	check(t, "the service account creating a replacement", func() error {
		var err error
		rep, err = sa.Pods(ns).Create(ctx, trueReplacement(ns, nd), metav1.CreateOptions{})
		return err
	})
	if rep != nil {
		_, err := c.Client.CoreV1().Pods(ns).Patch(ctx, rep.Name, types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"vacate.dev/surge-of":null,"vacate.dev/surge-drain":null},"ownerReferences":null}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Errorf("an admin removing vacate's labels from a replacement: %v", err)
		}
	}
}

// TestSurgeWithoutItsBindingSaysSo: installed without the binding of
// vacate-controller-surge, the controller (as its service account) drains
// a node under a policy that surges: the pod that needs a surge is blocked
// (SurgeFailed) with the API server's refusal and the role to bind; the
// node's other pod is evicted all the same.
func TestSurgeWithoutItsBindingSaysSo(t *testing.T) {
	c := testenv.Start(t)
	cl := install(t, c)
	ctx := testenv.Context(t)
	sel := map[string]string{"rbac-test": "surge-unbound"}
	node := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "rbac-unbound", Count: 1, Labels: sel})[0]
	ns := testenv.Namespace(t, c)
	nd := &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: node, UID: "probe"}} // a dry run: RBAC refuses first
	sa := clientset(t, asServiceAccount(c)).CoreV1()
	check(t, "RBAC refusing the service account's pod creates", func() error {
		_, err := sa.Pods(ns).Create(ctx, trueReplacement(ns, nd), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if !apierrors.IsForbidden(err) {
			return fmt.Errorf("%v, want forbidden", err)
		}
		return nil
	})

	dp := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "rbac-surge-unbound"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: sel},
		Surge:        v1alpha1.Surge{Pods: v1alpha1.SurgeAll},
		Pods:         v1alpha1.PodPolicy{Unmanaged: "Delete"},
	}}
	if err := cl.Create(ctx, dp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), dp) })
	dep := devcluster.Deployment(ns, "web", 1)
	dep.Spec.Template.Spec.NodeSelector = sel
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, devcluster.PDB(ns, "web", "web", "1", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, devcluster.BarePod(ns, "zz-bare", node), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, err := devcluster.WaitForPodsReady(ctx, c.Client, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: "web"}), 1, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.WaitForPDB(ctx, c.Client, ns, "web", 1, time.Minute); err != nil {
		t.Fatal(err)
	}

	startController(t, c)
	if err := requests.Apply(ctx, cl, node, v1alpha1.Requester{Name: "rbac-test"}, v1alpha1.ModeMaintenance, dp.Name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cl.Delete(context.Background(), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: node}})
	})
	describe := func(nd *v1alpha1.NodeDrain) string { return testenv.DescribeDrain(nd) }
	got := testenv.WaitForDrain(t, cl, node, "web's pod blocked by SurgeFailed, the bare pod evicted", 3*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		for _, b := range nd.Status.Blockers {
			if b.Pod == ns+"/"+pods[0].Name && b.Reason == v1alpha1.BlockerSurgeFailed {
				return nd.Status.Evicted == 1
			}
		}
		return false
	}, describe)
	for _, b := range got.Status.Blockers {
		t.Logf("blocker %s %s: %s", b.Pod, b.Reason, b.Detail)
		for _, want := range []string{"forbidden", "vacate-controller-surge", "vacate manifests surge"} {
			if b.Reason == v1alpha1.BlockerSurgeFailed && !strings.Contains(b.Detail, want) {
				t.Errorf("the blocker does not say %q: %s", want, b.Detail)
			}
		}
	}
	testutil.Eventually(t, patience, "the bare pod gone", func() error {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "zz-bare", metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && !p.DeletionTimestamp.IsZero() {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
}
