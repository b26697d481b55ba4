// Package install tests what users install vacate with, against a real dev
// cluster: the kustomizations of config/, the Helm chart charts/vacate and
// every command of docs/install.md. The tests share one cluster and run one
// after another; each removes what it installed.
package install

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// patience bounds each wait on the API server.
const patience = 2 * time.Minute

// repoRoot is the repository's root directory.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// decodeYAML splits a multi-document YAML stream into objects, skipping
// documents of comments only.
func decodeYAML(t testing.TB, text []byte) []*unstructured.Unstructured {
	t.Helper()
	return testenv.Objects(t, string(text))
}

// kinds counts objects by kind.
func kinds(objs []*unstructured.Unstructured) map[string]int {
	n := map[string]int{}
	for _, o := range objs {
		n[o.GetKind()]++
	}
	return n
}

// applyAll server-side applies objs, CRDs and namespaces first, and waits
// until the API server serves each CRD.
func applyAll(t testing.TB, cl client.Client, owner string, objs []*unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	for _, first := range []bool{true, false} {
		for _, o := range objs {
			if early := o.GetKind() == "CustomResourceDefinition" || o.GetKind() == "Namespace"; early != first {
				continue
			}
			if err := cl.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), client.FieldOwner(owner), client.ForceOwnership); err != nil {
				t.Fatalf("the API server refuses %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
		if first {
			waitForCRDs(t, cl, objs)
		}
	}
}

// waitForCRDs waits until every CRD among objs is Established.
func waitForCRDs(t testing.TB, cl client.Client, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" {
			continue
		}
		testutil.Eventually(t, patience, "CRD "+o.GetName()+" established", func() error {
			crd := &unstructured.Unstructured{}
			crd.SetGroupVersionKind(o.GroupVersionKind())
			if err := cl.Get(context.Background(), client.ObjectKey{Name: o.GetName()}, crd); err != nil {
				return err
			}
			conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			for _, c := range conds {
				if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
					return nil
				}
			}
			return errors.New("not established yet")
		})
	}
}

// deleteAll deletes objs (not CRDs or namespaces unless all is set) and
// waits until they are gone.
func deleteAll(t testing.TB, cl client.Client, objs []*unstructured.Unstructured, all bool) {
	t.Helper()
	ctx := context.Background()
	var gone []*unstructured.Unstructured
	for _, o := range objs {
		if !all && (o.GetKind() == "CustomResourceDefinition" || o.GetKind() == "Namespace") {
			continue
		}
		if o.GetKind() == "CustomResourceDefinition" {
			waitForCRStorage(t, cl, o)
		}
		if err := cl.Delete(ctx, o.DeepCopy(), client.PropagationPolicy("Background")); client.IgnoreNotFound(err) != nil {
			t.Errorf("deleting %s %s: %v", o.GetKind(), o.GetName(), err)
		}
		gone = append(gone, o)
	}
	for _, o := range gone {
		testutil.Eventually(t, patience, fmt.Sprintf("%s %s deleted", o.GetKind(), o.GetName()), func() error {
			cur := o.DeepCopy()
			err := cl.Get(ctx, client.ObjectKeyFromObject(o), cur)
			if err == nil {
				return fmt.Errorf("still there: %s", lingering(cur))
			}
			return client.IgnoreNotFound(err)
		})
	}
}

// waitForCRStorage waits until the API server lists the custom resources
// of crd from its watch cache. A CRD deleted before that cache is ready
// can stay Terminating for minutes: its cleanup fails ("storage is
// (re)initializing"), the retry can meet a stale copy of the CRD and stop
// on the conflict, and the cleanup controller does not requeue on its own
// condition changes, so only the next resync (5 minutes) finishes it.
func waitForCRStorage(t testing.TB, cl client.Client, crd *unstructured.Unstructured) {
	t.Helper()
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	var version string
	for _, v := range versions {
		if m, ok := v.(map[string]any); ok && m["storage"] == true {
			version, _ = m["name"].(string)
		}
	}
	if group == "" || kind == "" || version == "" {
		t.Fatalf("CRD %s names no group, kind or storage version", crd.GetName())
	}
	testutil.Eventually(t, patience, "the watch cache of "+crd.GetName()+" ready", func() error {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion(group + "/" + version)
		list.SetKind(kind + "List")
		return cl.List(context.Background(), list)
	})
}

