package webhook_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/devwebhook"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/operator"
	"github.com/vacate-dev/vacate/internal/serving"
	"github.com/vacate-dev/vacate/internal/webhook"
)

// The package's dev cluster serves the EvictionRequest API: without it the
// API server drops spec.evictionResponders, which the eviction-responder
// webhook declares.
func TestMain(m *testing.M) { os.Exit(testenv.Main(m, testenv.EvictionRequestAPI)) }

// checkOptIn creates, in a labelled and a plain namespace, the pods whose gate
// says who opted in, and checks each.
func checkOptIn(t *testing.T, c *devcluster.Cluster, wantGates bool) {
	t.Helper()
	ctx := testenv.Context(t)
	labelled, plain := testenv.Namespace(t, c), testenv.Namespace(t, c)
	ns, err := c.Client.CoreV1().Namespaces().Get(ctx, labelled, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels[v1alpha1.LabelEndpointAware] = "true"
	if _, err := c.Client.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if wantGates {
		// The API server matches a webhook's namespaceSelector against its
		// own informer's copy of the namespace, which sees the label a
		// moment after the update (CI: a pod created at once went ungated).
		waitGatedIn(t, c, labelled, nil)
	}
	for _, tc := range []struct {
		ns, name, annotation string
		gated                bool
	}{
		{labelled, "in-labelled", "", true},
		{labelled, "opted-out", "false", false},
		{plain, "annotated", "true", true},
		{plain, "plain", "", false},
		{plain, "annotated-false", "false", false},
	} {
		p := devcluster.BarePod(tc.ns, tc.name, "") // never scheduled: only admission matters
		if tc.annotation != "" {
			p.Annotations = map[string]string{v1alpha1.LabelEndpointAware: tc.annotation}
		}
		got, err := c.Client.CoreV1().Pods(tc.ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating pod %s: %v", tc.name, err)
		}
		want := tc.gated && wantGates
		if serving.Gated(got) != want {
			t.Errorf("pod %s (annotation %q, namespace labelled %t): gated %t, want %t; readinessGates %v",
				tc.name, tc.annotation, tc.ns == labelled, serving.Gated(got), want, got.Spec.ReadinessGates)
		}
		// The label vacate-controller watches gated pods by comes with
		// the gate.
		if l := got.Labels[v1alpha1.LabelEndpointAware] == "true"; l != want {
			t.Errorf("pod %s: labelled %s=true %t, want %t", tc.name, v1alpha1.LabelEndpointAware, l, want)
		}
	}
}

// TestWebhookGatesOptedInPods: with vacate-controller serving the webhook
// (certificates from envtest on loopback), pods of a labelled namespace and
// annotated pods get the readiness gate and the label
// vacate.dev/endpoint-aware=true, others and opted-out pods neither;
// with the controller stopped, pods are still created (the webhook fails
// open), without the gate.
func TestWebhookGatesOptedInPods(t *testing.T) {
	c := testenv.Start(t)
	local, err := devwebhook.Install(c.RESTConfig, "vacate-system")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = local.Uninstall(context.Background(), c.Client) })
	_, stop := testenv.StartController(t, c, func(o *operator.Options) {
		o.Webhook = webhook.Options{Addr: local.Addr(), CertDir: local.CertDir(), Namespace: "vacate-system"}
	})
	waitServing(t, c)
	checkOptIn(t, c, true)

	t.Log("the controller stops: pod creation goes on, without the gate")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkOptIn(t, c, false)
}

// waitServing waits until a pod created in an annotated way gets the gate:
// the webhook server is up.
func waitServing(t *testing.T, c *devcluster.Cluster) {
	t.Helper()
	waitGatedIn(t, c, testenv.Namespace(t, c), map[string]string{v1alpha1.LabelEndpointAware: "true"})
}

// waitGatedIn creates probe pods in ns, with the annotations, until the
// webhook gates one.
func waitGatedIn(t *testing.T, c *devcluster.Cluster, ns string, annotations map[string]string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(testenv.Context(t), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p := devcluster.BarePod(ns, "", "")
		p.GenerateName = "probe-"
		p.Annotations = annotations
		got, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return serving.Gated(got), nil
	})
	if err != nil {
		t.Fatalf("the webhook never gated a pod in %s: %v", ns, err)
	}
}

// TestWebhookCertificateRotation: in cluster mode, cert-controller
// generates the serving certificate into the Secret and injects its CA into
// the MutatingWebhookConfiguration; once the Secret's files are where the
// kubelet would mount them, the API server calls the webhook with that CA.
func TestWebhookCertificateRotation(t *testing.T) {
	c := testenv.Start(t)
	ctx := testenv.Context(t)
	const ns = "vacate-system"
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: webhook.SecretName}}
	if _, err := c.Client.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Secrets(ns).Delete(context.Background(), webhook.SecretName, metav1.DeleteOptions{})
	})
	// The dev cluster's API server reaches the webhook on loopback: a URL
	// instead of the Service, and a certificate valid for localhost too.
	port := freePort(t)
	url := "https://localhost:" + port + webhook.Path
	cfg := webhook.Configuration(admissionregistrationv1.WebhookClientConfig{URL: &url}, ns)
	if _, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), webhook.ConfigurationName, metav1.DeleteOptions{})
	})
	dir := t.TempDir()
	testenv.Controller(t, c, func(o *operator.Options) {
		o.Webhook = webhook.Options{Addr: "127.0.0.1:" + port, CertDir: dir, Rotate: true, Namespace: ns, ExtraDNSNames: []string{"localhost"}}
	})

	t.Log("waiting for the certificate in the Secret and the CA in the configuration")
	var tlsCrt, tlsKey []byte
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		s, err := c.Client.CoreV1().Secrets(ns).Get(ctx, webhook.SecretName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		cfg, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, webhook.ConfigurationName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, h := range cfg.Webhooks {
			if len(h.ClientConfig.CABundle) == 0 {
				return false, nil
			}
		}
		tlsCrt, tlsKey = s.Data["tls.crt"], s.Data["tls.key"]
		return len(tlsCrt) > 0 && len(tlsKey) > 0, nil
	})
	if err != nil {
		t.Fatalf("cert-controller never wrote the certificate and injected the CA: %v", err)
	}
	t.Log("mounting the Secret's files as the kubelet would")
	for name, b := range map[string][]byte{"tls.crt": tlsCrt, "tls.key": tlsKey} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	waitServing(t, c)
	checkOptIn(t, c, true)
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, err := net.SplitHostPort(l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return port
}
