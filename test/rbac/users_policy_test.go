package rbac

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/config/bundle"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/devwebhook"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/operator"
	"github.com/vacate-dev/vacate/internal/requests"
	"github.com/vacate-dev/vacate/internal/webhook"
)

// serveController runs vacate-controller in process as its service
// account, serving its admission webhooks on loopback, until stop or the
// end of the test; the NodeDrain policy webhook's configuration (which
// install leaves out) calls it there until the test ends.
func serveController(t *testing.T, c *devcluster.Cluster) (stop func()) {
	t.Helper()
	local, err := devwebhook.InstallNodeDrainPolicy(c.RESTConfig, namespace)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := local.Uninstall(context.Background(), c.Client); err != nil {
			t.Errorf("uninstalling the NodeDrain policy webhook: %v", err)
		}
	})
	opts := operator.InProcessOptions()
	opts.Webhook = webhook.Options{Addr: local.Addr(), CertDir: local.CertDir(), Namespace: namespace}
	halt, err := operator.Start(context.Background(), asServiceAccount(c), opts)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		if err := halt(); err != nil {
			t.Errorf("controller exited with %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// TestNamedPolicyMustSelectTheNode (item 5): a grant "for the pool batch"
// is a verb on the DrainPolicy batch, so it must not work on a node of
// another pool. A person who is not a manager may name only a policy whose
// nodeSelector selects the drain's node, a policy with no nodeSelector
// (one that governs no node and exists to be named), or default: bea, who
// may use and force under batch, is refused naming batch on a web node,
// with or without a deadline, and by changing the policy of a drain there;
// she names batch on a batch node. vacate-controller checks it (a
// validating webhook: the API server's policies cannot read a node's
// labels). A manager (vacate-agent's role) is not checked; while the
// controller is down, managers and people who join a drain are not held
// up, and a person naming a policy is refused in one line that says why.
func TestNamedPolicyMustSelectTheNode(t *testing.T) {
	c := testenv.Start(t)
	cl := install(t, c)
	ctx := testenv.Context(t)
	batch := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "rbac-pool-batch", Count: 1, Labels: map[string]string{"rbac-pool": "batch"}})[0]
	web := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "rbac-pool-web", Count: 1, Labels: map[string]string{"rbac-pool": "web"}})[0]
	const pool, anywhere = "rbac-pool-batch", "rbac-pool-anywhere"
	dp := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: pool},
		Spec: v1alpha1.DrainPolicySpec{NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"rbac-pool": "batch"}}}}
	if err := cl.Create(ctx, dp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), dp) })
	policies(t, cl, anywhere)
	kc := bindUser(t, c, "bea", "vacate-user")
	verbsOn(t, c, cl, "bea", []string{"use", "force"}, pool)
	verbsOn(t, c, cl, "bea", []string{"use"}, anywhere)
	bea := client.NewDryRunClient(userClient(t, c, "bea"))
	waitForUser(t, bea, "bea")
	// A manager with vacate-agent's role, and use on the policy its
	// --policy names (manage lifts every limit but use).
	agentRole(t, c, cl, "agent-p")
	verbsOn(t, c, cl, "agent-p", []string{"use"}, pool)
	agent := userClient(t, c, "agent-p")
	stop := serveController(t, c)

	notSelected := "DrainPolicy " + pool + " does not select node " + web
	// A server dry run until the controller's webhook answers, then the
	// command itself: nothing is stored either way.
	check(t, "bea naming "+pool+" on "+web+" (server dry run)", func() error {
		code, out := vacate(t, kc, "drain", web, "--policy", pool, "--dry-run=server")
		if code == 0 {
			return fmt.Errorf("exit 0, want refused: %s", out)
		}
		return errorLine(out, notSelected)
	})
	code, out := vacate(t, kc, "drain", web, "--policy", pool)
	if code == 0 {
		t.Errorf("bea's vacate drain %s --policy %s: exit 0, want refused", web, pool)
	}
	if err := errorLine(out, notSelected, "without --policy"); err != nil {
		t.Errorf("bea's vacate drain %s --policy %s: %v", web, pool, err)
	}
	soon := &metav1.Time{Time: time.Now().Add(time.Hour).Truncate(time.Second)}
	if err := refused(requests.Apply(ctx, bea, web, v1alpha1.Requester{Name: "cli:bea", Deadline: soon}, "", pool), notSelected); err != nil {
		t.Errorf("bea forcing on %s under %s: %v", web, pool, err)
	}
	if code, out := vacate(t, kc, "drain", batch, "--policy", pool, "--dry-run=server"); code != 0 {
		t.Errorf("bea naming %s on %s: exit %d: %s", pool, batch, code, out)
	}
	if err := requests.Apply(ctx, bea, web, v1alpha1.Requester{Name: "cli:bea"}, "", anywhere); err != nil {
		t.Errorf("bea naming %s, which has no nodeSelector, on %s: %v", anywhere, web, err)
	}
	if err := requests.Apply(ctx, client.NewDryRunClient(agent), web, v1alpha1.Requester{Name: "agent:test"}, "", pool); err != nil {
		t.Errorf("a manager naming %s on %s: %v", pool, web, err)
	}

	t.Log("a drain of " + web + " under " + anywhere + ": bea may not move it to " + pool)
	if err := requests.Apply(ctx, cl, web, v1alpha1.Requester{Name: "cli:someone"}, "", anywhere); err != nil {
		t.Fatal(err)
	}
	deleteDrainAfter(t, cl, web)
	if err := refused(mergePatch(ctx, bea, web, `{"spec":{"policyName":"`+pool+`"}}`), notSelected); err != nil {
		t.Errorf("bea moving the drain of %s to %s: %v", web, pool, err)
	}

	t.Log("vacate-controller stops: naming a policy is refused in one line; managers and joiners go on")
	stop()
	code, out = vacate(t, kc, "drain", batch, "--policy", pool, "--dry-run=server")
	if code == 0 {
		t.Errorf("bea naming %s on %s with the controller down: exit 0, want refused", pool, batch)
	}
	if err := errorLine(out, "vacate-controller", "did not answer", "without --policy"); err != nil {
		t.Errorf("bea naming a policy with the controller down: %v", err)
	}
	if err := requests.Apply(ctx, agent, batch, v1alpha1.Requester{Name: "agent:aws-spot", Deadline: soon}, v1alpha1.ModeDecommission, pool); err != nil {
		t.Errorf("a manager requesting a drain under %s with the controller down: %v", pool, err)
	}
	deleteDrainAfter(t, cl, batch)
	if err := requests.Apply(ctx, bea, batch, v1alpha1.Requester{Name: "cli:bea"}, v1alpha1.ModeDecommission, pool); err != nil {
		t.Errorf("bea joining the drain under %s with the controller down: %v", pool, err)
	}
	if code, out := vacate(t, kc, "drain", web, "--dry-run=server"); code != 0 {
		t.Errorf("bea joining the drain of %s with the controller down: exit %d: %s", web, code, out)
	}
}

