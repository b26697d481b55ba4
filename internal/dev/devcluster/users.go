package devcluster

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// KubeconfigFor writes a kubeconfig that authenticates as user (with the
// given groups) by a client certificate signed by the cluster's CA, and
// returns its path. RBAC then decides what the user may do: tests use it to
// run vacate-controller with exactly its generated ClusterRole.
func (c *Cluster) KubeconfigFor(user string, groups ...string) (string, error) {
	ca, err := loadCA(filepath.Join(c.Dir, "pki"))
	if err != nil {
		return "", err
	}
	cert, err := ca.newClientCert(user, groups...)
	if err != nil {
		return "", err
	}
	name := strings.NewReplacer(":", "-", "/", "-").Replace(user)
	path := filepath.Join(c.Dir, "users", name+".kubeconfig")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("creating users directory: %w", err)
	}
	if err := writeKubeconfig(path, "vacate-"+c.Name+"-"+name, c.Server, ca, cert); err != nil {
		return "", err
	}
	return path, nil
}

// loadCA reads the CA the cluster was started with.
func loadCA(dir string) (*keyPair, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("reading cluster CA: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, "ca.key"))
	if err != nil {
		return nil, fmt.Errorf("reading cluster CA key: %w", err)
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, errors.New("cluster CA files are not PEM")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing cluster CA: %w", err)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing cluster CA key: %w", err)
	}
	return &keyPair{cert: cert, key: key, certPEM: certPEM, keyPEM: keyPEM}, nil
}
