package devcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	_ "embed"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// nodeLeaseSeconds is how long a kwok node's lease lasts; kwok renews it well
// before, so the node lifecycle controller keeps the nodes Ready.
const nodeLeaseSeconds = 40

// serviceCIDR only numbers Services; nothing is ever sent to these addresses.
const serviceCIDR = "10.96.0.0/16"

// component is a process with the port it serves and how to tell it is healthy.
type component struct {
	proc   *process
	port   int
	health healthCheck
}

type healthCheck struct {
	url    string
	client *http.Client
	ok     func(body string) bool
}

// plan writes the certificates and kubeconfigs and returns the components
// in groups: each group starts once the previous one is healthy.
func (c *Cluster) plan(bins Binaries, opts Options) ([][]*component, error) {
	pki := filepath.Join(c.Dir, "pki")
	ca, err := newCA("vacate-dev-ca")
	if err != nil {
		return nil, err
	}
	caCert, caKey, err := ca.write(pki, "ca")
	if err != nil {
		return nil, err
	}
	serving, err := ca.newServingCert("vacate-dev-server",
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		[]net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(10, 96, 0, 1)})
	if err != nil {
		return nil, err
	}
	servingCert, servingKey, err := serving.write(pki, "serving")
	if err != nil {
		return nil, err
	}
	saPub, saKey, err := writeServiceAccountKeys(pki)
	if err != nil {
		return nil, err
	}

	ports := map[string]int{}
	for _, name := range []string{Etcd, Etcd + "-peer", KubeAPIServer, KubeControllerManager, KubeScheduler, Kwok} {
		if p, ok := opts.Ports[name]; ok {
			ports[name] = p
			continue
		}
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[name] = p
	}
	server := "https://127.0.0.1:" + strconv.Itoa(ports[KubeAPIServer])
	c.Server = server

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
		path := filepath.Join(c.Dir, u.file+".kubeconfig")
		if u.file == "kubeconfig" {
			path = filepath.Join(c.Dir, "kubeconfig")
		}
		if err := writeKubeconfig(path, "vacate-"+c.Name, server, ca, cert); err != nil {
			return nil, err
		}
		kubeconfigs[u.file] = path
	}
	c.Kubeconfig = kubeconfigs["kubeconfig"]
	admin, err := ca.newClientCert("vacate-health", "system:masters")
	if err != nil {
		return nil, err
	}
	tlsClient := httpsClient(ca, admin)
	plain := &http.Client{Timeout: 2 * time.Second}
	auditPolicy := filepath.Join(c.Dir, "audit-policy.yaml")
	if err := os.WriteFile(auditPolicy, []byte(auditPolicyYAML(opts.AuditReadsOf)), 0o644); err != nil {
		return nil, fmt.Errorf("writing audit policy: %w", err)
	}
	c.AuditLog = filepath.Join(c.Dir, "logs", "audit.log")
	kwokConfig := filepath.Join(c.Dir, "kwok.yaml")
	// An explicit, empty configuration: kwok's built-in stages, and never the
	// user's own ~/.kwok/kwok.yaml.
	if err := os.WriteFile(kwokConfig, []byte(kwokConfigYAML(opts.KwokParallelism)), 0o644); err != nil {
		return nil, fmt.Errorf("writing kwok configuration: %w", err)
	}
	loop := func(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }
	etcdURL := "http://" + loop(ports[Etcd])
	peerURL := "http://" + loop(ports[Etcd+"-peer"])
	mk := func(name string, args []string, hc healthCheck) *component {
		return &component{
			proc:   &process{name: name, bin: bins[name], args: append(args, opts.ExtraArgs[name]...), logPath: filepath.Join(c.Dir, "logs", name+".log")},
			port:   ports[name],
			health: hc,
		}
	}
	ok200 := func(string) bool { return true }
	secure := func(name string) []string {
		return []string{
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(ports[name]),
			"--tls-cert-file=" + servingCert,
			"--tls-private-key-file=" + servingKey,
			"--client-ca-file=" + caCert,
			"--kubeconfig=" + kubeconfigs[name],
			"--authentication-kubeconfig=" + kubeconfigs[name],
			"--authorization-kubeconfig=" + kubeconfigs[name],
			"--leader-elect=false",
		}
	}

	etcd := mk(Etcd, []string{
		"--name=vacate",
		"--data-dir=" + filepath.Join(c.Dir, "data", "etcd"),
		"--listen-client-urls=" + etcdURL,
		"--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=vacate=" + peerURL,
		"--unsafe-no-fsync=true", // a throwaway cluster: speed over durability
		"--quota-backend-bytes=4294967296",
		"--log-level=warn",
	}, healthCheck{url: etcdURL + "/health", client: plain, ok: func(b string) bool { return strings.Contains(b, `"health":"true"`) }})

	apiserver := mk(KubeAPIServer, []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(ports[KubeAPIServer]),
		"--tls-cert-file=" + servingCert,
		"--tls-private-key-file=" + servingKey,
		"--client-ca-file=" + caCert,
		"--service-account-key-file=" + saPub,
		"--service-account-signing-key-file=" + saKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--authorization-mode=RBAC",
		"--service-cluster-ip-range=" + serviceCIDR,
		// The API server's own endpoint is a loopback address, which
		// EndpointSlice validation rejects; nothing in the cluster calls it.
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		"--profiling=false",
		"--audit-policy-file=" + auditPolicy,
		"--audit-log-path=" + c.AuditLog,
		"--audit-log-format=json",
		"--audit-log-maxsize=200",
		"--audit-log-maxbackup=1",
	}, healthCheck{url: server + "/readyz", client: tlsClient, ok: ok200})

	kcm := mk(KubeControllerManager, append(secure(KubeControllerManager),
		"--controllers=*",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+saKey,
		"--root-ca-file="+caCert,
		"--cluster-signing-cert-file="+caCert,
		"--cluster-signing-key-file="+caKey,
	), healthCheck{url: "https://" + loop(ports[KubeControllerManager]) + "/healthz", client: tlsClient, ok: ok200})

	scheduler := mk(KubeScheduler, secure(KubeScheduler),
		healthCheck{url: "https://" + loop(ports[KubeScheduler]) + "/healthz", client: tlsClient, ok: ok200})

	kwok := mk(Kwok, []string{
		"--kubeconfig=" + kubeconfigs[Kwok],
		"--config=" + kwokConfig,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + KwokNodeAnnotation + "=fake",
		"--cidr=" + c.PodCIDR,
		"--node-ip=127.0.0.1",
		"--node-lease-duration-seconds=" + strconv.Itoa(nodeLeaseSeconds),
		"--server-address=" + loop(ports[Kwok]),
	}, healthCheck{url: "http://" + loop(ports[Kwok]) + "/healthz", client: plain, ok: ok200})

	return [][]*component{{etcd}, {apiserver}, {kcm, scheduler, kwok}}, nil
}