// lingering says why an object being deleted is still there: its deletion
// time, finalizers and status conditions (a CRD's say what its cleanup is
// waiting for).
func lingering(o *unstructured.Unstructured) string {
	var b strings.Builder
	if ts := o.GetDeletionTimestamp(); ts != nil {
		fmt.Fprintf(&b, "deleting since %s", ts.UTC().Format(time.RFC3339))
	} else {
		b.WriteString("not being deleted")
	}
	fmt.Fprintf(&b, ", finalizers %v", o.GetFinalizers())
	conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok {
			fmt.Fprintf(&b, "; %v=%v %v: %v", m["type"], m["status"], m["reason"], m["message"])
		}
	}
	return b.String()
}

// startCluster returns the package's dev cluster and a client, once what an
// earlier test uninstalled is gone: the tests install and remove the same
// cluster-wide objects (vacate's CRDs, the namespace vacate-system), and a
// CRD or namespace still terminating refuses what is applied to it.
func startCluster(t *testing.T) (*devcluster.Cluster, client.Client) {
	t.Helper()
	c := testenv.Start(t)
	ctx := context.Background()
	admin, err := client.New(c.RESTConfig, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, patience, "what an earlier test uninstalled gone", func() error {
		ns, err := c.Client.CoreV1().Namespaces().Get(ctx, "vacate-system", metav1.GetOptions{})
		if err == nil && ns.DeletionTimestamp != nil {
			return errors.New("namespace vacate-system terminating")
		}
		crds := &unstructured.UnstructuredList{}
		crds.SetAPIVersion("apiextensions.k8s.io/v1")
		crds.SetKind("CustomResourceDefinitionList")
		if err := admin.List(ctx, crds); err != nil {
			return err
		}
		for _, crd := range crds.Items {
			if strings.HasSuffix(crd.GetName(), ".vacate.dev") && crd.GetDeletionTimestamp() != nil {
				return fmt.Errorf("CRD %s terminating", crd.GetName())
			}
		}
		return nil
	})
	return c, testenv.DrainClient(t, c)
}

// prometheusOperatorVersion is the Prometheus Operator whose CRDs
// (ServiceMonitor, PodMonitor, PrometheusRule) the monitoring manifests are
// applied against.
const prometheusOperatorVersion = "v0.85.0"

// installPrometheusOperatorCRDs applies the Prometheus Operator's own CRDs,
// from its module at prometheusOperatorVersion through the Go module proxy.
// certManagerVersion is the cert-manager whose CRDs the chart's
// certManager option is applied against.
const certManagerVersion = "v1.21.2"

// installCertManagerCRDs applies cert-manager's Certificate and Issuer
// CRDs, from its Go module (its deploy/crds).
func installCertManagerCRDs(t testing.TB, cl client.Client) {
	t.Helper()
	dir := moduleDir(t, "github.com/cert-manager/cert-manager@"+certManagerVersion)
	var crds []*unstructured.Unstructured
	for _, kind := range []string{"certificates", "issuers", "clusterissuers"} {
		b, err := os.ReadFile(filepath.Join(dir, "deploy", "crds", "cert-manager.io_"+kind+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		crds = append(crds, decodeYAML(t, b)...)
	}
	applyAll(t, cl, "install-test", crds)
}

// moduleDir downloads a module (through the module proxy, into the module
// cache) and returns its directory.
func moduleDir(t testing.TB, module string) string {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", module).Output()
	if err != nil {
		t.Fatalf("downloading %s: %v", module, err)
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		t.Fatalf("no module directory for %s: %v %s\n%s", module, err, m.Error, out)
	}
	return m.Dir
}

func installPrometheusOperatorCRDs(t testing.TB, cl client.Client) {
	t.Helper()
	dir := moduleDir(t, "github.com/prometheus-operator/prometheus-operator@"+prometheusOperatorVersion)
	var crds []*unstructured.Unstructured
	for _, kind := range []string{"servicemonitors", "podmonitors", "prometheusrules"} {
		b, err := os.ReadFile(filepath.Join(dir, "example", "prometheus-operator-crd", "monitoring.coreos.com_"+kind+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		crds = append(crds, decodeYAML(t, b)...)
	}
	applyAll(t, cl, "install-test", crds)
}
