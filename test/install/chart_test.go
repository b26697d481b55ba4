package install

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/vacate-dev/vacate/config/rbac"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
)

const (
	chartDir = "charts/vacate"
	// releaseNamespace is where the tests install the chart: not
	// vacate-system, so that a name the chart forgot to template shows.
	releaseNamespace = "ops-vacate"
)

// chartValues reads the values files (relative to the chart) and merges
// them, later files winning, as `helm -f a -f b` does.
func chartValues(t testing.TB, files ...string) map[string]any {
	t.Helper()
	vals := map[string]any{}
	for _, f := range files {
		v, err := common.ReadValuesFile(filepath.Join(repoRoot(t), chartDir, f))
		if err != nil {
			t.Fatal(err)
		}
		vals = mergeValues(vals, v)
	}
	return vals
}

func mergeValues(a, b map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if bm, ok := v.(map[string]any); ok {
			if am, ok := out[k].(map[string]any); ok {
				out[k] = mergeValues(am, bm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// loadChart loads charts/vacate as helm does.
func loadChart(t testing.TB) *chartv2.Chart {
	t.Helper()
	ch, err := loader.LoadDir(filepath.Join(repoRoot(t), chartDir))
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	return ch
}

// render is `helm template vacate charts/vacate --namespace
// releaseNamespace --include-crds` (--skip-crds with crds.templated) with vals, for the dev cluster's
// Kubernetes version; it returns the objects and the rendering error.
func render(t testing.TB, vals map[string]any) ([]*unstructured.Unstructured, error) {
	t.Helper()
	install := action.NewInstall(action.NewConfiguration())
	install.DryRunStrategy = action.DryRunClient
	install.ReleaseName = "vacate"
	install.Namespace = releaseNamespace
	// With crds.templated the CRDs are templates too, and installed with
	// --skip-crds.
	templated, _ := dig(vals, "crds", "templated").(bool)
	install.IncludeCRDs = !templated
	install.Replace = true
	kv, err := common.ParseKubeVersion(devcluster.KubernetesVersion)
	if err != nil {
		t.Fatal(err)
	}
	install.KubeVersion = kv
	install.APIVersions = common.VersionSet{"monitoring.coreos.com/v1"}
	rel, err := install.Run(loadChart(t), vals)
	if err != nil {
		return nil, err
	}
	r, ok := rel.(*releasev1.Release)
	if !ok {
		t.Fatalf("release of type %T", rel)
	}
	return decodeYAML(t, []byte(r.Manifest)), nil
}

// ciValues lists the chart's ci/*-values.yaml, relative to the chart.
func ciValues(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot(t), chartDir, "ci", "*-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no ci/*-values.yaml in the chart")
	}
	var out []string
	for _, f := range files {
		out = append(out, filepath.Join("ci", filepath.Base(f)))
	}
	return out
}

// helmLint runs Helm's own linter (`helm lint`, with --strict: warnings
// fail too) on the chart with vals.
func helmLint(t *testing.T, vals map[string]any) {
	t.Helper()
	kv, err := common.ParseKubeVersion(devcluster.KubernetesVersion)
	if err != nil {
		t.Fatal(err)
	}
	linter := lint.RunAll(filepath.Join(repoRoot(t), chartDir), vals, releaseNamespace, lint.WithKubeVersion(kv))
	for _, m := range linter.Messages {
		if m.Severity >= support.WarningSev {
			t.Errorf("helm lint: %s", m)
		}
	}
}

// byKey indexes objects by "Kind namespace/name".
func byKey(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	out := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		out[o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName()] = o
	}
	return out
}

func keysOf(m map[string]*unstructured.Unstructured) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, "\n  ")
}

// containerArgs returns the args of the one container of the workload
// kind/name among objs.
func containerArgs(t testing.TB, objs []*unstructured.Unstructured, kind, name string) []string {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != kind || o.GetName() != name {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		if len(containers) != 1 {
			t.Fatalf("%s %s has %d containers", kind, name, len(containers))
		}
		var args []string
		for _, a := range containers[0].(map[string]any)["args"].([]any) {
			args = append(args, a.(string))
		}
		return args
	}
	t.Fatalf("no %s %s", kind, name)
	return nil
}

