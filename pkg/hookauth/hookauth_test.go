package hookauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// These tests cover the Verifier's own rules (expiry, lifetime, key
// rotation, how often keys are read) with keys the test makes, served the
// way the API server serves its issuer discovery. That real tokens of the
// real API server are verified, and everything else refused, is shown on
// the dev cluster by test/rbac TestHookAnswersOnlyTheController.

const issuer = "https://kubernetes.default.svc.cluster.local"

// discovery serves the discovery documents of a changing key set, to
// callers with the right token, and counts the key reads.
type discovery struct {
	mu    sync.Mutex
	keys  []jose.JSONWebKey
	reads int
	down  bool
}

func (d *discovery) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer pod-token" {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	if d.down {
		http.Error(w, "etcd is away", http.StatusServiceUnavailable)
		return
	}
	// As the API server: each document in its one media type, 406 otherwise.
	want := map[string]string{"/.well-known/openid-configuration": "application/json", "/openid/v1/jwks": "application/jwk-set+json"}[r.URL.Path]
	if want != "" && r.Header.Get("Accept") != want {
		http.Error(w, "406: Not Acceptable\n\nAvailable representations: "+want, http.StatusNotAcceptable)
		return
	}
	switch r.URL.Path {
	case "/.well-known/openid-configuration":
		_ = json.NewEncoder(w).Encode(map[string]string{"issuer": issuer, "jwks_uri": "https://elsewhere.example/keys"})
	case "/openid/v1/jwks":
		d.reads++
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: d.keys})
	default:
		http.NotFound(w, r)
	}
}

type key struct {
	priv *ecdsa.PrivateKey
	kid  string
}

func newKey(t *testing.T, kid string) key {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key{priv: k, kid: kid}
}

func (k key) public() jose.JSONWebKey {
	return jose.JSONWebKey{Key: &k.priv.PublicKey, KeyID: k.kid, Algorithm: "ES256", Use: "sig"}
}

func (k key) sign(t *testing.T, c jwt.Claims) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: k.priv}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", k.kid))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := jwt.Signed(s).Claims(c).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

type env struct {
	d   *discovery
	v   *Verifier
	now time.Time
}

func newEnv(t *testing.T, keys ...key) *env {
	t.Helper()
	d := &discovery{}
	for _, k := range keys {
		d.keys = append(d.keys, k.public())
	}
	srv := httptest.NewTLSServer(d)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("pod-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := &env{d: d, now: time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)}
	v, err := New(Options{Pod: "pod-uid", Keys: &Discovery{Server: srv.URL, CAFile: ca, TokenFile: tokenFile}, Now: func() time.Time { return e.now }})
	if err != nil {
		t.Fatal(err)
	}
	e.v = v
	return e
}

// claims are a controller token's, for pod-uid, issued at now for 10 minutes.
func (e *env) claims() jwt.Claims {
	return jwt.Claims{Issuer: issuer, Subject: DefaultCaller, Audience: jwt.Audience{Audience, PodAudience("pod-uid")},
		IssuedAt: jwt.NewNumericDate(e.now), NotBefore: jwt.NewNumericDate(e.now), Expiry: jwt.NewNumericDate(e.now.Add(10 * time.Minute))}
}

func (e *env) verify(raw string) (Caller, error) {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+raw)
	return e.v.Verify(context.Background(), h)
}

func status(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

func TestVerifierChecksEveryClaim(t *testing.T) {
	k := newKey(t, "k1")
	e := newEnv(t, k)
	if c, err := e.verify(k.sign(t, e.claims())); err != nil || c.Username != DefaultCaller {
		t.Fatalf("a good token: %+v, %v", c, err)
	}
	for _, tc := range []struct {
		name   string
		change func(c *jwt.Claims)
		code   int
		says   string
	}{
		{"another issuer", func(c *jwt.Claims) { c.Issuer = "https://evil.example" }, 401, "issuer"},
		{"expired", func(c *jwt.Claims) { c.Expiry = jwt.NewNumericDate(e.now.Add(-time.Minute)) }, 401, "expired"},
		{"not valid yet", func(c *jwt.Claims) { c.NotBefore = jwt.NewNumericDate(e.now.Add(time.Hour)) }, 401, "not valid yet"},
		{"no expiry", func(c *jwt.Claims) { c.Expiry = nil }, 401, "no expiry"},
		{"a day long", func(c *jwt.Claims) { c.Expiry = jwt.NewNumericDate(e.now.Add(24 * time.Hour)) }, 401, "longer than 1h0m0s"},
		{"the generic audience alone", func(c *jwt.Claims) { c.Audience = jwt.Audience{Audience} }, 401, "not addressed to this pod"},
		{"another pod's audience", func(c *jwt.Claims) { c.Audience = jwt.Audience{Audience, PodAudience("other")} }, 401, "not addressed to this pod"},
		{"a tenant", func(c *jwt.Claims) { c.Subject = "system:serviceaccount:shop:default" }, 403, "not trusted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := e.claims()
			tc.change(&c)
			_, err := e.verify(k.sign(t, c))
			if status(err) != tc.code || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("got %d %v, want %d saying %q", status(err), err, tc.code, tc.says)
			}
		})
	}
	t.Run("expiry with the clock", func(t *testing.T) {
		raw := k.sign(t, e.claims())
		e.now = e.now.Add(10*time.Minute + leeway + time.Second)
		defer func() { e.now = e.now.Add(-(10*time.Minute + leeway + time.Second)) }()
		if _, err := e.verify(raw); status(err) != 401 {
			t.Errorf("a token past its expiry: %v, want 401", err)
		}
	})
}

