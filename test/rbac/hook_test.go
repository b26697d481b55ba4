package rbac

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// hookSidecar is the real vacate-hook beside a simulated pod: its
// evacuate command leaves a file behind, so a test sees whether a call
// made it run anything.
type hookSidecar struct {
	url    string // the protocol's URL
	ran    string // the file evacuate writes
	log    string
	podUID string
	node   string
}

// podCredentials writes what a pod has mounted for its service account (a
// token of sa in ns, for the API server) and returns the sidecar's auth
// settings that read the cluster's keys with it.
func podCredentials(t *testing.T, c *devcluster.Cluster, ns, sa, dir string) map[string]any {
	t.Helper()
	tok := requestToken(t, c, ns, sa, nil, 3600)
	path := filepath.Join(dir, "token")
	if err := os.WriteFile(path, []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	return map[string]any{"apiServer": c.Server, "caFile": filepath.Join(c.Dir, "pki", "ca.crt"), "tokenFile": path}
}

// requestToken is a token of service account ns/sa from the TokenRequest
// API (nil audiences: the API server's own).
func requestToken(t *testing.T, c *devcluster.Cluster, ns, sa string, audiences []string, seconds int64) string {
	t.Helper()
	res, err := c.Client.CoreV1().ServiceAccounts(ns).CreateToken(testenv.Context(t), sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: ptr.To(seconds)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token of %s/%s: %v", ns, sa, err)
	}
	return res.Status.Token
}

// ensureServiceAccount creates ns/name unless it exists (and ns).
func ensureServiceAccount(t *testing.T, c *devcluster.Cluster, ns, name string) {
	t.Helper()
	ctx := testenv.Context(t)
	_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	testutil.Eventually(t, patience, "service account "+ns+"/"+name, func() error {
		_, err := c.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}, metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
}

// startHookSidecar runs vacate-hook for pod as its recipe would: on the
// pod's IP, with the pod's UID and node from the downward API, reading the
// cluster's keys as the namespace's default service account (no grant).
// It listens on port, or on a free one when port is 0.
func startHookSidecar(t *testing.T, c *devcluster.Cluster, pod *corev1.Pod, port int) *hookSidecar {
	t.Helper()
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o755); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(pod.Status.PodIP, fmt.Sprint(port))
	if port == 0 {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		addr = l.Addr().String()
		l.Close()
	}
	h := &hookSidecar{url: "http://" + addr + "/evacuate", ran: filepath.Join(dir, "ran"), log: filepath.Join(dir, "sidecar.log"),
		podUID: string(pod.UID), node: pod.Spec.NodeName}
	cfg := map[string]any{
		"stateDir": state,
		"auth":     podCredentials(t, c, pod.Namespace, "default", dir),
		"maintenance": map[string]any{"evacuate": []any{
			map[string]any{"command": []string{"/bin/sh", "-c", `echo "$VACATE_DRAIN $VACATE_RUN" >> "$0"`, h.ran}},
		}},
	}
	data, _ := json.Marshal(cfg)
	config := filepath.Join(dir, "config.json")
	if err := os.WriteFile(config, data, 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(h.log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testutil.Program(t, "github.com/vacate-dev/vacate/cmd/vacate-hook"), "--config", config, "--listen", addr)
	cmd.Env = append(os.Environ(), "POD_UID="+string(pod.UID), "NODE_NAME="+pod.Spec.NodeName)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(h.log)
			t.Logf("vacate-hook's log:\n%s", b)
		}
	})
	testutil.Eventually(t, time.Minute, "vacate-hook to answer /healthz", func() error {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
	return h
}

// call makes one protocol request with a bearer token ("" for none).
func (h *hookSidecar) call(t *testing.T, method, token string, body map[string]string) (int, string, http.Header) {
	t.Helper()
	var rd io.Reader
	u := h.url + "?drain=" + body["drain"] + "&run=" + body["run"]
	if method == http.MethodPost {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(data)), resp.Header
}

// ranLines are the runs evacuate was started for.
func (h *hookSidecar) ranLines(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(h.ran)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

// forgedToken is a token with every claim the controller's has, signed by
// a key that is not the cluster's.
func forgedToken(t *testing.T, issuerOf string, audiences []string) string {
	t.Helper()
	var claims jwt.Claims
	tok, err := jwt.ParseSigned(issuerOf, []jose.SignatureAlgorithm{jose.RS256, jose.ES256})
	if err != nil {
		t.Fatal(err)
	}
	if err := tok.UnsafeClaimsWithoutVerification(&claims); err != nil {
		t.Fatal(err)
	}
	claims.Audience = audiences
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	kid := ""
	if len(tok.Headers) > 0 {
		kid = tok.Headers[0].KeyID // the cluster's key ID, on another key
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := jwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestHookAnswersOnlyTheController: vacate-hook, run as a recipe runs it,
// serves the protocol only to vacate-controller's service account, with a
// token addressed to this pod: nobody else starts, cancels or crowds out an
// evacuation (a Patroni switchover, a RabbitMQ shrink), whatever they send,
// and a drain must name the pod's own node. Each refusal runs nothing.
func TestHookAnswersOnlyTheController(t *testing.T) {
	c := testenv.Start(t)
	ctx := testenv.Context(t)
	ensureServiceAccount(t, c, namespace, "vacate-controller")
	node := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "hookauth", Count: 1})[0]
	ns := testenv.Namespace(t, c)
	for _, name := range []string{"db-0", "tenant"} {
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, devcluster.BarePod(ns, name, node), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := devcluster.WaitForPodsReady(ctx, c.Client, ns, labels.Everything(), 2, time.Minute); err != nil {
		t.Fatal(err)
	}
	pod, err := c.Client.CoreV1().Pods(ns).Get(ctx, "db-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.Client.CoreV1().Pods(ns).Get(ctx, "tenant", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := startHookSidecar(t, c, pod, 0)
	forPod := []string{"vacate.dev/hook", "vacate.dev/hook/" + string(pod.UID)}
	controller := requestToken(t, c, namespace, "vacate-controller", forPod, 600)
	start := func(drain, node string) map[string]string {
		return map[string]string{"drain": drain, "run": "run-" + drain, "node": node, "mode": "Decommission"}
	}

	t.Log("callers that are not vacate-controller, or not with a token for this pod, are refused, and nothing runs")
	for _, a := range []struct {
		what, token string
		code        int
		says        string
	}{
		{"no token (any pod on the network)", "", 401, "no Authorization header"},
		{"a tenant's service account, with a token for this pod", requestToken(t, c, ns, "default", forPod, 600), 403, "is not trusted to call this hook"},
		{"vacate-controller's token sent to another pod (replayed by that pod's app)",
			requestToken(t, c, namespace, "vacate-controller", []string{"vacate.dev/hook", "vacate.dev/hook/" + string(other.UID)}, 600), 401, "not addressed to this pod"},
		{"vacate-controller's token for the API server (a stolen service-account token)", requestToken(t, c, namespace, "vacate-controller", nil, 600), 401, "not addressed to this pod"},
		{"a forged token: the controller's claims, another key", forgedToken(t, controller, forPod), 401, "not signed by the cluster's service-account issuer"},
		{"a token that is not a JWT", "hello", 401, "not a signed JWT"},
	} {
		code, body, _ := h.call(t, http.MethodPost, a.token, start("d-forged", node))
		if code != a.code || !strings.Contains(body, a.says) {
			t.Errorf("POST with %s: HTTP %d %q, want %d saying %q", a.what, code, body, a.code, a.says)
		}
	}
	t.Log("sixteen unauthenticated drains do not fill the sidecar's slots")
	for i := range 17 {
		if code, body, _ := h.call(t, http.MethodPost, "", start(fmt.Sprint("crowd-", i), node)); code != http.StatusUnauthorized {
			t.Errorf("unauthenticated POST %d: HTTP %d %q, want 401", i, code, body)
		}
	}
	t.Log("vacate-controller's own token, for a drain of another node, is refused")
	if code, body, _ := h.call(t, http.MethodPost, controller, start("d-elsewhere", "another-node")); code != http.StatusForbidden || !strings.Contains(body, "drains only that node") {
		t.Errorf("POST naming another node: HTTP %d %q, want 403", code, body)
	}
	if lines := h.ranLines(t); len(lines) != 0 {
		t.Fatalf("evacuate ran for refused calls: %v", lines)
	}

	t.Log("vacate-controller's token for this pod, naming its node, starts the evacuation; the answer says the caller was verified")
	code, body, hdr := h.call(t, http.MethodPost, controller, start("d-real", node))
	if code != http.StatusAccepted {
		t.Fatalf("the controller's POST: HTTP %d %q, want 202", code, body)
	}
	if got := hdr.Get("Vacate-Caller-Verified"); got != serviceAccount {
		t.Errorf("answer header Vacate-Caller-Verified %q, want %q", got, serviceAccount)
	}
	testutil.Eventually(t, time.Minute, "evacuate to run for d-real", func() error {
		if lines := h.ranLines(t); len(lines) != 1 || lines[0] != "d-real run-d-real" {
			return fmt.Errorf("evacuate ran for %v", lines)
		}
		return nil
	})
	t.Log("nobody else cancels it")
	if code, body, _ := h.call(t, http.MethodDelete, "", start("d-real", node)); code != http.StatusUnauthorized {
		t.Errorf("unauthenticated DELETE: HTTP %d %q, want 401", code, body)
	}
	code, body, _ = h.call(t, http.MethodGet, controller, start("d-real", node))
	if code != http.StatusOK || strings.Contains(body, "cancel") {
		t.Errorf("GET after the refused DELETE: HTTP %d %q, want the drain still evacuating or done", code, body)
	}
}
