package webhook_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/devwebhook"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/evictionrequest"
	"github.com/vacate-dev/vacate/internal/hook"
	"github.com/vacate-dev/vacate/internal/operator"
	"github.com/vacate-dev/vacate/internal/webhook"
)

// testPriority is the --eviction-responder-priority the tests' controllers
// run with: not the default, so that a declaration shows the flag's way
// through.
const testPriority = 7000

// responderCase is one pod the tests create through the API server, and the
// responders it must come out with ("name=priority", in order).
type responderCase struct {
	name, ns string
	// annotations and labels of the pod; declared, the responders it
	// declares itself.
	annotations, labels map[string]string
	declared            []corev1.EvictionResponder
	want                []string
}

// createResponderCase creates the case's pod and returns the responders the
// API server stored.
func createResponderCase(t *testing.T, c *devcluster.Cluster, tc responderCase) []string {
	t.Helper()
	p := devcluster.BarePod(tc.ns, tc.name, "") // never scheduled: only admission matters
	p.Annotations = tc.annotations
	for k, v := range tc.labels {
		p.Labels[k] = v
	}
	p.Spec.EvictionResponders = tc.declared
	got, err := c.Client.CoreV1().Pods(tc.ns).Create(testenv.Context(t), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s: %v", tc.name, err)
	}
	return responderList(got)
}

func responderList(p *corev1.Pod) []string {
	var out []string
	for _, r := range p.Spec.EvictionResponders {
		out = append(out, fmt.Sprintf("%s=%d", r.Name, ptr.Deref(r.Priority, -1)))
	}
	return out
}

func checkResponderCases(t *testing.T, c *devcluster.Cluster, cases []responderCase) {
	t.Helper()
	for _, tc := range cases {
		if got := createResponderCase(t, c, tc); strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("pod %s in %s (annotations %v, labels %v): evictionResponders %v, want %v", tc.name, tc.ns, tc.annotations, tc.labels, got, tc.want)
		}
	}
}

// optedInNamespace is a new namespace of the test, labelled with the opt-in.
func optedInNamespace(t *testing.T, c *devcluster.Cluster) string {
	t.Helper()
	ctx := testenv.Context(t)
	name := testenv.Namespace(t, c)
	ns, err := c.Client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels[v1alpha1.LabelEvictionResponder] = "true"
	if _, err := c.Client.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

// startResponderWebhook installs the webhooks' configuration on the dev
// cluster, starts a controller that serves them (coordinating
// EvictionRequests: the package's cluster serves the API) and waits until
// an opted-in pod with a hook gets vacate's responder.
func startResponderWebhook(t *testing.T, c *devcluster.Cluster) (client.Client, func() error) {
	t.Helper()
	local, err := devwebhook.Install(c.RESTConfig, "vacate-system")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = local.Uninstall(context.Background(), c.Client) })
	cl, stop := testenv.StartController(t, c, func(o *operator.Options) {
		o.Webhook = webhook.Options{Addr: local.Addr(), CertDir: local.CertDir(), Namespace: "vacate-system", ResponderPriority: testPriority}
	})
	ctx := testenv.Context(t)
	ns := testenv.Namespace(t, c)
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p := devcluster.BarePod(ns, "", "")
		p.GenerateName = "probe-"
		p.Annotations = map[string]string{v1alpha1.LabelEvictionResponder: "true", hook.AnnotationPort: "8080"}
		got, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return evictionrequest.DeclaresResponder(got, evictionrequest.VacateResponder), nil
	})
	if err != nil {
		_ = stop()
		t.Fatalf("the webhook never declared vacate's responder: %v", err)
	}
	return cl, stop
}

