package stateful_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/sidecar"
)

// recipes are the folders of examples/ that hold a vacate-hook recipe.
var recipes = []string{"rabbitmq", "postgresql-patroni", "redis-sentinel"}

// TestRecipesAreDeployable reads each recipe as a user copies it: its
// vacate-hook.yaml passes vacate-hook's own check (every field, every
// program in PATH); its manifests.yaml's ConfigMap holds the recipe's files
// word for word; the pod runs vacate-hook as a native sidecar, non-root
// with a read-only root filesystem, with its configuration, a state volume
// and the annotation that makes vacate call it on the configured port; and
// a NetworkPolicy lets only vacate-controller reach that port.
func TestRecipesAreDeployable(t *testing.T) {
	for _, name := range recipes {
		t.Run(name, func(t *testing.T) {
			dir := recipeDir(t, name)
			config, err := os.ReadFile(filepath.Join(dir, "vacate-hook.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := sidecar.ParseConfig(config)
			if err != nil {
				t.Fatalf("vacate-hook.yaml: %v", err)
			}
			port := cfg.Listen[strings.LastIndexByte(cfg.Listen, ':')+1:]
			manifests, err := os.ReadFile(filepath.Join(dir, "manifests.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			objs := testenv.Objects(t, string(manifests))
			checkConfigMap(t, dir, objs)
			checkSidecar(t, objs, port)
			checkNetworkPolicy(t, objs, port)
		})
	}
}

// checkConfigMap: a ConfigMap holds config.yaml (the recipe's
// vacate-hook.yaml) and every file the recipe runs from /etc/vacate-hook.
func checkConfigMap(t *testing.T, dir string, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "ConfigMap" {
			continue
		}
		data, _, _ := unstructured.NestedStringMap(o.Object, "data")
		config, _ := os.ReadFile(filepath.Join(dir, "vacate-hook.yaml"))
		if data["config.yaml"] != string(config) {
			t.Errorf("ConfigMap %s: config.yaml is not vacate-hook.yaml word for word", o.GetName())
		}
		for key, value := range data {
			if key == "config.yaml" {
				continue
			}
			file, err := os.ReadFile(filepath.Join(dir, key))
			if err != nil || string(file) != value {
				t.Errorf("ConfigMap %s: %s is not the recipe's %s word for word (%v)", o.GetName(), key, key, err)
			}
		}
		for _, path := range strings.Fields(strings.NewReplacer(`"`, " ", ",", " ", "[", " ", "]", " ").Replace(string(config))) {
			if f, ok := strings.CutPrefix(path, "/etc/vacate-hook/"); ok && data[f] == "" {
				t.Errorf("ConfigMap %s does not hold %s, which the recipe runs", o.GetName(), f)
			}
		}
		return
	}
	t.Error("manifests.yaml has no ConfigMap with the recipe")
}

// checkSidecar finds the pod template that runs vacate-hook (in a workload
// or an operator's override) and checks how it runs.
func checkSidecar(t *testing.T, objs []*unstructured.Unstructured, port string) {
	t.Helper()
	var template map[string]any
	for _, o := range objs {
		if template = findTemplate(o.Object); template != nil {
			break
		}
	}
	if template == nil {
		t.Fatal("no pod template runs vacate-hook as an init container")
	}
	if got, _, _ := unstructured.NestedString(template, "metadata", "annotations", "vacate.dev/evacuate-port"); got != port {
		t.Errorf("the pod's vacate.dev/evacuate-port is %q, want %q (the configuration's listen)", got, port)
	}
	inits, _, _ := unstructured.NestedSlice(template, "spec", "initContainers")
	var hook map[string]any
	installs := false
	for _, c := range inits {
		c, _ := c.(map[string]any)
		args, _, _ := unstructured.NestedStringSlice(c, "args")
		if image, _, _ := unstructured.NestedString(c, "image"); strings.Contains(image, "/vacate-hook:") && slices.Contains(args, "install") {
			installs = true
		}
		if name, _, _ := unstructured.NestedString(c, "name"); name == "vacate-hook" {
			hook = c
		}
	}
	if !installs {
		t.Error("no init container installs vacate-hook from its image (args: install DIR)")
	}
	if hook == nil {
		t.Fatal("no init container named vacate-hook")
	}
	want := map[string]any{"restartPolicy": "Always"}
	for k, v := range want {
		if hook[k] != v {
			t.Errorf("vacate-hook's %s is %v, want %v (a native sidecar)", k, hook[k], v)
		}
	}
	for field, value := range map[string]bool{"runAsNonRoot": true, "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false} {
		if got, found, _ := unstructured.NestedBool(hook, "securityContext", field); !found || got != value {
			t.Errorf("vacate-hook's securityContext.%s is %v (set: %v), want %v", field, got, found, value)
		}
	}
	if drop, _, _ := unstructured.NestedStringSlice(hook, "securityContext", "capabilities", "drop"); !slices.Contains(drop, "ALL") {
		t.Errorf("vacate-hook's capabilities drop %v, want ALL", drop)
	}
	command, _, _ := unstructured.NestedStringSlice(hook, "command")
	if len(command) < 3 || !strings.HasSuffix(command[0], "/vacate-hook") || !slices.Contains(command, "/etc/vacate-hook/config.yaml") {
		t.Errorf("vacate-hook's command %q, want the installed vacate-hook with --config /etc/vacate-hook/config.yaml", command)
	}
	mounts, _, _ := unstructured.NestedSlice(hook, "volumeMounts")
	paths := map[string]bool{}
	for _, m := range mounts {
		m, _ := m.(map[string]any)
		p, _ := m["mountPath"].(string)
		paths[p] = true
	}
	for _, p := range []string{"/etc/vacate-hook", "/var/lib/vacate-hook"} {
		if !paths[p] {
			t.Errorf("vacate-hook mounts nothing at %s (mounts: %v)", p, paths)
		}
	}
	// Who may call (pkg/hookauth): the sidecar knows its pod and node from
	// the downward API, and reads the cluster's keys with the pod's token.
	env, _, _ := unstructured.NestedSlice(hook, "env")
	fields := map[string]string{}
	for _, e := range env {
		e, _ := e.(map[string]any)
		name, _ := e["name"].(string)
		fields[name], _, _ = unstructured.NestedString(e, "valueFrom", "fieldRef", "fieldPath")
	}
	for name, path := range map[string]string{"POD_UID": "metadata.uid", "NODE_NAME": "spec.nodeName"} {
		if fields[name] != path {
			t.Errorf("vacate-hook's env %s is from %q, want the downward API's %s (it checks that callers address this pod and drain its node)", name, fields[name], path)
		}
	}
	if mount, found, _ := unstructured.NestedBool(template, "spec", "automountServiceAccountToken"); found && !mount {
		t.Error("the pod does not mount its service-account token: vacate-hook reads the cluster's keys with it, to check its callers")
	}
}

// findTemplate finds, anywhere in an object, a pod template whose init
// containers include vacate-hook.
func findTemplate(v any) map[string]any {
	switch v := v.(type) {
	case map[string]any:
		if inits, ok, _ := unstructured.NestedSlice(v, "spec", "initContainers"); ok {
			for _, c := range inits {
				if c, ok := c.(map[string]any); ok && c["name"] == "vacate-hook" {
					return v
				}
			}
		}
		for _, x := range v {
			if t := findTemplate(x); t != nil {
				return t
			}
		}
	case []any:
		for _, x := range v {
			if t := findTemplate(x); t != nil {
				return t
			}
		}
	}
	return nil
}

// checkNetworkPolicy: only vacate-controller's pods reach the hook's port.
func checkNetworkPolicy(t *testing.T, objs []*unstructured.Unstructured, port string) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "NetworkPolicy" {
			continue
		}
		rules, _, _ := unstructured.NestedSlice(o.Object, "spec", "ingress")
		for _, r := range rules {
			r, _ := r.(map[string]any)
			ports, _, _ := unstructured.NestedSlice(r, "ports")
			from, _, _ := unstructured.NestedSlice(r, "from")
			hasPort := false
			for _, p := range ports {
				p, _ := p.(map[string]any)
				hasPort = hasPort || strings.TrimSpace(toString(p["port"])) == port
			}
			if !hasPort {
				continue
			}
			if len(from) == 0 {
				t.Errorf("NetworkPolicy %s lets anyone reach port %s", o.GetName(), port)
			}
			for _, f := range from {
				f, _ := f.(map[string]any)
				name, _, _ := unstructured.NestedString(f, "podSelector", "matchLabels", "app.kubernetes.io/name")
				if name != "vacate-controller" {
					t.Errorf("NetworkPolicy %s lets %v reach port %s, want only vacate-controller's pods", o.GetName(), f, port)
				}
			}
			return
		}
	}
	t.Errorf("no NetworkPolicy limits who reaches port %s", port)
}

// toString is a port as YAML gives it: a number or a name.
func toString(v any) string { return fmt.Sprint(v) }
