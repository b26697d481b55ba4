package rbac

import (
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/vacate-dev/vacate/internal/dev/testenv"
)

// TestControllerMintsOnlyHookTokens: vacate-controller may request tokens of
// its own service account (it proves who it is to HTTP hooks), but only
// ten-minute tokens for one pod's hook: a stolen controller token cannot
// mint tokens for the API server, nor long-lived ones, that would outlive
// the pod it was stolen from.
func TestControllerMintsOnlyHookTokens(t *testing.T) {
	c := testenv.Start(t)
	install(t, c)
	ensureServiceAccount(t, c, namespace, "vacate-controller")
	sa := clientset(t, asServiceAccount(c)).CoreV1().ServiceAccounts(namespace)
	mint := func(audiences []string, seconds int64) error {
		_, err := sa.CreateToken(testenv.Context(t), "vacate-controller", &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: ptr.To(seconds)}}, metav1.CreateOptions{})
		return err
	}
	const (
		audience = "vacate-controller may request tokens only for the HTTP hook of one pod"
		life     = "vacate-controller may request hook tokens of at most ten minutes"
	)
	hook := []string{"vacate.dev/hook", "vacate.dev/hook/0b2d3f4e-uid"}
	check(t, "the policy refusing a token for the API server", func() error { return refused(mint(nil, 600), audience) })
	for _, tc := range []struct {
		what      string
		audiences []string
		seconds   int64
		refusal   string
	}{
		{"for the API server's issuer", []string{"https://kubernetes.default.svc.cluster.local"}, 600, audience},
		{"for the generic hook audience alone (good at every pod)", []string{"vacate.dev/hook"}, 600, audience},
		{"for two pods", []string{"vacate.dev/hook", "vacate.dev/hook/a", "vacate.dev/hook/b"}, 600, audience},
		{"for another audience", []string{"vacate.dev/hook", "sts.amazonaws.com"}, 600, audience},
		{"for a day", hook, 86400, life},
		{"for one pod's hook, ten minutes", hook, 600, ""},
	} {
		err := mint(tc.audiences, tc.seconds)
		if tc.refusal != "" {
			err = refused(err, tc.refusal)
		}
		if err != nil {
			t.Errorf("a token %s: %v", tc.what, err)
		}
	}
}
