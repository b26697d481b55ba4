// Package hook speaks the HTTP evacuation protocol v1 (see DESIGN.md) with
// pods that move their own data: POST starts (idempotent for a drain), GET
// polls, DELETE cancels. It only ever calls the pod's own IP, at the port
// and path of its annotations. A Prober runs each pod's conversation in the
// background and keeps the latest answer for the controller's passes, which
// therefore never wait on the network.
//
// Nothing but a well-formed "Completed" for the current drain counts as
// done: timeouts, refused connections, HTTP errors, redirects, oversized or
// malformed bodies and unknown states are reported, retried with backoff,
// and never taken for success.
package hook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vacate-dev/vacate/internal/backoff"
	"github.com/vacate-dev/vacate/pkg/hookauth"
)

// Pod annotations of the protocol.
const (
	AnnotationPort = "vacate.dev/evacuate-port"
	AnnotationPath = "vacate.dev/evacuate-path"
	// DefaultPath is used when the pod gives a port but no path.
	DefaultPath = "/evacuate"
)

// States an app reports.
const (
	InProgress = "InProgress"
	Completed  = "Completed"
	Failed     = "Failed"
)

// MaxBody bounds what is read of an answer.
const MaxBody = 64 << 10

// Run is one run of a drain, as the protocol names it: the drain's UID
// and, beside it, the run's own identity (NodeDrain status.runID), which a
// new run of the same drain replaces.
type Run struct {
	Drain string // the NodeDrain's UID
	ID    string // status.runID; "" before the drain recorded one
	Node  string
	Mode  string
}

// Target is one pod's hook, for one run of a drain.
type Target struct {
	Pod  types.UID
	Key  types.NamespacedName
	Name string // namespace/name, for messages
	IP   string
	Port int
	Path string
	Run
}

// Wants reports whether the pod asks for the protocol (has the port annotation).
func Wants(pod *corev1.Pod) bool {
	_, ok := pod.Annotations[AnnotationPort]
	return ok
}

// TargetFor reads a pod's annotations into a target. Bad annotations are an
// error that says what is wrong; an address the controller never calls
// (CheckPod) is a RefusedError. Either way the pod is then held, not
// evicted.
func TargetFor(pod *corev1.Pod, run Run, allowLoopback bool) (Target, error) {
	t := Target{Pod: pod.UID, Key: types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}, Name: pod.Namespace + "/" + pod.Name,
		IP: pod.Status.PodIP, Run: run, Path: DefaultPath}
	port, err := strconv.Atoi(pod.Annotations[AnnotationPort])
	if err != nil || port < 1 || port > 65535 {
		return t, fmt.Errorf("annotation %s=%q is not a port number (1-65535)", AnnotationPort, Summary(pod.Annotations[AnnotationPort]))
	}
	t.Port = port
	if p, ok := pod.Annotations[AnnotationPath]; ok {
		u, err := url.Parse(p)
		if err != nil || !strings.HasPrefix(p, "/") || u.Host != "" || u.RawQuery != "" || u.Fragment != "" || strings.Contains(p, "..") {
			return t, fmt.Errorf("annotation %s=%q is not an absolute path such as /evacuate (no host, query or fragment)", AnnotationPath, Summary(p))
		}
		t.Path = p
	}
	if pod.Spec.HostNetwork {
		return t, CheckPod(pod, t.IP, allowLoopback) // refused, IP or not
	}
	if net.ParseIP(t.IP) == nil {
		return t, fmt.Errorf("pod %s has no IP yet", t.Name)
	}
	return t, CheckPod(pod, t.IP, allowLoopback)
}

// URL is where the hook is called: the pod's own IP, never a host from an annotation.
func (t Target) URL() string {
	u := url.URL{Scheme: "http", Host: net.JoinHostPort(t.IP, strconv.Itoa(t.Port)), Path: t.Path}
	return u.String()
}

// Result is the latest the prober knows of a hook.
type Result struct {
	// State is the app's last well-formed answer (InProgress, Completed,
	// Failed), or "" before any.
	State     string
	Message   string
	Remaining int64
	// Problem says why the last call did not give a usable answer; "" when it did.
	Problem string
	// Calls counts the calls made.
	Calls int
	// Verified is the caller the hook said it verified (the answer's header
	// Vacate-Caller-Verified, see pkg/hookauth), "" when its last answer did
	// not say so: a hook that ignores the caller's token.
	Verified string
}

// Done reports whether the hook is Completed, with no problem since.
func (r Result) Done() bool { return r.State == Completed && r.Problem == "" }

