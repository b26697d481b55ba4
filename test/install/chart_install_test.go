package install

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/kube"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// helmConfig is Helm's action configuration for the dev cluster, in
// namespace ns, storing releases in Secrets as the helm CLI does.
func helmConfig(t testing.TB, c *devcluster.Cluster, ns string) *action.Configuration {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = ptr.To(c.Kubeconfig)
	flags.Namespace = ptr.To(ns)
	cfg := action.NewConfiguration()
	if err := cfg.Init(flags, ns, "secret"); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestChartInstallDrainsAsItsServiceAccount installs the chart with Helm's
// library into the dev cluster (a real `helm install`: CRDs, then every
// object, server-side), then runs vacate-controller as a process with the
// arguments of the chart's Deployment and a token of the chart's service
// account, and drains a node under a PDB: the chart's RBAC and admission
// policies are enough. The ClusterRole is exactly controller-gen's
// (TestChartRendersAndApplies), so they are also no more than needed.
// `helm uninstall` then removes what it installed and leaves the CRDs.
func TestChartInstallDrainsAsItsServiceAccount(t *testing.T) {
	c, cl := startCluster(t)
	ctx := testenv.Context(t)

	cfg := helmConfig(t, c, releaseNamespace)
	install := action.NewInstall(cfg)
	install.ReleaseName = "vacate"
	install.Namespace = releaseNamespace
	install.CreateNamespace = true
	install.WaitStrategy = kube.HookOnlyStrategy
	install.Timeout = patience
	// A lease of its own name, as a second installation would need.
	vals := map[string]any{"controller": map[string]any{"leaderElection": map[string]any{"leaseName": "vacate-chart-test"}}}
	rel, err := install.RunWithContext(ctx, loadChart(t), vals)
	if err != nil {
		t.Fatalf("helm install: %v", err)
	}
	objs := decodeYAML(t, []byte(rel.(*releasev1.Release).Manifest))
	uninstalled := false
	t.Cleanup(func() {
		if !uninstalled {
			_, _ = uninstall(t, c).Run("vacate")
		}
	})
	for _, o := range objs {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(o), o.DeepCopy()); err != nil {
			t.Errorf("after helm install, %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}

	// One installation per cluster: a second release is refused, naming the
	// first, before Helm writes anything.
	second := action.NewInstall(helmConfig(t, c, "vacate-second"))
	second.ReleaseName, second.Namespace, second.CreateNamespace = "vacate-second", "vacate-second", true
	second.WaitStrategy, second.Timeout = kube.HookOnlyStrategy, patience
	_, err = second.RunWithContext(ctx, loadChart(t), nil)
	if want := "vacate is already installed in this cluster by the release vacate in namespace " + releaseNamespace; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a second helm install: %v, want refused with %q", err, want)
		_, _ = action.NewUninstall(helmConfig(t, c, "vacate-second")).Run("vacate-second")
	}

	// The controller, as the chart runs it, as the chart's service account.
	args := controllerArgs(t, containerArgs(t, objs, "Deployment", "vacate-controller"))
	kubeconfig := serviceAccountKubeconfig(t, c, releaseNamespace, "vacate-controller")
	stop := runController(t, append(args, "--kubeconfig", kubeconfig))
	go mountSecret(ctx, t, cl, releaseNamespace, "vacate-webhook-cert", flagOr(args, "webhook-cert-dir"))

	ns := testenv.Namespace(t, c)
	nodes := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "chart", Count: 2, Labels: map[string]string{"vacate.dev/test": "chart"}})
	if err := devcluster.CreateWorkload(ctx, c.Client, devcluster.Workload{Namespace: ns, DeploymentReplicas: 4,
		NodeSelector: map[string]string{"vacate.dev/test": "chart"}, SpreadDeployment: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.WaitForPDB(ctx, c.Client, ns, "web", 4, patience); err != nil {
		t.Fatal(err)
	}
	nd := testutil.NodeDrain(nodes[0], "", "chart-test")
	if err := cl.Create(ctx, nd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), nd) })
	testenv.WaitForDrain(t, cl, nodes[0], "Drained", 3*time.Minute,
		func(d *v1alpha1.NodeDrain) bool { return d.Status.Phase == v1alpha1.PhaseDrained },
		func(d *v1alpha1.NodeDrain) string {
			return fmt.Sprintf("%s %+v blockers %v", d.Status.Phase, d.Status.Conditions, d.Status.Blockers)
		})
	for _, p := range testenv.PodsOnNode(t, c, nodes[0]) {
		if p.DeletionTimestamp == nil && !ownedByDaemonSet(p) {
			t.Errorf("pod %s/%s still on the drained node", p.Namespace, p.Name)
		}
	}
	// The HTTP hooks' tokens: the controller requests its own service
	// account's (the release's), which the chart's Role and the policy
	// vacate-controller-tokens let it mint for one pod's hook only.
	checkHookTokens(t, c, args, kubeconfig)
	// The certificate rotation wrote the Secret and the CA bundle, as the
	// service account.
	wh := &unstructured.Unstructured{}
	wh.SetAPIVersion("admissionregistration.k8s.io/v1")
	wh.SetKind("MutatingWebhookConfiguration")
	testutil.Eventually(t, patience, "the webhook's CA bundle injected", func() error {
		if err := cl.Get(ctx, client.ObjectKey{Name: "vacate-endpoint-aware"}, wh); err != nil {
			return err
		}
		hooks, _, _ := unstructured.NestedSlice(wh.Object, "webhooks")
		for _, h := range hooks {
			if b, _, _ := unstructured.NestedString(h.(map[string]any), "clientConfig", "caBundle"); b == "" {
				return errors.New("a webhook without caBundle")
			}
		}
		return nil
	})
	if err := cl.Delete(ctx, nd); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, patience, "the drain undone and released", func() error {
		err := cl.Get(ctx, client.ObjectKey{Name: nodes[0]}, &v1alpha1.NodeDrain{})
		if err == nil {
			return errors.New("still there")
		}
		return client.IgnoreNotFound(err)
	})
	if err := stop(); err != nil {
		t.Errorf("vacate-controller: %v", err)
	}

	if _, err := uninstall(t, c).Run("vacate"); err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	uninstalled = true
	for _, o := range objs {
		err := cl.Get(ctx, client.ObjectKeyFromObject(o), o.DeepCopy())
		if o.GetKind() == "CustomResourceDefinition" {
			continue // crds/ are Helm's to install, never to delete
		}
		if o.GetKind() == "Namespace" {
			continue
		}
		if err == nil {
			testutil.Eventually(t, patience, o.GetKind()+" "+o.GetName()+" gone after helm uninstall", func() error {
				err := cl.Get(ctx, client.ObjectKeyFromObject(o), o.DeepCopy())
				if err == nil {
					return errors.New("still there")
				}
				return client.IgnoreNotFound(err)
			})
		}
	}
	crds, err := rbacCRDNames(ctx, cl)
	if err != nil || len(crds) != 4 {
		t.Errorf("after helm uninstall, vacate's CRDs %v (%v), want the 4 kept", crds, err)
	}
}

