package hook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/vacate-dev/vacate/pkg/hookauth"
)

// tokenAPI answers TokenRequests as the API server would (the token names
// its audiences and a counter), or fails while fail is set.
type tokenAPI struct {
	mu        sync.Mutex
	n         int
	audiences [][]string
	fail      error
	now       func() time.Time
}

func (a *tokenAPI) react(action k8stesting.Action) (bool, runtime.Object, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fail != nil {
		return true, nil, a.fail
	}
	req := action.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenRequest)
	a.n++
	a.audiences = append(a.audiences, req.Spec.Audiences)
	exp := a.now().Add(time.Duration(*req.Spec.ExpirationSeconds) * time.Second)
	return true, &authenticationv1.TokenRequest{Status: authenticationv1.TokenRequestStatus{
		Token: fmt.Sprintf("token-%d", a.n), ExpirationTimestamp: metav1.NewTime(exp)}}, nil
}

func newTokens(t *testing.T) (*TokenRequests, *tokenAPI, *time.Time) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	api := &tokenAPI{now: func() time.Time { return now }}
	cs := fake.NewClientset()
	cs.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "token" {
			return false, nil, nil
		}
		return api.react(a)
	})
	caller, err := ParseCaller(DefaultCaller)
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTokenRequests(cs.CoreV1(), caller)
	tr.Now = func() time.Time { return now }
	return tr, api, &now
}

// TestTokensPerPodRenewedBeforeExpiry: each pod gets a token addressed to
// it, asked for once and used until a third of its life is left.
func TestTokensPerPodRenewedBeforeExpiry(t *testing.T) {
	tr, api, now := newTokens(t)
	ctx := context.Background()
	a1, _ := tr.Token(ctx, "pod-a")
	b1, _ := tr.Token(ctx, "pod-b")
	a2, _ := tr.Token(ctx, "pod-a")
	if a1 == b1 || a1 != a2 || api.n != 2 {
		t.Fatalf("tokens a=%q,%q b=%q after %d requests: want one per pod, reused", a1, a2, b1, api.n)
	}
	if want := []string{hookauth.Audience, hookauth.PodAudience("pod-a")}; !slices.Equal(api.audiences[0], want) {
		t.Errorf("audiences %v, want %v", api.audiences[0], want)
	}
	*now = now.Add(TokenLifetime * 2 / 3)
	if a3, _ := tr.Token(ctx, "pod-a"); a3 == a1 || api.n != 3 {
		t.Errorf("with a third of its life left the token was %q (requests %d), want a new one", a3, api.n)
	}
	api.fail = errors.New(`serviceaccounts "vacate-controller" not found`)
	*now = now.Add(TokenLifetime)
	if _, err := tr.Token(ctx, "pod-a"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("a refused TokenRequest: %v, want the API's error", err)
	}
}

// TestCallsCarryTheTokenAndReadTheAnswer: every call carries the pod's
// token; a hook that says it verified the caller is recorded; a call
// whose token cannot be had is not made, and is a problem, not a success.
func TestCallsCarryTheTokenAndReadTheAnswer(t *testing.T) {
	tr, api, _ := newTokens(t)
	var mu sync.Mutex
	var auths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set(hookauth.VerifiedHeader, hookauth.DefaultCaller)
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		_, _ = w.Write([]byte(`{"state":"Completed"}`))
	}))
	defer srv.Close()
	p := fastProber(nil)
	p.Tokens = tr
	tg := target(t, srv)
	r := eventually(t, p, tg, "Completed", func(r Result) bool { return r.Done() })
	if r.Verified != hookauth.DefaultCaller {
		t.Errorf("Verified %q, want the header's caller", r.Verified)
	}
	mu.Lock()
	for _, a := range auths {
		if a != "Bearer token-1" {
			t.Errorf("a call with Authorization %q, want the pod's token", a)
		}
	}
	mu.Unlock()

	api.fail = errors.New("forbidden")
	tr.cache = map[types.UID]token{}
	p2 := fastProber(nil)
	p2.Tokens = tr
	r = eventually(t, p2, tg, "a problem", func(r Result) bool { return r.Problem != "" })
	if r.Done() || !p2.NeverReached(tg) || !strings.Contains(r.Problem, "not made") {
		t.Errorf("without a token: %+v, want no call made and not done", r)
	}
}