// Describe is the result for people.
func (r Result) Describe() string {
	var b strings.Builder
	switch {
	case r.State == "" && r.Problem == "":
		b.WriteString("calling the hook")
	case r.State != "":
		fmt.Fprintf(&b, "%s: %s", r.State, r.Message)
		if r.Remaining > 0 {
			fmt.Fprintf(&b, " (%d remaining)", r.Remaining)
		}
	}
	if r.Problem != "" {
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		b.WriteString("last call: " + r.Problem + " (not counted as done; retrying)")
	}
	return b.String()
}

// Prober runs the hooks' conversations in the background.
type Prober struct {
	Client *http.Client
	// Poll is the time between GETs while a hook is in progress; Backoff
	// the first pause after a failed call, doubling up to MaxBackoff, each
	// with up to 20% jitter.
	Poll, Backoff, MaxBackoff time.Duration
	// Changed is called (with the target's node) when a result changes.
	Changed func(node string)
	// Tokens, when set, gives every call its bearer token (the caller's
	// proof of identity, pkg/hookauth). A call whose token cannot be had is
	// not made; it is a problem of the conversation, retried with backoff.
	Tokens Tokens
	// Check, when set, is asked just before every call whether the target
	// is still its pod's (the pod is there, with the same UID, and the IP is
	// still one of its addresses). An error ends the conversation without
	// the call; the controller's next pass starts a new one if the pod is
	// still to be called.
	Check func(Target) error
	// Observe, when set, is told of every call the prober made or could
	// not make for want of a token (the controller's metrics); not of
	// calls cut short because their conversation was stopped.
	Observe func(Call)

	mu    sync.Mutex
	convs map[types.UID]*conversation
	// base is the context conversations run under (Run's); ended stops new ones.
	base  context.Context
	ended bool
}

// NewProber returns a prober with a client that times out, follows no
// redirects and uses no proxy.
func NewProber(changed func(node string)) *Prober {
	return &Prober{
		Client: &http.Client{
			Timeout:       5 * time.Second,
			Transport:     &http.Transport{Proxy: nil, DisableKeepAlives: true},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		Poll: time.Second, Backoff: time.Second, MaxBackoff: 30 * time.Second,
		Changed: changed, convs: map[types.UID]*conversation{},
	}
}

type conversation struct {
	target Target
	cancel bool // DELETE instead of POST/GET
	stop   context.CancelFunc
	mu     sync.Mutex
	result Result
	done   bool // the conversation ended (Completed, or cancel acknowledged)
	// reached: a POST may have reached the app (anything but a failure to
	// connect), so a cancel must send DELETE.
	reached bool
}

func (c *conversation) get() (Result, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.result, c.done
}

// Evacuate starts (once) the hook's evacuation and returns what is known.
func (p *Prober) Evacuate(t Target) Result {
	r, _ := p.run(t, false)
	return r
}

// Done reports whether the hook's evacuation for exactly this target is
// Completed, without starting a conversation: the last check before an
// eviction.
func (p *Prober) Done(t Target) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.convs[t.Pod]
	if !ok || c.target != t || c.cancel {
		return false
	}
	r, _ := c.get()
	return r.Done()
}

// Cancel asks the hook to undo (DELETE) and reports whether it acknowledged.
func (p *Prober) Cancel(t Target) (Result, bool) { return p.run(t, true) }

// NeverReached reports whether this process knows that no POST of this
// run can have reached the pod's hook: its evacuation conversation for
// exactly this target never got past connecting. Without that knowledge
// (after a restart, say) a cancel sends DELETE.
func (p *Prober) NeverReached(t Target) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.convs[t.Pod]
	if !ok || c.target != t || c.cancel {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.reached
}

// Forget stops and drops a pod's conversation.
func (p *Prober) Forget(pod types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.convs[pod]; ok {
		c.stop()
		delete(p.convs, pod)
	}
}

// Retain stops and drops the conversations of a node's pods that are not
// in keep (pods that left, or whose hooks are no longer called).
func (p *Prober) Retain(node string, keep map[types.UID]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for pod, c := range p.convs {
		if c.target.Node == node && !keep[pod] {
			c.stop()
			delete(p.convs, pod)
		}
	}
}

// Len is how many conversations the prober holds.
func (p *Prober) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.convs)
}

// drop removes c if it is still its pod's conversation.
func (p *Prober) drop(c *conversation) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.convs[c.target.Pod] == c {
		c.stop()
		delete(p.convs, c.target.Pod)
	}
}