// uninstall is `helm uninstall` of the release in releaseNamespace.
func uninstall(t testing.TB, c *devcluster.Cluster) *action.Uninstall {
	u := action.NewUninstall(helmConfig(t, c, releaseNamespace))
	u.WaitStrategy = kube.HookOnlyStrategy
	u.Timeout = patience
	return u
}

// controllerArgs are the chart's arguments with what only a pod has
// replaced: listen on free loopback ports, read the webhook certificate
// from a directory of the test's.
func controllerArgs(t *testing.T, args []string) []string {
	t.Helper()
	var out []string
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		switch name {
		case "metrics-bind-address", "health-probe-bind-address", "webhook-bind-address":
			a = "--" + name + "=" + testutil.FreeAddr(t)
		case "webhook-cert-dir":
			a = "--" + name + "=" + t.TempDir()
		}
		out = append(out, a)
	}
	return out
}

func flagOr(args []string, name string) string {
	v, _ := flagValue(args, name)
	return v
}

// serviceAccountKubeconfig writes a kubeconfig that authenticates with a
// token of the service account ns/name (TokenRequest), as a pod of it would.
func serviceAccountKubeconfig(t *testing.T, c *devcluster.Cluster, ns, name string) string {
	t.Helper()
	tok, err := c.Client.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token for %s/%s: %v", ns, name, err)
	}
	admin, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cluster := admin.Clusters[admin.Contexts[admin.CurrentContext].Cluster]
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["dev"] = cluster
	cfg.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	cfg.Contexts["sa"] = &clientcmdapi.Context{Cluster: "dev", AuthInfo: "sa"}
	cfg.CurrentContext = "sa"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// runController builds and starts vacate-controller with args, logging to