// TestWebhookDeclaresVacatesResponder: with vacate-controller serving the
// webhooks and coordinating EvictionRequests, a pod created through the
// API server with the opt-in (its namespace's label or its annotation) gets
// vacate's responder at the configured priority when it has an HTTP hook or
// an EvacuationProvider selects it, after the responders it declares
// itself; a pod that declares vacate's responder keeps its own entry. A pod
// of a namespace that did not opt in, an opted-out pod and a pod vacate
// would do nothing for get none. With the controller stopped, pods are
// still created (the webhook fails open), without the declaration.
func TestWebhookDeclaresVacatesResponder(t *testing.T) {
	c := testenv.Start(t)
	if !c.EvictionRequestAPI {
		t.Fatal("the package's dev cluster does not serve the EvictionRequest API (testenv.EvictionRequestAPI in TestMain)")
	}
	cl, stop := startResponderWebhook(t, c)
	ctx := testenv.Context(t)
	opted, plain := optedInNamespace(t, c), testenv.Namespace(t, c)
	provider := &v1alpha1.EvacuationProvider{ObjectMeta: metav1.ObjectMeta{GenerateName: "responder-test-"}, Spec: v1alpha1.EvacuationProviderSpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"vacate.dev/test-storage": opted}}}}
	if err := cl.Create(ctx, provider); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), provider) })
	hooked := map[string]string{hook.AnnotationPort: "8080"}
	stored := map[string]string{"vacate.dev/test-storage": opted}
	vacate := fmt.Sprintf("%s=%d", evictionrequest.VacateResponder, testPriority)
	theirs := corev1.EvictionResponder{Name: "db.example.com/failover", Priority: ptr.To[int32](20000)}
	// The provider's cache may lag its create by a moment.
	t.Log("waiting for the webhook to see the EvacuationProvider")
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p := devcluster.BarePod(opted, "", "")
		p.GenerateName, p.Labels["vacate.dev/test-storage"] = "provider-probe-", opted
		got, err := c.Client.CoreV1().Pods(opted).Create(ctx, p, metav1.CreateOptions{})
		return err == nil && evictionrequest.DeclaresResponder(got, evictionrequest.VacateResponder), err
	})
	if err != nil {
		t.Fatalf("a pod the EvacuationProvider selects never got vacate's responder: %v", err)
	}
	checkResponderCases(t, c, []responderCase{
		{name: "hooked", ns: opted, annotations: hooked, want: []string{vacate}},
		{name: "provided", ns: opted, labels: stored, want: []string{vacate}},
		{name: "neither", ns: opted},
		{name: "opted-out", ns: opted, annotations: map[string]string{hook.AnnotationPort: "8080", v1alpha1.LabelEvictionResponder: "false"}},
		{name: "annotated", ns: plain, annotations: map[string]string{hook.AnnotationPort: "8080", v1alpha1.LabelEvictionResponder: "true"}, want: []string{vacate}},
		{name: "not-opted-in", ns: plain, annotations: hooked},
		{name: "theirs-first", ns: opted, annotations: hooked, declared: []corev1.EvictionResponder{theirs},
			want: []string{"db.example.com/failover=20000", vacate}},
		{name: "own-entry", ns: opted, annotations: hooked,
			declared: []corev1.EvictionResponder{{Name: evictionrequest.VacateResponder, Priority: ptr.To[int32](30000)}},
			want:     []string{evictionrequest.VacateResponder + "=30000"}},
	})

	t.Log("the controller stops: pod creation goes on, without the declaration")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkResponderCases(t, c, []responderCase{
		{name: "hooked-while-down", ns: opted, annotations: hooked},
		{name: "annotated-while-down", ns: plain, annotations: map[string]string{hook.AnnotationPort: "8080", v1alpha1.LabelEvictionResponder: "true"}},
	})
}

