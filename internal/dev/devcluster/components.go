package devcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// This file holds the components of the control plane: their command lines,
// built from the layout plan.go wrote, and how to tell each is healthy.

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

// healthCheck is an endpoint to ask, the client to ask it with, and what a
// healthy body says.
type healthCheck struct {
	url    string
	client *http.Client
	ok     func(body string) bool
}

// component is the named component's process, with its binary, its
// arguments followed by the extra ones the options give it, and its log.
func (l *layout) component(name string, args []string, hc healthCheck) *component {
	return &component{
		proc:   &process{name: name, bin: l.bins[name], args: append(args, l.extraArgs[name]...), logPath: filepath.Join(l.dir, "logs", name+".log")},
		port:   l.ports[name],
		health: hc,
	}
}

// loop is the loopback address of the named component's port.
func (l *layout) loop(name string) string { return "127.0.0.1:" + strconv.Itoa(l.ports[name]) }

// ok200 accepts any body: the status code alone says healthy.
func ok200(string) bool { return true }

// secure are the flags the controller manager and the scheduler share: they
// serve HTTPS with the serving certificate and call the API server with
// their own kubeconfig.
func (l *layout) secure(name string) []string {
	return []string{
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(l.ports[name]),
		"--tls-cert-file=" + l.servingCert,
		"--tls-private-key-file=" + l.servingKey,
		"--client-ca-file=" + l.caCert,
		"--kubeconfig=" + l.kubeconfigs[name],
		"--authentication-kubeconfig=" + l.kubeconfigs[name],
		"--authorization-kubeconfig=" + l.kubeconfigs[name],
		"--leader-elect=false",
	}
}

// etcd is a single-member etcd on loopback.
func (l *layout) etcd() *component {
	etcdURL := "http://" + l.loop(Etcd)
	peerURL := "http://" + l.loop(Etcd+"-peer")
	return l.component(Etcd, []string{
		"--name=vacate",
		"--data-dir=" + filepath.Join(l.dir, "data", "etcd"),
		"--listen-client-urls=" + etcdURL,
		"--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=vacate=" + peerURL,
		"--unsafe-no-fsync=true", // a throwaway cluster: speed over durability
		"--quota-backend-bytes=4294967296",
		"--log-level=warn",
	}, healthCheck{url: etcdURL + "/health", client: l.plain, ok: func(b string) bool { return strings.Contains(b, `"health":"true"`) }})
}

// apiserver is the API server, with RBAC and the audit log the tests read.
func (l *layout) apiserver() *component {
	args := []string{
		"--etcd-servers=http://" + l.loop(Etcd),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(l.ports[KubeAPIServer]),
		"--tls-cert-file=" + l.servingCert,
		"--tls-private-key-file=" + l.servingKey,
		"--client-ca-file=" + l.caCert,
		"--service-account-key-file=" + l.saPub,
		"--service-account-signing-key-file=" + l.saKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--authorization-mode=RBAC",
		"--service-cluster-ip-range=" + serviceCIDR,
		// The API server's own endpoint is a loopback address, which
		// EndpointSlice validation rejects; nothing in the cluster calls it.
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		"--profiling=false",
		"--audit-policy-file=" + l.auditPolicy,
		"--audit-log-path=" + l.auditLog,
		"--audit-log-format=json",
		"--audit-log-maxsize=200",
		"--audit-log-maxbackup=1",
	}
	if l.evictionRequestAPI {
		args = append(args, "--feature-gates="+EvictionRequestFeatureGate+"=true", "--runtime-config="+EvictionRequestGroupVersion+"=true")
	}
	return l.component(KubeAPIServer, args, healthCheck{url: l.server + "/readyz", client: l.tlsClient, ok: ok200})
}

// The EvictionRequest API of Kubernetes 1.37 (KEP-4563), alpha: its feature
// gate and group version, both off by default.
const (
	EvictionRequestFeatureGate  = "EvictionRequestAPI"
	EvictionRequestGroupVersion = "lifecycle.k8s.io/v1alpha1"
)

// controllerManager runs every controller, each with its own
// ServiceAccount, and signs certificates with the cluster's authority.
func (l *layout) controllerManager() *component {
	return l.component(KubeControllerManager, append(l.secure(KubeControllerManager),
		"--controllers=*",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+l.saKey,
		"--root-ca-file="+l.caCert,
		"--cluster-signing-cert-file="+l.caCert,
		"--cluster-signing-key-file="+l.caKey,
	), healthCheck{url: "https://" + l.loop(KubeControllerManager) + "/healthz", client: l.tlsClient, ok: ok200})
}

// scheduler is the scheduler with the shared secure flags only.
func (l *layout) scheduler() *component {
	return l.component(KubeScheduler, l.secure(KubeScheduler),
		healthCheck{url: "https://" + l.loop(KubeScheduler) + "/healthz", client: l.tlsClient, ok: ok200})
}

// kwok plays the kubelet for the nodes annotated as kwok's, giving their
// pods IPs from the cluster's pod range.
func (l *layout) kwok() *component {
	return l.component(Kwok, []string{
		"--kubeconfig=" + l.kubeconfigs[Kwok],
		"--config=" + l.kwokConfig,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + KwokNodeAnnotation + "=fake",
		"--cidr=" + l.podCIDR,
		"--node-ip=127.0.0.1",
		"--node-lease-duration-seconds=" + strconv.Itoa(nodeLeaseSeconds),
		"--server-address=" + l.loop(Kwok),
	}, healthCheck{url: "http://" + l.loop(Kwok) + "/healthz", client: l.plain, ok: ok200})
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
