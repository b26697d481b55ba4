package sidecar

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"

	"github.com/vacate-dev/vacate/pkg/hookauth"
)

// The downward API's values the sidecar reads from its environment: the
// pod's UID (metadata.uid) and its node (spec.nodeName).
const (
	EnvPodUID   = "POD_UID"
	EnvNodeName = "NODE_NAME"
)

// Auth is how vacate-hook checks who calls it (pkg/hookauth): only the
// trusted callers' tokens, addressed to this very pod, are served.
type Auth struct {
	// Callers are the service accounts trusted to call, as NAMESPACE/NAME;
	// vacate-system/vacate-controller when empty.
	Callers []string `json:"callers,omitempty"`
	// APIServer, CAFile and TokenFile say where the cluster's
	// service-account keys are read, as the pod's service account: in a
	// pod, unset, the API server of KUBERNETES_SERVICE_HOST with the
	// mounted CA and token. APIServer is https://HOST[:PORT].
	APIServer string `json:"apiServer,omitempty"`
	CAFile    string `json:"caFile,omitempty"`
	TokenFile string `json:"tokenFile,omitempty"`
	// Disabled serves every caller, as vacate-hook did before it checked
	// them: any pod that reaches the sidecar may then start or cancel a
	// drain's evacuation. Only for a vacate-controller older than v0.2.0,
	// which sends no token; the sidecar warns at every start.
	Disabled bool `json:"disabled,omitempty"`
}

var accountShape = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-.a-z0-9]*[a-z0-9])?$`)

// validate checks the fields.
func (a *Auth) validate() []error {
	var errs []error
	for i, c := range a.Callers {
		if !accountShape.MatchString(c) {
			errs = append(errs, fmt.Errorf("auth.callers[%d]: %q: want a service account as NAMESPACE/NAME, such as vacate-system/vacate-controller", i, c))
		}
	}
	if a.Disabled && (len(a.Callers) > 0 || a.APIServer != "" || a.CAFile != "" || a.TokenFile != "") {
		errs = append(errs, errors.New("auth.disabled: true serves every caller; the other auth fields would be ignored: remove them or remove disabled"))
	}
	if a.APIServer != "" {
		d := hookauth.Discovery{Server: a.APIServer, TokenFile: "-"}
		if err := d.Check(); err != nil {
			errs = append(errs, fmt.Errorf("auth.apiServer: %w", err))
		}
	}
	return errs
}

// callers are the trusted callers as user names.
func (a *Auth) callers() []string {
	var out []string
	for _, c := range a.Callers {
		ns, name, _ := strings.Cut(c, "/")
		out = append(out, "system:serviceaccount:"+ns+":"+name)
	}
	return out
}

// verifier builds the check of callers for the pod of uid; nil when auth
// is disabled.
func (a *Auth) verifier(uid string, log *slog.Logger) (*hookauth.Verifier, error) {
	if a.Disabled {
		log.Warn("auth.disabled: every caller is served; any pod that reaches this sidecar may start or cancel an evacuation (docs/recipes)")
		return nil, nil
	}
	if uid == "" {
		return nil, fmt.Errorf("%s is not set: give the pod's UID from the downward API (env %s, fieldRef metadata.uid), so that only tokens addressed to this pod are served", EnvPodUID, EnvPodUID)
	}
	var keys *hookauth.Discovery
	if a.APIServer != "" || a.TokenFile != "" || a.CAFile != "" {
		in, _ := hookauth.InCluster()
		if in == nil {
			in = &hookauth.Discovery{}
		}
		keys = &hookauth.Discovery{Server: or(a.APIServer, in.Server), CAFile: or(a.CAFile, in.CAFile), TokenFile: or(a.TokenFile, in.TokenFile)}
		if keys.TokenFile == "" {
			keys.TokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
		}
		if err := keys.Check(); err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
	}
	v, err := hookauth.New(hookauth.Options{Pod: uid, Callers: a.callers(), Keys: keys, Log: log})
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	return v, nil
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// identity is what the sidecar knows of its pod from the downward API.
type identity struct{ uid, node string }

func identityFromEnv() identity {
	return identity{uid: strings.TrimSpace(os.Getenv(EnvPodUID)), node: strings.TrimSpace(os.Getenv(EnvNodeName))}
}