// ForgetNode stops and drops the conversations of a node's pods.
func (p *Prober) ForgetNode(node string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for pod, c := range p.convs {
		if c.target.Node == node {
			c.stop()
			delete(p.convs, pod)
		}
	}
}

func (p *Prober) run(t Target, cancel bool) (Result, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return Result{Problem: errStopped.Error()}, false
	}
	c, ok := p.convs[t.Pod]
	if ok && c.target == t && c.cancel == cancel {
		return c.get()
	}
	if ok {
		c.stop()
	}
	base := p.base
	if base == nil {
		base = context.Background()
	}
	ctx, stop := context.WithCancel(base)
	c = &conversation{target: t, cancel: cancel, stop: stop}
	p.convs[t.Pod] = c
	go p.converse(ctx, c)
	return c.get()
}

// errStopped answers the calls made after Run returned.
var errStopped = errors.New("the hook prober stopped (this replica no longer leads)")

// Run ties the prober to ctx, the leader's context: conversations run under
// it, and when it ends (leadership lost, or shutdown) every conversation
// stops and none starts again. It blocks until ctx ends; run it as a
// leader-election runnable.
func (p *Prober) Run(ctx context.Context) error {
	p.mu.Lock()
	p.base = ctx
	p.mu.Unlock()
	<-ctx.Done()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended = true
	for pod, c := range p.convs {
		c.stop()
		delete(p.convs, pod)
	}
	return nil
}

// pauses are the waits after failed calls: from Backoff, doubling up to
// MaxBackoff, each up to a fifth longer so that the hooks of many pods that
// fail together are not called again together (internal/backoff, which
// the agent's metadata sources share).
func (p *Prober) pauses() *wait.Backoff { return backoff.New(p.Backoff, p.MaxBackoff) }

