// Package hookauth checks who calls an app's HTTP evacuation hook (vacate's
// HTTP evacuation protocol v1). vacate-controller proves who it is on every
// call with a short-lived Kubernetes service-account token in
// "Authorization: Bearer": requested through the TokenRequest API for the
// audiences "vacate.dev/hook" and "vacate.dev/hook/<pod UID>", the pod it
// calls, about ten minutes long. A Verifier checks that token the way the
// API server would, without asking it: the signature against the cluster's
// service-account keys (read from the API server's issuer discovery, which
// every service account may read), the issuer, the expiry, the audience of
// this very pod (so a token sent to one pod cannot be replayed to another),
// and that the subject is a caller this app trusts (vacate-controller's
// service account by default).
//
// An app that implements the protocol itself needs a few lines:
//
//	v, err := hookauth.New(hookauth.Options{Pod: os.Getenv("POD_UID")})
//	if err != nil { ... }
//	http.Handle("/evacuate", v.Require(http.HandlerFunc(evacuate)))
//
// with POD_UID from the downward API (fieldRef metadata.uid). Require
// answers 401 (no token, or not a valid one for this pod), 403 (a valid
// token of a caller not trusted here) or 503 (the keys cannot be read yet),
// and never calls the handler then. On success the answer carries the header
// Vacate-Caller-Verified, which tells vacate (status.hooks, vacate explain)
// that this hook checks its caller.
//
// Inside a pod, the keys are read from the API server with the pod's own
// service-account token (InCluster); the default RBAC of Kubernetes binds the
// ClusterRole system:service-account-issuer-discovery to every service
// account, so no grant is needed.
package hookauth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Names of the protocol's authentication.
const (
	// Audience is the audience every hook token carries.
	Audience = "vacate.dev/hook"
	// DefaultCaller is vacate-controller's service account, as a user name:
	// the caller trusted when Options.Callers is empty.
	DefaultCaller = "system:serviceaccount:vacate-system:vacate-controller"
	// VerifiedHeader is set on the answers of a hook that verified its
	// caller, to the caller's user name.
	VerifiedHeader = "Vacate-Caller-Verified"
	// MaxLifetime is the longest a token may be valid (from issue to
	// expiry); vacate-controller asks for ten minutes.
	MaxLifetime = time.Hour
	// leeway is the clock skew allowed on expiry and not-before.
	leeway = 30 * time.Second
)

// PodAudience is the audience that addresses a token to one pod, by UID.
func PodAudience(uid string) string { return Audience + "/" + uid }

// algorithms are the signatures the API server makes with RSA or ECDSA keys.
var algorithms = []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.ES256, jose.ES384, jose.ES512, jose.PS256}

// Options configure a Verifier.
type Options struct {
	// Pod is the UID of the pod the hook serves (downward API metadata.uid):
	// only tokens addressed to it are accepted. Required.
	Pod string
	// Callers are the user names trusted to call the hook, such as
	// "system:serviceaccount:vacate-system:vacate-controller"; DefaultCaller
	// when empty.
	Callers []string
	// Keys is where the issuer and its keys are read; InCluster() when nil.
	Keys *Discovery
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Log receives refusals and key refreshes; slog.Default() when nil.
	Log *slog.Logger
}

// Verifier checks hook callers' tokens. It is safe for concurrent use.
type Verifier struct {
	pod     string
	callers []string
	keys    *Discovery
	now     func() time.Time
	log     *slog.Logger

	mu sync.Mutex
	// issuer and set are the last keys read; fetched when, tried when the
	// last attempt was made and failed with fetchErr.
	issuer   string
	set      *jose.JSONWebKeySet
	fetched  time.Time
	tried    time.Time
	fetchErr error
}

// Key refreshes: at most one read every minRefresh (a token signed by a
// key not yet known is refused until then), and the keys are read again
// when older than maxAge.
const (
	minRefresh = 10 * time.Second
	maxAge     = 10 * time.Minute
)

// New returns a Verifier. It reads no keys yet: the first call does (and
// answers 503 while they cannot be read).
func New(opts Options) (*Verifier, error) {
	if strings.TrimSpace(opts.Pod) == "" {
		return nil, errors.New("hookauth: Options.Pod is empty: give the pod's UID (downward API fieldRef metadata.uid, for example as env POD_UID), so that a token addressed to another pod is refused")
	}
	callers := opts.Callers
	if len(callers) == 0 {
		callers = []string{DefaultCaller}
	}
	for _, c := range callers {
		if !strings.HasPrefix(c, "system:serviceaccount:") || strings.Count(c, ":") != 3 {
			return nil, fmt.Errorf("hookauth: caller %q: want a service account as a user name, system:serviceaccount:NAMESPACE:NAME", c)
		}
	}
	keys := opts.Keys
	if keys == nil {
		var err error
		if keys, err = InCluster(); err != nil {
			return nil, err
		}
	}
	v := &Verifier{pod: opts.Pod, callers: slices.Clone(callers), keys: keys, now: opts.Now, log: opts.Log}
	if v.now == nil {
		v.now = time.Now
	}
	if v.log == nil {
		v.log = slog.Default()
	}
	return v, nil
}

// Caller is who a verified token names.
type Caller struct {
	// Username is the token's subject, system:serviceaccount:NS:NAME.
	Username string
	// Expiry is when the token stops being valid.
	Expiry time.Time
}

// Error is a refused call: its HTTP status and why.
type Error struct {
	Status int
	Reason string
}

func (e *Error) Error() string { return e.Reason }

func unauthorized(format string, args ...any) *Error {
	return &Error{Status: http.StatusUnauthorized, Reason: fmt.Sprintf(format, args...)}
}

