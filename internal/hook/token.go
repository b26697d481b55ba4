package hook

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/vacate-dev/vacate/pkg/hookauth"
)

// Tokens gives each hook call the bearer token that proves who calls.
type Tokens interface {
	// Token is a token for calls to the pod's hook. It may be cached: a
	// token is asked for again well before it expires.
	Token(ctx context.Context, pod types.UID) (string, error)
}

// DefaultCaller is the service account whose tokens vacate-controller
// sends: its own.
const DefaultCaller = "vacate-system/vacate-controller"

// TokenLifetime is how long a hook token is valid: the shortest the
// TokenRequest API issues. A token is renewed once a third of it is left.
const TokenLifetime = 10 * time.Minute

// ParseCaller reads NAMESPACE/NAME, a service account.
func ParseCaller(s string) (types.NamespacedName, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return types.NamespacedName{}, fmt.Errorf("hook caller %q: want the service account as NAMESPACE/NAME, such as %s", s, DefaultCaller)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// TokenRequests asks the API server (the TokenRequest API) for tokens of
// one service account, each addressed to one pod: the audiences
// hookauth.Audience and hookauth.PodAudience(pod), valid TokenLifetime. A
// pod's hook can thus not replay the token it was sent to another pod.
type TokenRequests struct {
	Client  corev1client.ServiceAccountsGetter
	Account types.NamespacedName
	Now     func() time.Time

	mu    sync.Mutex
	cache map[types.UID]token
}

type token struct {
	raw            string
	renew, expires time.Time
}

// NewTokenRequests returns tokens of the service account.
func NewTokenRequests(c corev1client.ServiceAccountsGetter, account types.NamespacedName) *TokenRequests {
	return &TokenRequests{Client: c, Account: account, Now: time.Now, cache: map[types.UID]token{}}
}

// Token returns the pod's cached token, or asks for a new one when it
// nears its expiry.
func (t *TokenRequests) Token(ctx context.Context, pod types.UID) (string, error) {
	now := t.Now()
	t.mu.Lock()
	tok, ok := t.cache[pod]
	for uid, c := range t.cache { // forget the tokens of pods no longer called
		if !now.Before(c.expires) {
			delete(t.cache, uid)
		}
	}
	t.mu.Unlock()
	if ok && now.Before(tok.renew) {
		return tok.raw, nil
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences:         []string{hookauth.Audience, hookauth.PodAudience(string(pod))},
		ExpirationSeconds: new(int64(TokenLifetime / time.Second)),
	}}
	res, err := t.Client.ServiceAccounts(t.Account.Namespace).CreateToken(ctx, t.Account.Name, req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token of service account %s for the hook: %w", t.Account, err)
	}
	expires := res.Status.ExpirationTimestamp.Time
	life := expires.Sub(now)
	tok = token{raw: res.Status.Token, renew: now.Add(life * 2 / 3), expires: expires}
	t.mu.Lock()
	t.cache[pod] = tok
	t.mu.Unlock()
	return tok.raw, nil
}