// flagValue is the value of --name=value in args, and whether it is there.
func flagValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// TestChartRendersAndApplies renders the chart as `helm template` does for
// its default values and each ci/*-values.yaml, lints it with Helm's linter
// (strict), checks what each variant must hold, and has the dev cluster's
// API server accept every object (server-side apply, dry run).
func TestChartRendersAndApplies(t *testing.T) {
	_, cl := startCluster(t)
	installPrometheusOperatorCRDs(t, cl)
	installCertManagerCRDs(t, cl)
	ensureNamespace(t, cl, releaseNamespace)
	for _, files := range append([][]string{{"values.yaml"}}, func() [][]string {
		var out [][]string
		for _, f := range ciValues(t) {
			out = append(out, []string{"values.yaml", f})
		}
		return out
	}()...) {
		name := filepath.Base(files[len(files)-1])
		t.Run(name, func(t *testing.T) {
			vals := chartValues(t, files[1:]...)
			helmLint(t, vals)
			objs, err := render(t, vals)
			if err != nil {
				t.Fatalf("rendering with %s: %v", name, err)
			}
			checkRendered(t, name, chartValues(t, files...), objs)
			for _, o := range objs {
				if err := cl.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(o.DeepCopy()),
					client.FieldOwner("chart-test"), client.ForceOwnership, client.DryRunAll); err != nil {
					t.Errorf("the API server refuses %s %s: %v", o.GetKind(), o.GetName(), err)
				}
			}
		})
	}
}