// TestResponderWebhookChangesOnlyOptedInPods is the abuse test of the
// eviction-responder webhook. A tenant who may create pods gets vacate's
// responder only on its own pods, by asking (no more than it could write in
// their spec itself). An admin who widens the webhooks by hand, so that the
// API server sends every pod creation (no namespace selector, no match
// condition), still gets no responder on a pod whose namespace and
// annotation did not opt in, none in the controller's own namespace, and a
// pod's own responders are never changed nor removed.
func TestResponderWebhookChangesOnlyOptedInPods(t *testing.T) {
	c := testenv.Start(t)
	_, stop := startResponderWebhook(t, c)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("controller exited with %v", err)
		}
	})
	ctx := testenv.Context(t)
	admin := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	cfg, err := admin.Get(ctx, webhook.ConfigurationName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	widened := 0
	for i := range cfg.Webhooks {
		h := &cfg.Webhooks[i]
		if strings.HasSuffix(h.Name, "eviction-responder.vacate.dev") {
			h.NamespaceSelector, h.MatchConditions = &metav1.LabelSelector{}, nil
			h.ObjectSelector = &metav1.LabelSelector{}
			widened++
		}
	}
	if widened != 2 {
		t.Fatalf("found %d eviction-responder webhooks in %s, want 2", widened, webhook.ConfigurationName)
	}
	if _, err := admin.Update(ctx, cfg, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Log("the configuration widened by hand: every pod creation is sent")
	controllerNS := "vacate-system"
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: controllerNS}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Pods(controllerNS).Delete(context.Background(), "controller", metav1.DeleteOptions{})
	})
	tenant, opted := testenv.Namespace(t, c), optedInNamespace(t, c)
	hooked := map[string]string{hook.AnnotationPort: "8080"}
	theirs := []corev1.EvictionResponder{
		{Name: "db.example.com/failover", Priority: ptr.To[int32](90000)},
		{Name: "backup.example.com/flush", Priority: ptr.To[int32](1000)},
	}
	vacate := fmt.Sprintf("%s=%d", evictionrequest.VacateResponder, testPriority)
	checkResponderCases(t, c, []responderCase{
		// Sent now, and refused by the handler's own check of the opt-in.
		{name: "not-opted-in", ns: tenant, annotations: hooked},
		{name: "not-opted-in-theirs", ns: tenant, annotations: hooked, declared: theirs,
			want: []string{"db.example.com/failover=90000", "backup.example.com/flush=1000"}},
		{name: "opted-out", ns: opted, annotations: map[string]string{hook.AnnotationPort: "8080", v1alpha1.LabelEvictionResponder: "false"}},
		// The tenant's own pods, by asking: added after theirs, which stay as written.
		{name: "asked", ns: tenant, annotations: map[string]string{hook.AnnotationPort: "8080", v1alpha1.LabelEvictionResponder: "true"},
			declared: theirs, want: []string{"db.example.com/failover=90000", "backup.example.com/flush=1000", vacate}},
		// The controller's own namespace, labelled and annotated: never.
		{name: "controller", ns: controllerNS, annotations: map[string]string{hook.AnnotationPort: "8080", v1alpha1.LabelEvictionResponder: "true"}},
	})
}

// TestResponderWebhooksAreInTheInstalledConfiguration: the eviction-responder
// webhooks sit in the configuration whose CA the controller injects (and
// whose other fields the policy vacate-controller-webhook keeps it from
// changing), each at its own path, failing open, for pod creations only.
func TestResponderWebhooksAreInTheInstalledConfiguration(t *testing.T) {
	cfg := webhook.Configuration(admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://localhost:9443" + webhook.Path)}, "vacate-system")
	var names []string
	for _, h := range cfg.Webhooks {
		names = append(names, h.Name+" "+ptr.Deref(h.ClientConfig.URL, ""))
		if *h.FailurePolicy != admissionregistrationv1.Ignore || *h.TimeoutSeconds != 5 || *h.SideEffects != admissionregistrationv1.SideEffectClassNone ||
			len(h.Rules) != 1 || len(h.Rules[0].Operations) != 1 || h.Rules[0].Operations[0] != admissionregistrationv1.Create {
			t.Errorf("webhook %s: failurePolicy %s, timeout %d, sideEffects %s, rules %v; want Ignore, 5, None, pod CREATE only",
				h.Name, *h.FailurePolicy, *h.TimeoutSeconds, *h.SideEffects, h.Rules)
		}
	}
	want := []string{
		"namespaces.endpoint-aware.vacate.dev https://localhost:9443" + webhook.Path,
		"pods.endpoint-aware.vacate.dev https://localhost:9443" + webhook.Path,
		"namespaces.eviction-responder.vacate.dev https://localhost:9443" + webhook.ResponderPath,
		"pods.eviction-responder.vacate.dev https://localhost:9443" + webhook.ResponderPath,
	}
	if strings.Join(names, "\n") != strings.Join(want, "\n") {
		t.Errorf("the configuration's webhooks:\n%s\nwant:\n%s", strings.Join(names, "\n"), strings.Join(want, "\n"))
	}
}
