package devcluster

import (
	_ "embed"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// This file plans the control plane: it writes the certificates,
// kubeconfigs and configuration files the components read, chooses their
// ports, and hands the result (a layout) to the components' command lines
// in components.go.

// plan writes the certificates, kubeconfigs and configuration files and
// returns the components in groups: each group starts once the previous one
// is healthy.
func (c *Cluster) plan(bins Binaries, opts Options) ([][]*component, error) {
	ca, l, err := writePKI(filepath.Join(c.Dir, "pki"))
	if err != nil {
		return nil, err
	}
	l.dir, l.bins, l.extraArgs, l.podCIDR, l.evictionRequestAPI = c.Dir, bins, opts.ExtraArgs, c.PodCIDR, opts.EvictionRequestAPI
	if l.ports, err = choosePorts(opts.Ports); err != nil {
		return nil, err
	}
	l.server = "https://127.0.0.1:" + strconv.Itoa(l.ports[KubeAPIServer])
	c.Server = l.server
	if l.kubeconfigs, err = writeKubeconfigs(c.Dir, "vacate-"+c.Name, l.server, ca); err != nil {
		return nil, err
	}
	c.Kubeconfig = l.kubeconfigs["kubeconfig"]
	admin, err := ca.newClientCert("vacate-health", "system:masters")
	if err != nil {
		return nil, err
	}
	l.tlsClient = httpsClient(ca, admin)
	l.plain = &http.Client{Timeout: 2 * time.Second}
	if l.auditPolicy, l.kwokConfig, err = writeConfigs(c.Dir, opts); err != nil {
		return nil, err
	}
	c.AuditLog = filepath.Join(c.Dir, "logs", "audit.log")
	l.auditLog = c.AuditLog
	return [][]*component{{l.etcd()}, {l.apiserver()}, {l.controllerManager(), l.scheduler(), l.kwok()}}, nil
}

// layout is what the components' command lines name: the files plan wrote,
// the ports it chose and the clients that ask the components' health.
type layout struct {
	dir       string
	bins      Binaries
	extraArgs map[string][]string
	podCIDR   string
	// evictionRequestAPI serves lifecycle.k8s.io/v1alpha1 (Options).
	evictionRequestAPI bool
	ports              map[string]int
	// server is the API server's URL.
	server string

	caCert, caKey           string
	servingCert, servingKey string
	// saPub and saKey sign and check ServiceAccount tokens.
	saPub, saKey string
	// kubeconfigs are the kubeconfig paths, by component name, and
	// "kubeconfig" for the administrator's.
	kubeconfigs           map[string]string
	auditPolicy, auditLog string
	kwokConfig            string

	// tlsClient asks the secure components with an administrator's
	// certificate; plain asks etcd and kwok, which serve plain HTTP.
	tlsClient, plain *http.Client
}

// writePKI writes the cluster's certificate authority, the serving
// certificate every secure component presents and the ServiceAccount keys,
// and returns the authority with a layout that names their files.
func writePKI(pki string) (*keyPair, *layout, error) {
	ca, err := newCA("vacate-dev-ca")
	if err != nil {
		return nil, nil, err
	}
	l := &layout{}
	if l.caCert, l.caKey, err = ca.write(pki, "ca"); err != nil {
		return nil, nil, err
	}
	serving, err := ca.newServingCert("vacate-dev-server",
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		[]net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(10, 96, 0, 1)})
	if err != nil {
		return nil, nil, err
	}
	if l.servingCert, l.servingKey, err = serving.write(pki, "serving"); err != nil {
		return nil, nil, err
	}
	if l.saPub, l.saKey, err = writeServiceAccountKeys(pki); err != nil {
		return nil, nil, err
	}
	return ca, l, nil
}

// choosePorts gives every component (and etcd's peer listener) the port
// fixed for it, or a free one.
func choosePorts(fixed map[string]int) (map[string]int, error) {
	ports := map[string]int{}
	for _, name := range []string{Etcd, Etcd + "-peer", KubeAPIServer, KubeControllerManager, KubeScheduler, Kwok} {
		if p, ok := fixed[name]; ok {
			ports[name] = p
			continue
		}
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[name] = p
	}
	return ports, nil
}