// checkRendered checks what every rendering holds: no name of config/'s
// installation left (the namespace vacate-system, its service account), the
// controller's ClusterRole exactly controller-gen's, the Lease named in the
// Role that grants it, the security context, the image, and flags the
// values set.
func checkRendered(t *testing.T, name string, vals map[string]any, objs []*unstructured.Unstructured) {
	t.Helper()
	all := byKey(objs)
	for _, o := range objs {
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "vacate-system") {
			t.Errorf("%s %s names vacate-system, not the release's namespace:\n%s", o.GetKind(), o.GetName(), b)
		}
		if o.GetNamespace() == "" && namespaced(o.GetKind()) {
			t.Errorf("%s %s has no namespace", o.GetKind(), o.GetName())
		}
	}
	// The controller's ClusterRole is controller-gen's, no more, no less.
	want, err := rbac.ControllerRole()
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	fromUnstructured(t, all["ClusterRole /vacate-controller"], role)
	if !equality.Semantic.DeepEqual(role.Rules, want.Rules) {
		t.Errorf("the chart's ClusterRole vacate-controller grants\n%v\nconfig/rbac/role.yaml\n%v", role.Rules, want.Rules)
	}
	lease := dig(vals, "controller", "leaderElection", "leaseName").(string)
	leaseNS, _ := dig(vals, "controller", "leaderElection", "namespace").(string)
	leaseRole := "Role " + releaseNamespace + "/vacate-controller"
	if leaseNS != "" && leaseNS != releaseNamespace {
		leaseRole = "Role " + leaseNS + "/vacate-controller-lease"
	}
	if !grantsLease(t, all[leaseRole], lease) {
		t.Errorf("%s: %s does not grant get and update of the Lease %s only (objects:\n  %s)", name, leaseRole, lease, keysOf(all))
	}
	args := containerArgs(t, objs, "Deployment", "vacate-controller")
	for flag, want := range map[string]string{
		"leader-election-id":        lease,
		"leader-election-namespace": firstNonEmpty(leaseNS, releaseNamespace),
		"eviction-workers":          fmt.Sprint(dig(vals, "controller", "evictionWorkers")),
	} {
		if got, _ := flagValue(args, flag); got != want {
			t.Errorf("%s: --%s=%s, want %s", name, flag, got, want)
		}
	}
	if _, ok := flagValue(args, "webhook-bind-address"); ok != dig(vals, "webhook", "enabled").(bool) {
		t.Errorf("%s: webhook flag present %v, webhook.enabled %v", name, ok, !ok)
	}
	dep := &appsv1.Deployment{}
	fromUnstructured(t, all["Deployment "+releaseNamespace+"/vacate-controller"], dep)
	pod, ctr := dep.Spec.Template.Spec, dep.Spec.Template.Spec.Containers[0]
	sc := ctr.SecurityContext
	if pod.SecurityContext == nil || !ptr.Deref(pod.SecurityContext.RunAsNonRoot, false) || pod.SecurityContext.SeccompProfile == nil ||
		pod.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
		sc == nil || ptr.Deref(sc.AllowPrivilegeEscalation, true) || !ptr.Deref(sc.ReadOnlyRootFilesystem, false) ||
		sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("%s: the controller's security context is not non-root, read-only, no escalation, no capabilities, RuntimeDefault: %+v %+v", name, pod.SecurityContext, sc)
	}
	wantImage := "ghcr.io/vacate-dev/vacate-controller:v0.1.0"
	if d, _ := dig(vals, "image", "digest").(string); d != "" {
		wantImage = "ghcr.io/vacate-dev/vacate-controller@" + d
	}
	if ctr.Image != wantImage {
		t.Errorf("%s: image %s, want %s", name, ctr.Image, wantImage)
	}
	if int(*dep.Spec.Replicas) != toInt(dig(vals, "controller", "replicas")) {
		t.Errorf("%s: %d replicas, values say %v", name, *dep.Spec.Replicas, dig(vals, "controller", "replicas"))
	}
	// The values a pod spec takes from: strategy, probe timing, extra
	// volumes (besides the webhook's certificate).
	if st, _ := dig(vals, "controller", "strategy", "type").(string); string(dep.Spec.Strategy.Type) != st {
		t.Errorf("%s: strategy %q, values say %q", name, dep.Spec.Strategy.Type, st)
	}
	if p := toInt(dig(vals, "controller", "livenessProbe", "periodSeconds")); p >= 0 &&
		(ctr.LivenessProbe == nil || ctr.LivenessProbe.PeriodSeconds != int32(p) || ctr.LivenessProbe.HTTPGet == nil || ctr.LivenessProbe.HTTPGet.Path != "/healthz") {
		t.Errorf("%s: liveness probe %+v, values say periodSeconds %v of /healthz", name, ctr.LivenessProbe, p)
	}
	if vs, _ := dig(vals, "controller", "extraVolumes").([]any); len(vs) > 0 {
		want := len(vs)
		if dig(vals, "webhook", "enabled").(bool) {
			want++
		}
		if len(pod.Volumes) != want || len(ctr.VolumeMounts) != want {
			t.Errorf("%s: %d volumes and %d mounts, want %d", name, len(pod.Volumes), len(ctr.VolumeMounts), want)
		}
	}
	if dig(vals, "agent", "enabled").(bool) {
		ds := &appsv1.DaemonSet{}
		fromUnstructured(t, all["DaemonSet "+releaseNamespace+"/vacate-agent"], ds)
		actr := ds.Spec.Template.Spec.Containers[0]
		env, _ := dig(vals, "agent", "env").([]any)
		if len(actr.Env) != 1+len(env) || actr.Env[0].Name != "NODE_NAME" {
			t.Errorf("%s: the agent's env %v, want NODE_NAME and the values' %v", name, actr.Env, env)
		}
		if probe, _ := dig(vals, "agent", "livenessProbe").(map[string]any); (len(probe) > 0) != (actr.LivenessProbe != nil) {
			t.Errorf("%s: the agent's liveness probe %+v, values say %v", name, actr.LivenessProbe, probe)
		}
		if actr.SecurityContext == nil || ptr.Deref(actr.SecurityContext.RunAsUser, -1) != 0 || ptr.Deref(actr.SecurityContext.AllowPrivilegeEscalation, true) {
			t.Errorf("%s: the agent's security context %+v, want root without escalation", name, actr.SecurityContext)
		}
	}
	// controller.evictionRequests: the flag; auto is off without the
	// admission policy that keeps EvictionRequests to those who may evict.
	mode := dig(vals, "controller", "evictionRequests").(string)
	if policies, _ := dig(vals, "admissionPolicies", "enabled").(bool); !policies && mode == "auto" {
		mode = "off"
	}
	if got, _ := flagValue(args, "eviction-requests"); got != mode {
		t.Errorf("%s: --eviction-requests=%s, want %s", name, got, mode)
	}
	// metrics.secure: the flag, the controller's reviews, the readers'
	// binding, and a ServiceMonitor that scrapes over HTTPS with a token.
	secure, _ := dig(vals, "metrics", "secure").(bool)
	if slices.Contains(args, "--metrics-secure") != secure {
		t.Errorf("%s: --metrics-secure in %v, metrics.secure %t", name, args, secure)
	}
	for _, key := range []string{"ClusterRoleBinding /vacate-controller-metrics-auth", "ClusterRole /vacate-metrics-reader"} {
		if _, ok := all[key]; ok != secure {
			t.Errorf("%s: %s rendered %t, metrics.secure %t", name, key, ok, secure)
		}
	}
	if secure {
		readers, _ := dig(vals, "metrics", "readers").([]any)
		if _, ok := all["ClusterRoleBinding /vacate-metrics-reader"]; ok != (len(readers) > 0) {
			t.Errorf("%s: the readers' binding rendered %t, %d readers", name, ok, len(readers))
		}
		if sm := all["ServiceMonitor "+releaseNamespace+"/vacate-controller"]; sm != nil {
			eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
			ep, _ := eps[0].(map[string]any)
			if ep["scheme"] != "https" || ep["bearerTokenFile"] == nil {
				t.Errorf("%s: the ServiceMonitor scrapes %v, want https with a token", name, ep)
			}
		}
	}
	// webhook.certManager: a Certificate for the webhook's Service in the
	// Secret the controller mounts, cert-manager's CA injection, and neither
	// the controller's rotation nor an empty Secret of the chart's.
	if dig(vals, "webhook", "enabled").(bool) {
		cm, _ := dig(vals, "webhook", "certManager", "enabled").(bool)
		if got, _ := flagValue(args, "webhook-cert-rotation"); got != fmt.Sprint(!cm && dig(vals, "webhook", "certRotation").(bool)) {
			t.Errorf("%s: --webhook-cert-rotation=%s with certManager.enabled %t", name, got, cm)
		}
		if got, _ := flagValue(args, "eviction-responder-priority"); got != fmt.Sprint(dig(vals, "webhook", "evictionResponderPriority")) {
			t.Errorf("%s: --eviction-responder-priority=%s, want webhook.evictionResponderPriority %v", name, got, dig(vals, "webhook", "evictionResponderPriority"))
		}
		cert := all["Certificate "+releaseNamespace+"/vacate-webhook"]
		if (cert != nil) != cm {
			t.Errorf("%s: Certificate rendered %t, certManager.enabled %t", name, cert != nil, cm)
		}
		if _, ok := all["Secret "+releaseNamespace+"/vacate-webhook-cert"]; ok == cm {
			t.Errorf("%s: the chart's Secret vacate-webhook-cert rendered %t, certManager.enabled %t", name, ok, cm)
		}
		for _, key := range []string{"MutatingWebhookConfiguration /vacate-endpoint-aware", "ValidatingWebhookConfiguration /vacate-nodedrain-policy"} {
			wc := all[key]
			if wc == nil {
				t.Errorf("%s: no %s with webhook.enabled", name, key)
				continue
			}
			if inject := wc.GetAnnotations()["cert-manager.io/inject-ca-from"]; (inject == releaseNamespace+"/vacate-webhook") != cm {
				t.Errorf("%s: %s's inject-ca-from %q, certManager.enabled %t", name, key, inject, cm)
			}
		}
		if cert != nil {
			secret, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
			dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
			issuer, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "name")
			if secret != "vacate-webhook-cert" || !slices.Contains(dns, "vacate-webhook."+releaseNamespace+".svc") || issuer == "" {
				t.Errorf("%s: the Certificate writes %q for %v, issuer %q", name, secret, dns, issuer)
			}
			if _, ok := all["Issuer "+releaseNamespace+"/"+issuer]; !ok && issuer == "vacate-selfsigned" {
				t.Errorf("%s: the Certificate names the Issuer %s, not rendered", name, issuer)
			}
		}
	} else if _, ok := all["ValidatingWebhookConfiguration /vacate-nodedrain-policy"]; ok {
		// It fails closed: without the server, no person could name a policy.
		t.Errorf("%s: the NodeDrain policy webhook's configuration rendered without webhook.enabled", name)
	}
	_, pdb := all["PodDisruptionBudget "+releaseNamespace+"/vacate-controller"]
	if pdb != dig(vals, "controller", "podDisruptionBudget", "enabled").(bool) {
		t.Errorf("%s: PDB rendered %v, podDisruptionBudget.enabled %v", name, pdb, !pdb)
	}
}