// a file shown when the test fails; stop ends it with SIGTERM.
func runController(t *testing.T, args []string) (stop func() error) {
	t.Helper()
	bin := testutil.Program(t, "github.com/vacate-dev/vacate/cmd/vacate-controller")
	logPath := filepath.Join(t.TempDir(), "controller.log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("$ vacate-controller %s", strings.Join(args, " "))
	var once sync.Once
	var result error
	stop = func() error {
		once.Do(func() {
			_ = cmd.Process.Signal(os.Interrupt)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case result = <-done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				result = errors.New("did not stop within 30s of SIGINT")
			}
			log.Close()
		})
		return result
	}
	t.Cleanup(func() {
		_ = stop()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			lines := strings.Split(string(b), "\n")
			if len(lines) > 80 {
				lines = lines[len(lines)-80:]
			}
			t.Logf("vacate-controller's last log lines:\n%s", strings.Join(lines, "\n"))
		}
	})
	return stop
}

// mountSecret does what the kubelet does for the controller's pod: it
// writes the Secret ns/name's keys as files in dir, when they appear and
// when they change, until ctx ends.
func mountSecret(ctx context.Context, t *testing.T, cl client.Client, ns, name, dir string) {
	written := map[string]string{}
	for ctx.Err() == nil {
		s := &corev1.Secret{}
		if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s); err == nil {
			for k, v := range s.Data {
				if written[k] != string(v) {
					if err := os.WriteFile(filepath.Join(dir, k), v, 0o600); err != nil {
						t.Errorf("mounting %s: %v", k, err)
						return
					}
					written[k] = string(v)
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func ownedByDaemonSet(p corev1.Pod) bool {
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}

// rbacCRDNames lists vacate's CRDs in the cluster.
func rbacCRDNames(ctx context.Context, cl client.Client) ([]string, error) {
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("apiextensions.k8s.io/v1")
	list.SetKind("CustomResourceDefinitionList")
	if err := cl.List(ctx, list); err != nil {
		return nil, err
	}
	var out []string
	for _, crd := range list.Items {
		if strings.HasSuffix(crd.GetName(), ".vacate.dev") {
			out = append(out, crd.GetName())
		}
	}
	return out, nil
}

// checkHookTokens: the chart names the release's service account as the
// one whose tokens the controller sends to HTTP hooks, and that account,
// with the chart's rights, may mint ten-minute tokens for one pod's hook
// and nothing else (the policy vacate-controller-tokens, with the release's
// names).
func checkHookTokens(t *testing.T, c *devcluster.Cluster, args []string, kubeconfig string) {
	t.Helper()
	want := releaseNamespace + "/vacate-controller"
	if got := flagOr(args, "hook-service-account"); got != want {
		t.Fatalf("the chart runs the controller with --hook-service-account=%q, want %q (its own service account)", got, want)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mint := func(audiences []string) error {
		_, err := cs.CoreV1().ServiceAccounts(releaseNamespace).CreateToken(context.Background(), "vacate-controller",
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
		return err
	}
	if err := mint([]string{"vacate.dev/hook", "vacate.dev/hook/a-pod-uid"}); err != nil {
		t.Errorf("the chart's controller requesting a hook token: %v", err)
	}
	testutil.Eventually(t, patience, "the policy refusing the chart's controller a token for the API server", func() error {
		if err := mint(nil); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "only for the HTTP hook of one pod") {
			return fmt.Errorf("a token for the API server: %v, want refused by vacate-controller-tokens", err)
		}
		return nil
	})
}
