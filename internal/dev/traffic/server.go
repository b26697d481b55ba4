package traffic

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

// envServer turns a re-executed binary into a pod's server, which then
// reads its assignment from stdin: one line "addr pod preStop".
const envServer = "VACATE_TRAFFIC_SERVER"

// MaybeServe turns this process into a pod's server when a Kubelet started
// it, and otherwise returns at once. Call it first thing in main or
// TestMain of every binary that starts a Kubelet: the server is that binary
// re-executed inside the Network, a real process whose listener really
// closes, so nothing else has to be built or installed.
//
// The server answers every request with 200 and the pod's name. On SIGTERM
// it keeps serving for its preStop sleep, if it has one, then closes its
// listener at once, finishes the requests in flight and exits 0; with no
// preStop sleep it closes the listener as soon as SIGTERM arrives, the
// worst case an application can have.
//
// The process learns its address only after it has started (on stdin), so
// that a Kubelet can start it ahead of time: a binary built with -race takes
// about half a second to start, as long as a load balancer's lag, and a
// server that starts late fails requests no drain caused.
func MaybeServe() {
	if os.Getenv(envServer) == "" {
		return
	}
	if err := serve(os.Stdin); err != nil {
		fmt.Fprintf(os.Stderr, "traffic server: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// serve waits for its assignment, then serves until SIGTERM and its preStop
// sleep are over. A SIGTERM or the end of stdin before the assignment ends
// it quietly: a spare that was never used.
func serve(stdin io.Reader) error {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	assigned := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdin).ReadString('\n')
		assigned <- line
	}()
	var line string
	select {
	case line = <-assigned:
	case <-term:
		return nil
	}
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return nil
	}
	if len(fields) != 3 {
		return fmt.Errorf("assignment %q: want \"addr pod preStop\"", line)
	}
	addr, pod := fields[0], fields[1]
	preStop, err := time.ParseDuration(fields[2])
	if err != nil {
		return fmt.Errorf("assignment %q: %w", line, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, pod)
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-term:
	}
	time.Sleep(preStop)
	// The kubelet kills the process when the grace period ends; no bound here.
	if err := srv.Shutdown(context.Background()); err != nil {
		return fmt.Errorf("shutting down %s: %w", addr, err)
	}
	return nil
}

// Server is one pod's server process, running inside a Network.
type Server struct {
	addr  netip.AddrPort
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *tailBuffer
	done  chan struct{} // closed once the process has exited
	err   error         // how it exited; read after done
}

// listenTimeout bounds how long a new server may take to accept
// connections, its start included on a busy machine.
const listenTimeout = 20 * time.Second

// StartServer runs the server of pod on addr inside the Network, with the
// given preStop sleep, and returns once it accepts connections, so that a
// caller never counts a server as running that would refuse a request.
// Stop it with Terminate or Kill.
func (n *Network) StartServer(ctx context.Context, pod string, addr netip.AddrPort, preStop time.Duration) (*Server, error) {
	s, err := n.spawn()
	if err != nil {
		return nil, fmt.Errorf("starting the server of %s: %w", pod, err)
	}
	if err := s.assign(ctx, n, pod, addr, preStop); err != nil {
		s.Kill()
		return nil, err
	}
	return s, nil
}

// spawn starts a server process in the namespace that waits for its
// assignment.
func (n *Network) spawn() (*Server, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	s := &Server{out: &tailBuffer{}, done: make(chan struct{})}
	// ip netns exec enters the namespace and then execs exe in the same
	// process, so the signals sent to cmd reach the server itself.
	s.cmd = exec.Command("ip", "netns", "exec", n.name, exe)
	s.cmd.Env = serverEnv(os.Environ())
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	s.cmd.SysProcAttr = serverProcAttr()
	if s.stdin, err = s.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	return s, nil
}

// assign tells a spawned server what to serve and waits until it listens.
func (s *Server) assign(ctx context.Context, n *Network, pod string, addr netip.AddrPort, preStop time.Duration) error {
	if !n.Contains(addr.Addr()) {
		return fmt.Errorf("starting the server of %s: %s is not a pod address of network %s (%s)", pod, addr.Addr(), n.name, n.prefix)
	}
	if strings.ContainsAny(pod, " \t\n") || pod == "" {
		return fmt.Errorf("starting the server of %q: not a pod name", pod)
	}
	s.addr = addr
	if _, err := fmt.Fprintf(s.stdin, "%s %s %s\n", addr, pod, preStop); err != nil {
		return fmt.Errorf("starting the server of %s: %w: %s", pod, err, s.Output())
	}
	if err := s.waitListening(ctx); err != nil {
		return fmt.Errorf("starting the server of %s on %s: %w", pod, addr, err)
	}
	return nil
}

// serverEnv is env for a server: marked as one, and, when built with
// -race, without the race detector's second of sleep at exit, which would
// keep a terminated pod a second longer than its server needs.
func serverEnv(env []string) []string {
	out := make([]string, 0, len(env)+2)
	gorace := "atexit_sleep_ms=0"
	for _, kv := range env {
		switch {
		case strings.HasPrefix(kv, envServer+"="):
		case strings.HasPrefix(kv, "GORACE="):
			gorace = strings.TrimPrefix(kv, "GORACE=") + " " + gorace
		default:
			out = append(out, kv)
		}
	}
	return append(out, envServer+"=1", "GORACE="+gorace)
}

// waitListening polls the server's port as a readiness probe would.
func (s *Server) waitListening(ctx context.Context) error {
	deadline := time.Now().Add(listenTimeout)
	for {
		c, err := (&net.Dialer{Timeout: 200 * time.Millisecond}).DialContext(ctx, "tcp", s.addr.String())
		if err == nil {
			_ = c.Close()
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("the process exited before it listened (%v): %s", s.err, s.Output())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not listening after %s: %w", listenTimeout, err)
		}
	}
}

// Addr is where the server listens.
func (s *Server) Addr() netip.AddrPort { return s.addr }

// Pid is the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Done is closed once the process has exited.
func (s *Server) Done() <-chan struct{} { return s.done }

// Output is the end of what the process wrote, for error messages.
func (s *Server) Output() string { return s.out.String() }

// ErrKilled says that a server did not exit within its grace period.
var ErrKilled = errors.New("killed at the end of the grace period")

// Terminate stops the server as a kubelet stops a container: SIGTERM, then
// SIGKILL when grace has passed or ctx ends. It returns once the process
// has exited, with ErrKilled if it had to be killed, or the error of an
// exit other than 0.
func (s *Server) Terminate(ctx context.Context, grace time.Duration) error {
	_ = s.cmd.Process.Signal(syscall.SIGTERM) // fails only once it has exited
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-s.done:
		if s.err != nil {
			return fmt.Errorf("server on %s exited: %w: %s", s.addr, s.err, s.Output())
		}
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	s.Kill()
	return fmt.Errorf("server on %s: %w", s.addr, ErrKilled)
}

// Kill kills the process and waits until it has exited.
func (s *Server) Kill() {
	_ = s.cmd.Process.Kill() // fails only once it has exited
	<-s.done
}

// tailBuffer keeps the last few kilobytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const tailSize = 4096

// Write keeps the end of what the process writes.
func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > tailSize {
		b.buf = append(b.buf[:0], b.buf[len(b.buf)-tailSize:]...)
	}
	return len(p), nil
}

// String is what was kept, without surrounding blank lines.
func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.TrimSpace(string(b.buf))
}