// TestChartRefusesBadValues: values.schema.json and the templates' checks
// refuse bad values at install time, naming the value.
func TestChartRefusesBadValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		vals string
		want string
	}{
		{"misspelt key", "controler:\n  replicas: 2\n", "controler"},
		{"wrong type", "controller:\n  replicas: two\n", "replicas"},
		{"bad duration", "controller:\n  apiTimeout: 30 seconds\n", "apiTimeout"},
		{"bad digest", "image:\n  digest: latest\n", "digest"},
		{"unknown cloud", "agent:\n  cloud: openstack\n", "cloud"},
		{"bad log encoder", "controller:\n  log:\n    encoder: xml\n", "encoder"},
		{"replicas without a leader", "controller:\n  replicas: 2\n  leaderElection:\n    enabled: false\n", "leaderElection.enabled"},
		// The agent's own policy is what keeps it to its own node.
		{"agent without admission policies", "agent:\n  enabled: true\nadmissionPolicies:\n  enabled: false\n", "admissionPolicies.enabled"},
		{"surge without admission policies", "controller:\n  surge: true\nadmissionPolicies:\n  enabled: false\n", "controller.surge=true needs admissionPolicies.enabled=true"},
		// The coordinator evicts for every EvictionRequest; only its policy keeps asking to those who may evict.
		{"coordinating without admission policies", "controller:\n  evictionRequests: coordinate\nadmissionPolicies:\n  enabled: false\n", "controller.evictionRequests=coordinate needs admissionPolicies.enabled=true"},
		{"an unknown EvictionRequest mode", "controller:\n  evictionRequests: always\n", "evictionRequests"},
		// One installation per cluster, with fixed names (docs/install.md).
		{"nameOverride", "nameOverride: drains\n", "nameOverride"},
		// 0 to 999 are reserved for Kubernetes' own responders; the API refuses more than 100000.
		{"a responder priority Kubernetes reserves", "webhook:\n  evictionResponderPriority: 999\n", "evictionResponderPriority"},
		{"a responder priority over the API's maximum", "webhook:\n  evictionResponderPriority: 100001\n", "evictionResponderPriority"},
		{"an issuer without a name", "webhook:\n  certManager:\n    enabled: true\n    issuerRef:\n      kind: ClusterIssuer\n", "issuerRef needs a name"},
		{"unknown strategy", "controller:\n  strategy:\n    type: BlueGreen\n", "strategy"},
		{"a probe's handler", "controller:\n  livenessProbe:\n    exec:\n      command: [true]\n", "livenessProbe"},
		{"a volume mount without a path", "controller:\n  extraVolumeMounts:\n  - name: x\n", "mountPath"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := common.ReadValues([]byte(tc.vals))
			if err != nil {
				t.Fatal(err)
			}
			_, err = render(t, v)
			if err == nil {
				t.Fatalf("values %q rendered, want refused", tc.vals)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("values %q refused without naming %s: %v", tc.vals, tc.want, err)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// grantsLease is whether role grants get and update of the Lease lease and
// of no other Lease.
func grantsLease(t testing.TB, obj *unstructured.Unstructured, lease string) bool {
	t.Helper()
	if obj == nil {
		return false
	}
	role := &rbacv1.Role{}
	fromUnstructured(t, obj, role)
	byName := false
	for _, r := range role.Rules {
		if !slices.Contains(r.Resources, "leases") {
			continue
		}
		switch {
		case len(r.ResourceNames) == 0 && !slices.Equal(r.Verbs, []string{"create"}):
			return false // more than create on every Lease
		case len(r.ResourceNames) > 0:
			if !slices.Equal(r.ResourceNames, []string{lease}) {
				return false
			}
			byName = slices.Contains(r.Verbs, "get") && slices.Contains(r.Verbs, "update")
		}
	}
	return byName
}

func ensureNamespace(t testing.TB, cl client.Client, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := cl.Create(context.Background(), ns); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
}

func fromUnstructured(t testing.TB, o *unstructured.Unstructured, into any) {
	t.Helper()
	if o == nil {
		t.Fatalf("no object to decode into %T", into)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
		t.Fatal(err)
	}
}

// dig is the value at path in nested maps, nil if absent.
func dig(m map[string]any, path ...string) any {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[p]
	}
	return cur
}

func toInt(v any) int {
	switch n := v.(type) {
	case int:
		return n
	case int64:
		return int(n)
	case float64:
		return int(n)
	}
	return -1
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

// namespaced is whether objects of kind live in a namespace.
func namespaced(kind string) bool {
	switch kind {
	case "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "Namespace", "MutatingWebhookConfiguration",
		"ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "DrainPolicy":
		return false
	}
	return true
}
