package rbac

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"

	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/operator"
	"github.com/vacate-dev/vacate/internal/webhook"
)

// webhookChange is one change the controller's service account tries on its
// MutatingWebhookConfiguration.
type webhookChange struct {
	what   string
	change func(*admissionregistrationv1.MutatingWebhookConfiguration)
	// refusal is the policy's message; "" means the change is allowed.
	refusal string
}

// eachHook changes every webhook of the configuration.
func eachHook(f func(*admissionregistrationv1.MutatingWebhook)) func(*admissionregistrationv1.MutatingWebhookConfiguration) {
	return func(cfg *admissionregistrationv1.MutatingWebhookConfiguration) {
		for i := range cfg.Webhooks {
			f(&cfg.Webhooks[i])
		}
	}
}

// TestControllerChangesOnlyCABundleOfItsWebhook: the
// ValidatingAdmissionPolicy vacate-controller-webhook lets the controller's
// service account, which may update its MutatingWebhookConfiguration (to
// inject the CA of the certificate it rotates), change only the webhooks'
// clientConfig.caBundle: not where the API server sends pods, which pods,
// how a failure is handled, which webhooks there are, nor the
// configuration's metadata. RBAC gives it no create or delete, and no other
// configuration. The controller, as the service account, still injects its
// CA (cert-controller).
func TestControllerChangesOnlyCABundleOfItsWebhook(t *testing.T) {
	c := testenv.Start(t)
	install(t, c)
	ctx := testenv.Context(t)
	admin := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	sa := clientset(t, asServiceAccount(c)).AdmissionregistrationV1().MutatingWebhookConfigurations()
	try := func(ch webhookChange) error {
		cfg, err := admin.Get(ctx, webhook.ConfigurationName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ch.change(cfg)
		_, err = sa.Update(ctx, cfg, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		if ch.refusal == "" {
			return err
		}
		return refused(err, ch.refusal)
	}
	const (
		fields   = "vacate-controller may change only the CA bundle (clientConfig.caBundle) of its webhooks"
		webhooks = "vacate-controller may not add, remove, rename or reorder the webhooks of its configuration"
		metadata = "vacate-controller may not change the labels, annotations, owner references or finalizers of its webhook configuration"
	)
	url := "https://attacker.example/mutate"
	check(t, "the policy refusing a URL", func() error {
		return try(webhookChange{change: eachHook(func(h *admissionregistrationv1.MutatingWebhook) {
			h.ClientConfig.Service, h.ClientConfig.URL = nil, &url
		}), refusal: fields})
	})
	caBundle, _, err := certutil.GenerateSelfSignedCertKey("rbac-test-ca", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range []webhookChange{
		{"point at another Service", eachHook(func(h *admissionregistrationv1.MutatingWebhook) { h.ClientConfig.Service.Name = "evil" }), fields},
		{"point at another namespace", eachHook(func(h *admissionregistrationv1.MutatingWebhook) { h.ClientConfig.Service.Namespace = "default" }), fields},
		{"change the path", eachHook(func(h *admissionregistrationv1.MutatingWebhook) { h.ClientConfig.Service.Path = ptr.To("/steal") }), fields},
		{"change the port", eachHook(func(h *admissionregistrationv1.MutatingWebhook) { h.ClientConfig.Service.Port = ptr.To[int32](8443) }), fields},
		{"get pod updates too", eachHook(func(h *admissionregistrationv1.MutatingWebhook) {
			h.Rules[0].Operations = append(h.Rules[0].Operations, admissionregistrationv1.Update)
		}), fields},
		{"get every resource", eachHook(func(h *admissionregistrationv1.MutatingWebhook) { h.Rules[0].Resources = []string{"*"} }), fields},
		{"get every namespace", eachHook(func(h *admissionregistrationv1.MutatingWebhook) { h.NamespaceSelector = &metav1.LabelSelector{} }), fields},
		{"select objects", eachHook(func(h *admissionregistrationv1.MutatingWebhook) {
			h.ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"rbac-test": "x"}}
		}), fields},
		{"drop the match conditions", eachHook(func(h *admissionregistrationv1.MutatingWebhook) { h.MatchConditions = nil }), fields},
		{"fail closed", eachHook(func(h *admissionregistrationv1.MutatingWebhook) {
			h.FailurePolicy = ptr.To(admissionregistrationv1.Fail)
		}), fields},
		{"declare side effects", eachHook(func(h *admissionregistrationv1.MutatingWebhook) {
			h.SideEffects = ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun)
		}), fields},
		{"wait longer", eachHook(func(h *admissionregistrationv1.MutatingWebhook) { h.TimeoutSeconds = ptr.To[int32](30) }), fields},
		{"match exactly", eachHook(func(h *admissionregistrationv1.MutatingWebhook) {
			h.MatchPolicy = ptr.To(admissionregistrationv1.Exact)
		}), fields},
		{"be reinvoked", eachHook(func(h *admissionregistrationv1.MutatingWebhook) {
			h.ReinvocationPolicy = ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy)
		}), fields},
		{"change the review versions", eachHook(func(h *admissionregistrationv1.MutatingWebhook) {
			h.AdmissionReviewVersions = []string{"v1", "v1beta1"}
		}), fields},
		{"add a webhook", func(cfg *admissionregistrationv1.MutatingWebhookConfiguration) {
			h := *cfg.Webhooks[0].DeepCopy()
			h.Name, h.NamespaceSelector, h.MatchConditions = "all.rbac-test.example", &metav1.LabelSelector{}, nil
			cfg.Webhooks = append(cfg.Webhooks, h)
		}, webhooks},
		{"remove a webhook", func(cfg *admissionregistrationv1.MutatingWebhookConfiguration) { cfg.Webhooks = cfg.Webhooks[:1] }, webhooks},
		{"rename a webhook", func(cfg *admissionregistrationv1.MutatingWebhookConfiguration) {
			cfg.Webhooks[0].Name = "renamed.rbac-test.example"
		}, webhooks},
		{"add a label", func(cfg *admissionregistrationv1.MutatingWebhookConfiguration) { cfg.Labels["rbac-test"] = "x" }, metadata},
		{"add an annotation", func(cfg *admissionregistrationv1.MutatingWebhookConfiguration) {
			cfg.Annotations = map[string]string{"rbac-test": "x"}
		}, metadata},
		{"add an owner reference", func(cfg *admissionregistrationv1.MutatingWebhookConfiguration) {
			cfg.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Namespace", Name: "default", UID: "0b8e7e8e-0000-4000-8000-000000000000"}}
		}, metadata},
		{"add a finalizer", func(cfg *admissionregistrationv1.MutatingWebhookConfiguration) {
			cfg.Finalizers = append(cfg.Finalizers, "example.com/keep")
		}, metadata},
		{"inject a CA bundle", eachHook(func(h *admissionregistrationv1.MutatingWebhook) { h.ClientConfig.CABundle = caBundle }), ""},
	} {
		if err := try(ch); err != nil {
			t.Errorf("%s: %v", ch.what, err)
		}
	}

	// RBAC: no other configuration, no create, no delete; update only, as
	// cert-controller writes (patch is not needed, for the configuration
	// or for the certificate's Secret).
	other := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "rbac-test-other"}}
	if _, err := admin.Create(ctx, other, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), other.Name, metav1.DeleteOptions{}) })
	dryRun := []string{metav1.DryRunAll}
	for what, err := range map[string]error{
		"create a configuration": func() error {
			_, err := sa.Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "rbac-test-new"}},
				metav1.CreateOptions{DryRun: dryRun})
			return err
		}(),
		"delete its configuration": sa.Delete(ctx, webhook.ConfigurationName, metav1.DeleteOptions{DryRun: dryRun}),
		"patch its configuration": func() error {
			_, err := sa.Patch(ctx, webhook.ConfigurationName, types.MergePatchType, []byte(`{"metadata":{"labels":{"rbac-test":"x"}}}`),
				metav1.PatchOptions{DryRun: dryRun})
			return err
		}(),
		"patch its certificate's Secret": func() error {
			_, err := clientset(t, asServiceAccount(c)).CoreV1().Secrets(namespace).Patch(ctx, webhook.SecretName, types.MergePatchType,
				[]byte(`{"metadata":{"labels":{"rbac-test":"x"}}}`), metav1.PatchOptions{DryRun: dryRun})
			return err
		}(),
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

	// The controller, as the service account, generates its certificate
	// and injects the CA into every webhook: through the policy.
	opts := operator.InProcessOptions()
	opts.Webhook = webhook.Options{Addr: testutil.FreeAddr(t), CertDir: t.TempDir(), Rotate: true, Namespace: namespace,
		RotatorName: rotatorName("webhook-test")}
	stop, err := operator.Start(context.Background(), asServiceAccount(c), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("controller exited with %v", err)
		}
	})
	testutil.Eventually(t, patience, "the controller injecting its CA bundle", func() error {
		s, err := c.Client.CoreV1().Secrets(namespace).Get(ctx, webhook.SecretName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ca := s.Data["ca.crt"]
		if len(ca) == 0 {
			return errors.New("no CA in the Secret yet")
		}
		cfg, err := admin.Get(ctx, webhook.ConfigurationName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, h := range cfg.Webhooks {
			if string(h.ClientConfig.CABundle) != string(ca) {
				return fmt.Errorf("webhook %s has caBundle of %d bytes, not the Secret's CA", h.Name, len(h.ClientConfig.CABundle))
			}
		}
		return nil
	})
}

// rotations counts the certificate rotators this test process started.
var rotations atomic.Int32

// rotatorName is a name for a test's certificate rotator that no earlier
// one in the process had: controller-runtime refuses a controller name
// twice in a process, and go test -count=N runs a test N times in one.
func rotatorName(what string) string {
	return fmt.Sprintf("cert-rotator-%s-%d", what, rotations.Add(1))
}