// writeKubeconfigs writes a kubeconfig, with a client certificate of its
// own, for the administrator and for each component that calls the API
// server, and returns their paths by component name ("kubeconfig" for the
// administrator's).
func writeKubeconfigs(dir, contextName, server string, ca *keyPair) (map[string]string, error) {
	kubeconfigs := map[string]string{}
	for _, u := range []struct{ file, user, group string }{
		{"kubeconfig", "vacate-admin", "system:masters"},
		{KubeControllerManager, "system:kube-controller-manager", ""},
		{KubeScheduler, "system:kube-scheduler", ""},
		{Kwok, "kwok", "system:masters"},
	} {
		var groups []string
		if u.group != "" {
			groups = []string{u.group}
		}
		cert, err := ca.newClientCert(u.user, groups...)
		if err != nil {
			return nil, err
		}
		path := filepath.Join(dir, u.file+".kubeconfig")
		if u.file == "kubeconfig" {
			path = filepath.Join(dir, "kubeconfig")
		}
		if err := writeKubeconfig(path, contextName, server, ca, cert); err != nil {
			return nil, err
		}
		kubeconfigs[u.file] = path
	}
	return kubeconfigs, nil
}

// writeConfigs writes the API server's audit policy and kwok's
// configuration and returns their paths.
func writeConfigs(dir string, opts Options) (auditPolicy, kwokConfig string, err error) {
	auditPolicy = filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(auditPolicy, []byte(auditPolicyYAML(opts.AuditReadsOf)), 0o644); err != nil {
		return "", "", fmt.Errorf("writing audit policy: %w", err)
	}
	kwokConfig = filepath.Join(dir, "kwok.yaml")
	// An explicit, empty configuration: kwok's built-in stages, and never the
	// user's own ~/.kwok/kwok.yaml.
	if err := os.WriteFile(kwokConfig, []byte(kwokConfigYAML(opts.KwokParallelism)), 0o644); err != nil {
		return "", "", fmt.Errorf("writing kwok configuration: %w", err)
	}
	return auditPolicy, kwokConfig, nil
}

// kwokStages are kwok's pod stages, its own but for readiness gates, which
// they honour as the kubelet does (see the file).
//
//go:embed kwok-stages.yaml
var kwokStages string

// kwokNodeStages are kwok's node stages for nodes whose lease it renews,
// which kwok v0.7.0 does not pick by itself (see the file).
//
//go:embed kwok-node-stages.yaml
var kwokNodeStages string

// kwokConfigYAML is kwok's configuration: the node stages of
// kwokNodeStages, the pod stages of kwokStages, with parallelism pod
// stages, node stages and node lease renewals at once when it is set
// (kwok's default is 4 of each).
func kwokConfigYAML(parallelism int) string {
	options := " {}"
	if parallelism > 0 {
		n := strconv.Itoa(parallelism)
		options = "\n  podPlayStageParallelism: " + n + "\n  nodePlayStageParallelism: " + n + "\n  nodeLeaseParallelism: " + n
	}
	return "apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokConfiguration\noptions:" + options + "\n---\n" + kwokNodeStages + "---\n" + kwokStages
}

// auditPolicyYAML records every request that changes something (not reads), so
// tests can show what a command wrote and how many evictions succeeded, and
// every request of the users named in readsOf.
func auditPolicyYAML(readsOf []string) string {
	var b strings.Builder
	b.WriteString("apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [\"RequestReceived\"]\nrules:\n")
	if len(readsOf) > 0 {
		quoted := make([]string, len(readsOf))
		for i, u := range readsOf {
			quoted[i] = strconv.Quote(u)
		}
		b.WriteString("- level: Metadata\n  users: [" + strings.Join(quoted, ", ") + "]\n")
	}
	b.WriteString("- level: Metadata\n  verbs: [\"create\", \"update\", \"patch\", \"delete\", \"deletecollection\"]\n- level: None\n")
	return b.String()
}