// TestControllerChangesOnlyCABundleOfItsPolicyWebhook: vacate-controller
// may update the ValidatingWebhookConfiguration vacate-nodedrain-policy
// (RBAC, by name), to inject the CA of the certificate it rotates; the
// ValidatingAdmissionPolicy vacate-controller-nodedrain-webhook keeps that
// to the webhook's clientConfig.caBundle. A stolen controller token cannot
// send itself other requests (every Secret, say), turn the check off or
// make it fail open; RBAC gives it no create, delete, nor any other
// configuration. The controller, as its service account, injects its CA.
func TestControllerChangesOnlyCABundleOfItsPolicyWebhook(t *testing.T) {
	c := testenv.Start(t)
	install(t, c)
	ctx := testenv.Context(t)
	admin := c.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	sa := clientset(t, asServiceAccount(c)).AdmissionregistrationV1().ValidatingWebhookConfigurations()
	// The configuration as 'vacate manifests install' makes it (install
	// leaves it out: it fails closed, and no controller serves it here).
	for _, obj := range testenv.Objects(t, installed(t, "ValidatingWebhookConfiguration")) {
		if err := testenv.DrainClient(t, c).Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner("rbac-test"), client.ForceOwnership); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = admin.Delete(context.Background(), webhook.NodeDrainConfigurationName, metav1.DeleteOptions{})
	})
	dryRun := []string{metav1.DryRunAll}
	try := func(change func(*admissionregistrationv1.ValidatingWebhook), refusal string) error {
		cfg, err := admin.Get(ctx, webhook.NodeDrainConfigurationName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(&cfg.Webhooks[0])
		_, err = sa.Update(ctx, cfg, metav1.UpdateOptions{DryRun: dryRun})
		if refusal == "" {
			return err
		}
		return refused(err, refusal)
	}
	const fields = "vacate-controller may change only the CA bundle (clientConfig.caBundle) of its webhooks"
	url := "https://attacker.example/validate"
	check(t, "the policy refusing a URL", func() error {
		return try(func(h *admissionregistrationv1.ValidatingWebhook) {
			h.ClientConfig.Service, h.ClientConfig.URL = nil, &url
		}, fields)
	})
	caBundle, _, err := certutil.GenerateSelfSignedCertKey("rbac-test-ca", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range []struct {
		what    string
		change  func(*admissionregistrationv1.ValidatingWebhook)
		refusal string
	}{
		{"point at another Service", func(h *admissionregistrationv1.ValidatingWebhook) { h.ClientConfig.Service.Name = "evil" }, fields},
		{"get every Secret", func(h *admissionregistrationv1.ValidatingWebhook) {
			h.Rules[0].APIGroups, h.Rules[0].Resources, h.Rules[0].Scope = []string{""}, []string{"secrets"}, ptr.To(admissionregistrationv1.AllScopes)
		}, fields},
		{"fail open", func(h *admissionregistrationv1.ValidatingWebhook) {
			h.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		}, fields},
		{"drop the match conditions", func(h *admissionregistrationv1.ValidatingWebhook) { h.MatchConditions = nil }, fields},
		{"match managers too", func(h *admissionregistrationv1.ValidatingWebhook) { h.MatchConditions = h.MatchConditions[:1] }, fields},
		{"wait longer", func(h *admissionregistrationv1.ValidatingWebhook) { h.TimeoutSeconds = ptr.To[int32](30) }, fields},
		{"rename the webhook", func(h *admissionregistrationv1.ValidatingWebhook) { h.Name = "renamed.rbac-test.example" },
			"vacate-controller may not add, remove, rename or reorder the webhooks of its configuration"},
		{"inject a CA bundle", func(h *admissionregistrationv1.ValidatingWebhook) { h.ClientConfig.CABundle = caBundle }, ""},
	} {
		if err := try(ch.change, ch.refusal); err != nil {
			t.Errorf("%s: %v", ch.what, err)
		}
	}
	other := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "rbac-test-other"}}
	if _, err := admin.Create(ctx, other, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), other.Name, metav1.DeleteOptions{}) })
	for what, err := range map[string]error{
		"create a configuration": func() error {
			_, err := sa.Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "rbac-test-new"}},
				metav1.CreateOptions{DryRun: dryRun})
			return err
		}(),
		"delete its configuration": sa.Delete(ctx, webhook.NodeDrainConfigurationName, metav1.DeleteOptions{DryRun: dryRun}),
		"update another configuration": func() error {
			o, err := admin.Get(ctx, other.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			o.Labels = map[string]string{"rbac-test": "x"}
			_, err = sa.Update(ctx, o, metav1.UpdateOptions{DryRun: dryRun})
			return err
		}(),
	} {
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "cannot") {
			t.Errorf("the service account trying to %s: %v, want forbidden by RBAC", what, err)
		}
	}

	t.Log("the controller, as the service account, injects its CA")
	opts := operator.InProcessOptions()
	opts.Webhook = webhook.Options{Addr: testutil.FreeAddr(t), CertDir: t.TempDir(), Rotate: true, Namespace: namespace,
		RotatorName: rotatorName("policy-webhook-test")}
	stop, err := operator.Start(context.Background(), asServiceAccount(c), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("controller exited with %v", err)
		}
		// The certificate's Secret as install made it (empty), for the
		// next test that rotates.
		s, err := c.Client.CoreV1().Secrets(namespace).Get(context.Background(), webhook.SecretName, metav1.GetOptions{})
		if err == nil {
			s.Data = nil
			_, err = c.Client.CoreV1().Secrets(namespace).Update(context.Background(), s, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Errorf("emptying the webhook's Secret: %v", err)
		}
	})
	testutil.Eventually(t, patience, "the controller injecting its CA bundle", func() error {
		s, err := c.Client.CoreV1().Secrets(namespace).Get(ctx, webhook.SecretName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cfg, err := admin.Get(ctx, webhook.NodeDrainConfigurationName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ca := s.Data["ca.crt"]; len(ca) == 0 || string(cfg.Webhooks[0].ClientConfig.CABundle) != string(ca) {
			return fmt.Errorf("the webhook's caBundle has %d bytes, the Secret's CA %d", len(cfg.Webhooks[0].ClientConfig.CABundle), len(ca))
		}
		return nil
	})
}

// installed is the documents of kind in what 'vacate manifests install'
// prints.
func installed(t *testing.T, kind string) string {
	t.Helper()
	docs, err := bundle.Install("registry.example/vacate-controller:v0", false)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, obj := range testenv.Objects(t, bundle.Join(docs)) {
		if obj.GetKind() == kind {
			b, err := yaml.Marshal(obj.Object)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, string(b))
		}
	}
	if len(out) == 0 {
		t.Fatalf("'vacate manifests install' has no %s", kind)
	}
	return strings.Join(out, "---\n")
}