// converse calls the hook until the conversation ends or is stopped.
func (p *Prober) converse(ctx context.Context, c *conversation) {
	t := c.target
	started := false
	pauses := p.pauses()
	for ctx.Err() == nil {
		if p.Check != nil {
			if err := p.Check(t); err != nil {
				p.stopped(c, err)
				return
			}
		}
		var res Result
		var err error
		res.Verified = "-" // unknown until an answer says
		end := false
		switch {
		case c.cancel:
			err = p.observed(ctx, http.MethodDelete, t, nil, nil)
			end = err == nil
		case !started:
			body, _ := json.Marshal(map[string]string{"drain": t.Drain, "run": t.ID, "node": t.Node, "mode": t.Mode})
			err = p.observed(ctx, http.MethodPost, t, body, &res)
			started = err == nil
			if !isDialError(err) && !isTokenError(err) {
				c.mu.Lock()
				c.reached = true
				c.mu.Unlock()
			}
		default:
			err = p.observed(ctx, http.MethodGet, t, nil, &res)
			var nf notFound
			if errors.As(err, &nf) {
				started = false // the app lost the drain (restarted): start it again
			}
		}
		if ctx.Err() != nil {
			return
		}
		c.mu.Lock()
		before := c.result
		c.result.Calls++
		if err != nil {
			c.result.Problem = Summary(err.Error())
		} else {
			c.result.Problem = ""
			if res.Verified != "-" {
				c.result.Verified = res.Verified
			}
			if res.State != "" {
				c.result.State, c.result.Message, c.result.Remaining = res.State, Summary(res.Message), res.Remaining
			}
		}
		if end || (!c.cancel && c.result.Done()) {
			c.done = true
		}
		changed := before.State != c.result.State || before.Problem != c.result.Problem || before.Verified != c.result.Verified ||
			before.Remaining != c.result.Remaining || before.Message != c.result.Message || c.done
		done := c.done
		c.mu.Unlock()
		if changed && p.Changed != nil {
			p.Changed(t.Node)
		}
		if done {
			return
		}
		next := p.Poll
		if err != nil {
			next = pauses.Step()
		} else {
			pauses = p.pauses()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
	}
}

// stopped ends a conversation whose target is no longer its pod's: the
// result says why, and the conversation is dropped.
func (p *Prober) stopped(c *conversation, why error) {
	c.mu.Lock()
	c.result.Problem = Summary("not called: " + why.Error())
	c.mu.Unlock()
	p.drop(c)
	if p.Changed != nil {
		p.Changed(c.target.Node)
	}
}

// tokenError is a call not made for want of its bearer token.
type tokenError struct{ error }

func (e tokenError) Unwrap() error { return e.error }

func isTokenError(err error) bool {
	var te tokenError
	return errors.As(err, &te)
}

// isDialError reports whether err is a failure to connect: the request
// never reached the app.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

type notFound struct{ error }

// call makes one request and reads a status answer into res (when res is
// not nil and the answer has a body).
func (p *Prober) call(ctx context.Context, method string, t Target, body []byte, res *Result) error {
	q := url.Values{"drain": {t.Drain}}
	if t.ID != "" {
		q.Set("run", t.ID)
	}
	u := t.URL() + "?" + q.Encode()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return failed(ResultUnreachable, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if p.Tokens != nil {
		tok, err := p.Tokens.Token(ctx, t.Pod)
		if err != nil {
			return tokenError{fmt.Errorf("%s %s not made: %w", method, t.URL(), err)}
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := p.Client.Do(req)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return failed(ResultTimeout, fmt.Errorf("%s %s timed out after %s", method, t.URL(), p.Client.Timeout))
		}
		return failed(ResultUnreachable, fmt.Errorf("%s %s: %w", method, t.URL(), unwrapURL(err)))
	}
	defer resp.Body.Close()
	if res != nil {
		res.Verified = Summary(resp.Header.Get(hookauth.VerifiedHeader))
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody+1))
	if err != nil {
		return failed(ResultUnreachable, fmt.Errorf("%s %s: reading the answer: %v", method, t.URL(), err))
	}
	if len(data) > MaxBody {
		return failed(ResultBadAnswer, fmt.Errorf("%s %s: answer larger than %d bytes", method, t.URL(), MaxBody))
	}
	switch {
	case method == http.MethodDelete && (resp.StatusCode == http.StatusNotFound || resp.StatusCode/100 == 2):
		return nil // cancelled, or nothing to cancel
	case resp.StatusCode == http.StatusNotFound && method == http.MethodGet:
		return notFound{fmt.Errorf("GET %s: HTTP 404: the app does not know drain %s", t.URL(), t.Drain)}
	case resp.StatusCode/100 != 2:
		return failed(ResultHTTPError, fmt.Errorf("%s %s: HTTP %d: %s", method, t.URL(), resp.StatusCode, snippet(data)))
	case res == nil || len(bytes.TrimSpace(data)) == 0:
		if method == http.MethodGet {
			return failed(ResultBadAnswer, fmt.Errorf("GET %s: HTTP %d with an empty body; want a JSON status", t.URL(), resp.StatusCode))
		}
		return nil
	}
	var ans struct {
		State     string `json:"state"`
		Message   string `json:"message"`
		Remaining *int64 `json:"remaining"`
		// Drain and Run, when the app echoes them, must name this run.
		Drain *string `json:"drain"`
		Run   *string `json:"run"`
	}
	if err := json.Unmarshal(data, &ans); err != nil {
		return failed(ResultBadAnswer, fmt.Errorf("%s %s: malformed answer (%v): %s", method, t.URL(), err, snippet(data)))
	}
	if err := sameRun(t, ans.Drain, ans.Run); err != nil {
		return failed(ResultBadAnswer, fmt.Errorf("%s %s: %w", method, t.URL(), err))
	}
	switch ans.State {
	case InProgress, Completed, Failed:
	default:
		return failed(ResultBadAnswer, fmt.Errorf("%s %s: unknown state %q (want InProgress, Completed or Failed)", method, t.URL(), Summary(ans.State)))
	}
	res.State, res.Message = ans.State, ans.Message
	if ans.Remaining != nil {
		res.Remaining = *ans.Remaining
	}
	if ans.State == Completed && res.Remaining > 0 {
		return failed(ResultBadAnswer, fmt.Errorf("%s %s: says Completed with %d remaining", method, t.URL(), res.Remaining))
	}
	return nil
}

// sameRun checks the drain and run an answer names, if it names them: an
// answer about another run is never this run's (v1 apps name neither).
func sameRun(t Target, drain, run *string) error {
	if drain != nil && *drain != t.Drain {
		return fmt.Errorf("the answer is about drain %q, not %s", Summary(*drain), t.Drain)
	}
	if run != nil && t.ID != "" && *run != t.ID {
		return fmt.Errorf("the answer is about run %q of the drain, not the current run %s", Summary(*run), t.ID)
	}
	return nil
}

func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// snippet is the start of a body, as a short printable summary, quoted.
func snippet(b []byte) string {
	const n = 120
	if len(b) > 4*n {
		b = b[:4*n]
	}
	return strconv.Quote(Summary(string(b)))
}