// kwokStages are kwok's pod stages, its own but for readiness gates, which
// they honour as the kubelet does (see the file).
//
//go:embed kwok-stages.yaml
var kwokStages string

// kwokConfigYAML is kwok's configuration: its built-in node stages, the pod
// stages of kwokStages, with parallelism pod stages, node stages and node
// lease renewals at once when it is set (kwok's default is 4 of each).
func kwokConfigYAML(parallelism int) string {
	options := " {}"
	if parallelism > 0 {
		n := strconv.Itoa(parallelism)
		options = "\n  podPlayStageParallelism: " + n + "\n  nodePlayStageParallelism: " + n + "\n  nodeLeaseParallelism: " + n
	}
	return "apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokConfiguration\noptions:" + options + "\n---\n" + kwokStages
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

// waitHealthy polls the component's health endpoint until it answers 200,
// the process exits, or the timeout passes.
func (comp *component) waitHealthy(ctx context.Context, timeout time.Duration) error {
	fail := func(err error) error {
		return &ComponentError{Component: comp.proc.name, LogPath: comp.proc.logPath, LogTail: comp.proc.logTail(), Err: err}
	}
	deadline := time.Now().Add(timeout)
	last := "no answer yet"
	for {
		if done, err := comp.proc.exited(); done {
			return fail(fmt.Errorf("process exited before it was healthy: %v", err))
		}
		ok, detail := comp.health.check(ctx)
		if ok {
			return nil
		}
		last = detail
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("not healthy after %s (%s): %s", timeout, comp.health.url, last))
		}
		select {
		case <-ctx.Done():
			return fail(fmt.Errorf("interrupted while waiting for health: %w", ctx.Err()))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (h healthCheck) check(ctx context.Context) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.url, nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK || !h.ok(string(body)) {
		return false, fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return true, ""
}

func httpsClient(ca, client *keyPair) *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	return &http.Client{
		Timeout: 2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs:      pool,
			Certificates: []tls.Certificate{{Certificate: [][]byte{client.cert.Raw}, PrivateKey: client.key}},
			MinVersion:   tls.VersionTLS12,
		}},
	}
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitSettled waits for what the first workloads need beyond healthy
// components: the default namespace's ServiceAccount.
func (c *Cluster) waitSettled(ctx context.Context, timeout time.Duration) error {
	return WaitForServiceAccount(ctx, c.Client, metav1.NamespaceDefault, timeout)
}

// WaitForServiceAccount waits until the controller manager has created the
// "default" ServiceAccount in ns; pods cannot be created before it.
func WaitForServiceAccount(ctx context.Context, cs kubernetes.Interface, ns string, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return fmt.Errorf("waiting for the default ServiceAccount in namespace %s: %w", ns, err)
	}
	return nil
}
