package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/vacate-dev/vacate/internal/hook"
)

var lookPath = exec.LookPath

// Output bounds: of each stream, the first headBytes and the last tailBytes
// are kept; the rest is counted, not stored.
const (
	headBytes = 64 << 10
	tailBytes = 4 << 10
	// killGrace is how long a command has between SIGTERM and SIGKILL.
	killGrace = 5 * time.Second
)

// Drain is what a command is told of its drain, in its environment.
type Drain struct {
	UID, Run, Node, Mode string
}

// outcome is how a command ended.
type outcome struct {
	// err is nil when the command exited 0.
	err error
	// stdout and stderr are what was kept of each stream.
	stdout, stderr string
	// timedOut is set when the command ran past its timeout, stopped when
	// the drain's work was interrupted (a cancel, a mode raised, shutdown).
	timedOut, stopped bool
}

// lastLine is the last non-empty line of the command's output, stderr
// first, as a short printable summary.
func (o outcome) lastLine() string {
	for _, s := range []string{o.stderr, o.stdout} {
		lines := strings.Split(strings.TrimRight(s, "\n\r\t "), "\n")
		if l := strings.TrimSpace(lines[len(lines)-1]); l != "" {
			return hook.Summary(l)
		}
	}
	return ""
}

// describe says how a command that did not succeed ended.
func (o outcome) describe(c *Command) string {
	var why string
	switch {
	case o.timedOut:
		why = fmt.Sprintf("%s ran longer than its timeout %s and was killed", c.Name(), c.timeout)
	case o.stopped:
		why = fmt.Sprintf("%s was stopped", c.Name())
	case errors.Is(o.err, exec.ErrWaitDelay):
		why = fmt.Sprintf("%s exited 0 but left a process holding its output open (a command must finish its work, not leave it running)", c.Name())
	default:
		var ee *exec.ExitError
		if errors.As(o.err, &ee) && ee.Exited() {
			why = fmt.Sprintf("%s exited %d", c.Name(), ee.ExitCode())
		} else {
			why = fmt.Sprintf("%s: %v", c.Name(), o.err)
		}
	}
	if l := o.lastLine(); l != "" {
		why += ": " + l
	}
	return why
}

// run runs one command and counts it in the metrics.
func (s *Sidecar) run(ctx context.Context, c *Command, d Drain, step string) outcome {
	start := s.clock.Now()
	o := run(ctx, c, d, step)
	s.metrics.command(step, o, s.clock.Since(start))
	return o
}

// run runs one command for a drain's step, bounded by its timeout and by
// ctx (cancelled when the drain's work is interrupted). The command has its
// own process group, killed whole.
func run(ctx context.Context, c *Command, d Drain, step string) outcome {
	tctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	cmd := exec.Command(c.path, c.Command[1:]...)
	cmd.Args[0] = c.Command[0]
	cmd.Env = environ(d, step)
	cmd.Stdin = nil
	var stdout, stderr capped
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A descendant that left the process group (setsid) and holds the
	// output open would keep Wait waiting forever once the command exits:
	// after killGrace the pipes are closed and Wait returns ErrWaitDelay.
	cmd.WaitDelay = killGrace
	if err := cmd.Start(); err != nil {
		return outcome{err: err}
	}
	pgid := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var o outcome
	select {
	case o.err = <-done:
	case <-tctx.Done():
		o.timedOut = ctx.Err() == nil
		o.stopped = !o.timedOut
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case o.err = <-done:
		case <-time.After(killGrace):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			o.err = <-done
		}
		if o.err == nil {
			// It exited 0 on SIGTERM: still not a success.
			o.err = tctx.Err()
		}
	}
	// Whatever the command left behind in its group goes with it.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	o.stdout, o.stderr = stdout.String(), stderr.String()
	return o
}

// environ is the sidecar's environment without any VACATE_ variable of its
// own, plus the drain's.
func environ(d Drain, step string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VACATE_") {
			env = append(env, kv)
		}
	}
	return append(env,
		"VACATE_DRAIN="+d.UID,
		"VACATE_RUN="+d.Run,
		"VACATE_NODE="+d.Node,
		"VACATE_MODE="+d.Mode,
		"VACATE_STEP="+step,
	)
}

// capped keeps the first headBytes and the last tailBytes written to it.
type capped struct {
	head    []byte
	tail    []byte
	dropped int64
}

func (c *capped) Write(p []byte) (int, error) {
	n := len(p)
	if room := headBytes - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	if len(p) == 0 {
		return n, nil
	}
	c.tail = append(c.tail, p...)
	if over := len(c.tail) - tailBytes; over > 0 {
		c.dropped += int64(over)
		c.tail = append(c.tail[:0], c.tail[over:]...)
	}
	return n, nil
}

func (c *capped) String() string {
	if c.dropped == 0 {
		return string(c.head) + string(c.tail)
	}
	return fmt.Sprintf("%s\n[%d bytes not kept]\n%s", c.head, c.dropped, c.tail)
}

// Answer is the state of a drain as the protocol says it.
type Answer struct {
	Drain     string `json:"drain,omitempty"`
	Run       string `json:"run,omitempty"`
	State     string `json:"state"`
	Message   string `json:"message"`
	Remaining *int64 `json:"remaining,omitempty"`
}

// parseStatus reads what a status command printed: one JSON object, or a
// first line that is a state and the message after it. Anything else is an
// error, and so never Completed.
func parseStatus(out string) (Answer, error) {
	text := strings.TrimSpace(out)
	if text == "" {
		return Answer{}, errors.New("printed nothing; want a JSON object or a first line InProgress, Completed or Failed")
	}
	var a Answer
	if strings.HasPrefix(text, "{") {
		dec := json.NewDecoder(strings.NewReader(text))
		var raw struct {
			State     string `json:"state"`
			Message   string `json:"message"`
			Remaining *int64 `json:"remaining"`
		}
		if err := dec.Decode(&raw); err != nil {
			return Answer{}, fmt.Errorf("printed JSON that does not decode: %v", err)
		}
		if dec.More() {
			return Answer{}, errors.New("printed more than one JSON object")
		}
		a = Answer{State: raw.State, Message: raw.Message, Remaining: raw.Remaining}
	} else {
		first, rest, _ := strings.Cut(text, "\n")
		a.State = strings.TrimSpace(first)
		a.Message = strings.TrimSpace(rest)
	}
	switch a.State {
	case hook.InProgress, hook.Completed, hook.Failed:
	default:
		return Answer{}, fmt.Errorf("printed state %q; want InProgress, Completed or Failed", hook.Summary(a.State))
	}
	if a.Remaining != nil && *a.Remaining < 0 {
		return Answer{}, fmt.Errorf("printed remaining %d; want 0 or more", *a.Remaining)
	}
	if a.State == hook.Completed && a.Remaining != nil && *a.Remaining > 0 {
		return Answer{}, fmt.Errorf("printed Completed with %d remaining", *a.Remaining)
	}
	a.Message = hook.Summary(strings.Join(strings.Fields(a.Message), " "))
	return a, nil
}