// TestVerifierFollowsKeyRotation: a token signed by a key the verifier has
// not seen makes it read the keys again (the issuer rotated), but at most
// once every minRefresh, so a caller sending unknown key IDs cannot make
// it hammer the API server.
func TestVerifierFollowsKeyRotation(t *testing.T) {
	old, next := newKey(t, "old"), newKey(t, "new")
	e := newEnv(t, old)
	if _, err := e.verify(old.sign(t, e.claims())); err != nil {
		t.Fatal(err)
	}
	e.d.mu.Lock()
	e.d.keys = append(e.d.keys, next.public())
	e.d.mu.Unlock()
	e.now = e.now.Add(minRefresh)
	if _, err := e.verify(next.sign(t, e.claims())); err != nil {
		t.Fatalf("a token of the rotated-in key: %v", err)
	}
	reads := e.d.reads
	for range 20 {
		_, err := e.verify(newKey(t, "bogus").sign(t, e.claims()))
		if status(err) != 401 {
			t.Fatalf("a token of an unknown key: %v, want 401", err)
		}
	}
	if e.d.reads != reads {
		t.Errorf("20 tokens of unknown keys within %s read the keys %d more times, want none", minRefresh, e.d.reads-reads)
	}
}

// TestVerifierWithoutKeys: while the keys cannot be read, callers get 503
// (not 401: the token may be good) and the reason; once they can, the
// same token is accepted.
func TestVerifierWithoutKeys(t *testing.T) {
	k := newKey(t, "k1")
	e := newEnv(t, k)
	e.d.down = true
	raw := k.sign(t, e.claims())
	if _, err := e.verify(raw); status(err) != 503 || !strings.Contains(err.Error(), "etcd is away") {
		t.Fatalf("keys unreadable: %v, want 503 with the reason", err)
	}
	e.d.mu.Lock()
	e.d.down = false
	e.d.mu.Unlock()
	e.now = e.now.Add(minRefresh)
	if _, err := e.verify(raw); err != nil {
		t.Fatalf("keys readable again: %v", err)
	}
}

// TestRequireAnswersAndPasses: the middleware answers refusals itself (the
// handler never runs) and marks verified answers.
func TestRequireAnswersAndPasses(t *testing.T) {
	k := newKey(t, "k1")
	e := newEnv(t, k)
	ran := 0
	h := e.v.Require(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := CallerFrom(r.Context()); !ok || c.Username != DefaultCaller {
			t.Errorf("caller in the context: %+v %v", c, ok)
		}
		ran++
	}))
	for _, tc := range []struct {
		auth string
		code int
	}{
		{"", 401}, {"Basic dXNlcjpwYXNz", 401}, {"Bearer ", 401}, {"Bearer " + k.sign(t, e.claims()), 200},
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/evacuate", nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		h.ServeHTTP(rec, req)
		if rec.Code != tc.code {
			t.Errorf("Authorization %.20q: HTTP %d, want %d", tc.auth, rec.Code, tc.code)
		}
		if got := rec.Header().Get(VerifiedHeader); (tc.code == 200) != (got == DefaultCaller) {
			t.Errorf("Authorization %.20q: %s %q", tc.auth, VerifiedHeader, got)
		}
	}
	if ran != 1 {
		t.Errorf("the handler ran %d times, want once (for the good token)", ran)
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	d := &Discovery{Server: "https://x", TokenFile: "/t"}
	for _, tc := range []struct {
		opts Options
		says string
	}{
		{Options{Keys: d}, "Options.Pod is empty"},
		{Options{Pod: "u", Keys: d, Callers: []string{"vacate-controller"}}, "want a service account"},
	} {
		if _, err := New(tc.opts); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("New(%+v): %v, want %q", tc.opts, err, tc.says)
		}
	}
}
