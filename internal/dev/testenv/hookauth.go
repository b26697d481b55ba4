package testenv

import (
	"os"
	"path/filepath"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vacate-dev/vacate/internal/dev/devcluster"
)

// HookAuth is the auth section of a vacate-hook configuration for a
// sidecar run out of a pod beside the simulated pod: the keys are read from
// the dev cluster's API server with a token of the service account sa of
// namespace ns (what the pod would have mounted; "default" has no grant),
// written into dir.
func HookAuth(t testing.TB, c *devcluster.Cluster, ns, sa, dir string) map[string]any {
	t.Helper()
	seconds := int64(3600)
	res, err := c.Client.CoreV1().ServiceAccounts(ns).CreateToken(Context(t), sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token of %s/%s for vacate-hook: %v", ns, sa, err)
	}
	path := filepath.Join(dir, "token")
	if err := os.WriteFile(path, []byte(res.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	return map[string]any{"apiServer": c.Server, "caFile": filepath.Join(c.Dir, "pki", "ca.crt"), "tokenFile": path}
}

// HookEnv is the environment a recipe gives vacate-hook from the downward
// API: the pod's UID and node.
func HookEnv(pod *corev1.Pod) []string {
	return []string{"POD_UID=" + string(pod.UID), "NODE_NAME=" + pod.Spec.NodeName}
}
