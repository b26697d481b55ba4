package hookauth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// In-cluster paths and variables, as client-go's rest.InClusterConfig reads them.
const (
	inClusterTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	inClusterCAFile    = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
)

// Discovery reads the cluster's service-account issuer and its public keys
// from the API server's issuer discovery (/.well-known/openid-configuration
// and /openid/v1/jwks), authenticated as the pod's own service account.
// The keys are read from the API server itself, never from a jwks_uri the
// discovery document names.
type Discovery struct {
	// Server is the API server's URL, https://HOST:PORT.
	Server string
	// CAFile holds the certificates the API server's certificate is
	// checked against.
	CAFile string
	// TokenFile is a service-account token of the pod, read again at each
	// fetch (the kubelet rotates it). Any service account will do: the
	// default ClusterRoleBinding system:service-account-issuer-discovery
	// lets every service account read the discovery documents.
	TokenFile string
	// Client makes the requests; one with the CA and a 10 s timeout when nil.
	Client *http.Client
}

// InCluster is the discovery of the cluster the pod runs in: the API
// server of KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT, the
// service-account token and CA mounted in every pod.
func InCluster() (*Discovery, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errors.New("hookauth: not in a pod (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are unset): give Options.Keys the API server, its CA and a service-account token")
	}
	return &Discovery{Server: "https://" + net.JoinHostPort(host, port), CAFile: inClusterCAFile, TokenFile: inClusterTokenFile}, nil
}

// Check says what is wrong with the discovery's settings, if anything.
func (d *Discovery) Check() error {
	u, err := url.Parse(d.Server)
	switch {
	case d.Server == "":
		return errors.New("the API server's URL is empty")
	case err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/"):
		return fmt.Errorf("the API server's URL %q: want https://HOST[:PORT]", d.Server)
	case d.TokenFile == "":
		return errors.New("no service-account token file: the keys are read as the pod's service account")
	}
	return nil
}

// client is the HTTP client of the reads.
func (d *Discovery) client() (*http.Client, error) {
	if d.Client != nil {
		return d.Client, nil
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if d.CAFile != "" {
		pem, err := os.ReadFile(d.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading the API server's CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("the API server's CA file %s holds no PEM certificate", d.CAFile)
		}
		tlsConfig.RootCAs = pool
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, TLSClientConfig: tlsConfig}}, nil
}

// Fetch reads the issuer and its keys.
func (d *Discovery) Fetch(ctx context.Context) (string, *jose.JSONWebKeySet, error) {
	if err := d.Check(); err != nil {
		return "", nil, err
	}
	c, err := d.client()
	if err != nil {
		return "", nil, err
	}
	token, err := os.ReadFile(d.TokenFile)
	if err != nil {
		return "", nil, fmt.Errorf("reading the pod's service-account token: %w", err)
	}
	var doc struct {
		Issuer string `json:"issuer"`
	}
	if err := d.get(ctx, c, strings.TrimSpace(string(token)), "/.well-known/openid-configuration", "application/json", &doc); err != nil {
		return "", nil, err
	}
	if doc.Issuer == "" {
		return "", nil, errors.New("the API server's discovery document names no issuer")
	}
	var set jose.JSONWebKeySet
	if err := d.get(ctx, c, strings.TrimSpace(string(token)), "/openid/v1/jwks", "application/jwk-set+json", &set); err != nil {
		return "", nil, err
	}
	var public []jose.JSONWebKey
	for _, k := range set.Keys {
		if k.Valid() && k.IsPublic() {
			public = append(public, k)
		}
	}
	if len(public) == 0 {
		return "", nil, errors.New("the API server serves no public service-account key")
	}
	return doc.Issuer, &jose.JSONWebKeySet{Keys: public}, nil
}

// get reads one discovery document into out. The API server serves each
// in one media type only, and answers 406 to an Accept without it.
func (d *Discovery) get(ctx context.Context, c *http.Client, token, path, media string, out any) error {
	u := strings.TrimSuffix(d.Server, "/") + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", media)
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("GET %s: HTTP %d: the pod's service account may not read the issuer discovery (the ClusterRoleBinding system:service-account-issuer-discovery binds it to every service account by default): %s",
			u, resp.StatusCode, strings.TrimSpace(string(body)))
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("GET %s: HTTP %d: %s", u, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	return nil
}