// Verify checks the bearer token of a request's headers.
func (v *Verifier) Verify(ctx context.Context, h http.Header) (Caller, error) {
	auth := h.Get("Authorization")
	if auth == "" {
		return Caller{}, unauthorized("no Authorization header: this hook answers only vacate-controller, which sends a bearer token")
	}
	scheme, raw, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(raw) == "" {
		return Caller{}, unauthorized("the Authorization header is not a bearer token")
	}
	tok, err := jwt.ParseSigned(strings.TrimSpace(raw), algorithms)
	if err != nil {
		return Caller{}, unauthorized("the bearer token is not a signed JWT: %v", err)
	}
	issuer, keys, err := v.keysFor(ctx, tok)
	if err != nil {
		return Caller{}, err
	}
	var claims jwt.Claims
	verified := false
	for _, k := range keys {
		if tok.Claims(k.Key, &claims) == nil {
			verified = true
			break
		}
	}
	if !verified {
		return Caller{}, unauthorized("the bearer token is not signed by the cluster's service-account issuer")
	}
	return v.check(issuer, claims)
}

// check is what a token with a good signature must claim.
func (v *Verifier) check(issuer string, c jwt.Claims) (Caller, error) {
	now := v.now()
	switch err := c.ValidateWithLeeway(jwt.Expected{Issuer: issuer, Time: now}, leeway); {
	case errors.Is(err, jwt.ErrExpired):
		return Caller{}, unauthorized("the bearer token expired at %s", c.Expiry.Time().UTC().Format(time.RFC3339))
	case errors.Is(err, jwt.ErrNotValidYet), errors.Is(err, jwt.ErrIssuedInTheFuture):
		return Caller{}, unauthorized("the bearer token is not valid yet")
	case errors.Is(err, jwt.ErrInvalidIssuer):
		return Caller{}, unauthorized("the bearer token's issuer %q is not the cluster's (%q)", c.Issuer, issuer)
	case err != nil:
		return Caller{}, unauthorized("the bearer token: %v", err)
	}
	if c.Expiry == nil || c.IssuedAt == nil {
		return Caller{}, unauthorized("the bearer token has no expiry: a hook token is short-lived (TokenRequest), never a long-lived secret")
	}
	if life := c.Expiry.Time().Sub(c.IssuedAt.Time()); life > MaxLifetime {
		return Caller{}, unauthorized("the bearer token is valid for %s, longer than %s", life.Round(time.Second), MaxLifetime)
	}
	if !c.Audience.Contains(PodAudience(v.pod)) {
		return Caller{}, unauthorized("the bearer token is not addressed to this pod (its audience %v lacks %s)", []string(c.Audience), PodAudience(v.pod))
	}
	if !slices.Contains(v.callers, c.Subject) {
		return Caller{}, &Error{Status: http.StatusForbidden,
			Reason: fmt.Sprintf("caller %s is not trusted to call this hook (trusted: %s)", c.Subject, strings.Join(v.callers, ", "))}
	}
	return Caller{Username: c.Subject, Expiry: c.Expiry.Time()}, nil
}

// keysFor returns the issuer and the keys that may have signed tok: those
// of its key ID, or all when it names none. Keys are read when none are
// known, when tok names a key not known (a rotation), or when they are
// older than maxAge; at most once every minRefresh.
func (v *Verifier) keysFor(ctx context.Context, tok *jwt.JSONWebToken) (string, []jose.JSONWebKey, error) {
	kid := ""
	if len(tok.Headers) > 0 {
		kid = tok.Headers[0].KeyID
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	now := v.now()
	stale := v.set == nil || now.Sub(v.fetched) > maxAge || (kid != "" && len(v.set.Key(kid)) == 0)
	if stale && now.Sub(v.tried) >= minRefresh {
		v.tried = now
		issuer, set, err := v.keys.Fetch(ctx)
		if err != nil {
			v.fetchErr = err
			v.log.Error("cannot read the cluster's service-account keys; callers cannot be verified until they are read", "err", err)
		} else {
			if v.set == nil || v.issuer != issuer || len(v.set.Keys) != len(set.Keys) {
				v.log.Info("read the cluster's service-account keys", "issuer", issuer, "keys", len(set.Keys))
			}
			v.issuer, v.set, v.fetched, v.fetchErr = issuer, set, now, nil
		}
	}
	if v.set == nil {
		return "", nil, &Error{Status: http.StatusServiceUnavailable,
			Reason: fmt.Sprintf("cannot verify callers yet: reading the cluster's service-account keys: %v", v.fetchErr)}
	}
	keys := v.set.Keys
	if kid != "" {
		keys = v.set.Key(kid)
	}
	if len(keys) == 0 {
		return "", nil, unauthorized("the bearer token is signed with key %q, which is not one of the cluster's service-account keys", kid)
	}
	return v.issuer, keys, nil
}

type callerKey struct{}

// CallerFrom is the caller Require verified for a request.
func CallerFrom(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}

// Require serves next only to verified, trusted callers; others get 401,
// 403 or 503 with a one-line reason, and next is not called. Verified
// answers carry VerifiedHeader.
func (v *Verifier) Require(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := v.Verify(r.Context(), r.Header)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				e = &Error{Status: http.StatusInternalServerError, Reason: err.Error()}
			}
			if e.Status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="vacate.dev/hook", error="invalid_token"`)
			}
			v.log.Info("refused a hook call", "method", r.Method, "from", r.RemoteAddr, "status", e.Status, "why", e.Reason)
			http.Error(w, e.Reason, e.Status)
			return
		}
		w.Header().Set(VerifiedHeader, c.Username)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)))
	})
}
