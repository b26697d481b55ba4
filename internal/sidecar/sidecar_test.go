package sidecar

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// The sidecar's tests run real commands (sh scripts the test writes) and
// call the protocol over HTTP, as vacate-controller does.

// fixture is one sidecar with its scripts and state directory.
type fixture struct {
	t      *testing.T
	dir    string
	state  string
	config string
	log    *syncBuffer

	s      *Sidecar
	srv    *httptest.Server
	cancel context.CancelFunc
}

// newFixture writes the configuration: {{dir}} in it is the fixture's
// directory, where the scripts are.
func newFixture(t *testing.T, config string, scripts map[string]string) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{t: t, dir: dir, state: filepath.Join(dir, "state"), log: &syncBuffer{}}
	if err := os.Mkdir(f.state, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range scripts {
		body = strings.ReplaceAll(body, "{{dir}}", dir)
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f.config = "stateDir: " + f.state + "\nstatusInterval: 50ms\nretryInterval: 100ms\n" + strings.ReplaceAll(config, "{{dir}}", dir)
	t.Cleanup(f.stop)
	return f
}

// start starts a sidecar on the fixture's state, as a restarted container
// would.
func (f *fixture) start() *fixture {
	f.t.Helper()
	cfg, err := ParseConfig([]byte(f.config))
	if err != nil {
		f.t.Fatal(err)
	}
	s, err := New(cfg, Options{Log: slog.New(slog.NewTextHandler(f.log, nil)), MaxDrains: 3})
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.Start(ctx)
	f.s, f.cancel, f.srv = s, cancel, httptest.NewServer(s.Handler())
	return f
}

// stop stops the sidecar as SIGTERM does: its commands are killed, its
// state stays.
func (f *fixture) stop() {
	if f.s == nil {
		return
	}
	f.cancel()
	f.s.Wait()
	f.srv.Close()
	f.s = nil
}

func (f *fixture) do(method, drain, run string, body any) (int, Answer, string) {
	f.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	u := f.srv.URL + "/evacuate?drain=" + drain
	if run != "" {
		u += "&run=" + run
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		f.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var a Answer
	if resp.Header.Get("Content-Type") == "application/json" {
		if err := json.Unmarshal(data, &a); err != nil {
			f.t.Fatalf("%s: answer %q: %v", method, data, err)
		}
	}
	return resp.StatusCode, a, string(data)
}

func (f *fixture) post(drain, run, mode string) (int, Answer) {
	f.t.Helper()
	code, a, body := f.do(http.MethodPost, drain, run, map[string]string{"drain": drain, "run": run, "node": "node-1", "mode": mode})
	if code/100 != 2 {
		f.t.Fatalf("POST %s: HTTP %d: %s", drain, code, body)
	}
	return code, a
}

func (f *fixture) get(drain string) (int, Answer) {
	f.t.Helper()
	code, a, _ := f.do(http.MethodGet, drain, "", nil)
	return code, a
}

// waitFor polls GET until cond holds, and returns the last answer.
func (f *fixture) waitFor(drain, what string, cond func(code int, a Answer) bool) Answer {
	f.t.Helper()
	var a Answer
	testutil.Eventually(f.t, 30*time.Second, "drain "+drain+" "+what, func() error {
		var code int
		code, a = f.get(drain)
		if cond(code, a) {
			return nil
		}
		return fmt.Errorf("last HTTP %d %+v\nsidecar log:\n%s", code, a, f.log)
	})
	return a
}

func (f *fixture) waitState(drain, state string) Answer {
	f.t.Helper()
	return f.waitFor(drain, "to be "+state, func(code int, a Answer) bool { return code == 200 && a.State == state })
}

func (f *fixture) waitGone(drain string) {
	f.t.Helper()
	f.waitFor(drain, "to be forgotten (404)", func(code int, _ Answer) bool { return code == http.StatusNotFound })
}

// lines is what the scripts logged to {{dir}}/log, a line per run.
func (f *fixture) lines() []string {
	data, err := os.ReadFile(filepath.Join(f.dir, "log"))
	if err != nil && !os.IsNotExist(err) {
		f.t.Fatal(err)
	}
	return strings.Fields(strings.ReplaceAll(string(data), " ", "_"))
}

func (f *fixture) count(line string) int {
	n := 0
	for _, l := range f.lines() {
		if l == line {
			n++
		}
	}
	return n
}

func (f *fixture) touch(name string) {
	f.t.Helper()
	if err := os.WriteFile(filepath.Join(f.dir, name), nil, 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// pidGone waits until the process whose pid a script wrote is gone.
func (f *fixture) pidGone(file string) {
	f.t.Helper()
	var pid int
	testutil.Eventually(f.t, 10*time.Second, "the process whose pid is in "+file+" to be gone", func() error {
		data, err := os.ReadFile(filepath.Join(f.dir, file))
		if err != nil || len(bytes.TrimSpace(data)) == 0 {
			return fmt.Errorf("process %d is still running", pid)
		}
		pid, _ = strconv.Atoi(string(bytes.TrimSpace(data)))
		if syscall.Kill(pid, 0) != nil {
			return nil
		}
		return fmt.Errorf("process %d is still running", pid)
	})
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

const logLine = `echo "$VACATE_STEP $VACATE_MODE $VACATE_RUN" >> {{dir}}/log`

// statusFromFile says Completed once {{dir}}/done exists.
const statusFromFile = `if [ -e {{dir}}/done ]; then echo Completed; else echo InProgress; echo "waiting for done"; fi`

// TestStartTwiceRunsEvacuateOnce: POSTs for the same drain, at once and
// again later, run evacuate once; the answer is Completed only when status
// says so, and names the drain and run.
func TestStartTwiceRunsEvacuateOnce(t *testing.T) {
	f := newFixture(t, `
maintenance:
  evacuate: [{command: ["{{dir}}/evacuate"]}]
  status: {command: ["{{dir}}/status"]}
`, map[string]string{"evacuate": logLine + "; sleep 0.3", "status": statusFromFile}).start()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.post("d1", "r1", Maintenance)
		}()
	}
	wg.Wait()
	a := f.waitFor("d1", "to wait for status", func(_ int, a Answer) bool { return a.Message == "waiting for done" })
	if a.State != "InProgress" || a.Drain != "d1" || a.Run != "r1" {
		t.Errorf("answer %+v, want InProgress about d1, r1", a)
	}
	f.post("d1", "r1", Maintenance)
	f.touch("done")
	a = f.waitState("d1", "Completed")
	if a.Remaining == nil || *a.Remaining != 0 {
		t.Errorf("Completed answer %+v, want remaining 0", a)
	}
	f.post("d1", "r1", Maintenance)
	if n := f.count("evacuate_Maintenance_r1"); n != 1 {
		t.Errorf("evacuate ran %d times for 10 POSTs of one drain, want once: %v", n, f.lines())
	}
}

// TestCommandsGetArgvAndTheDrain: arguments reach the program as written
// (no shell, no interpolation), and the drain is in the environment.
func TestCommandsGetArgvAndTheDrain(t *testing.T) {
	f := newFixture(t, `
maintenance:
  evacuate: [{command: ["{{dir}}/args", "$HOME", "a b", "$(touch {{dir}}/pwned)", "*"]}]
`, map[string]string{"args": `for a in "$@"; do echo "arg=$a"; done > {{dir}}/out; env | grep ^VACATE_ | sort >> {{dir}}/out`}).start()
	t.Setenv("VACATE_MODE", "from-the-sidecar's-own-environment")
	f.post("d2", "r2", Decommission)
	f.waitState("d2", "Completed")
	data, err := os.ReadFile(filepath.Join(f.dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	want := "arg=$HOME\narg=a b\narg=$(touch " + f.dir + "/pwned)\narg=*\n" +
		"VACATE_DRAIN=d2\nVACATE_MODE=Decommission\nVACATE_NODE=node-1\nVACATE_RUN=r2\nVACATE_STEP=evacuate\n"
	if string(data) != want {
		t.Errorf("the command saw:\n%s\nwant:\n%s", data, want)
	}
	if _, err := os.Stat(filepath.Join(f.dir, "pwned")); err == nil {
		t.Error("an argument was run by a shell")
	}
}

// TestStatusThatCannotBeReadIsNeverCompleted: a status that prints
// nonsense, says Completed but fails, or hangs is reported with its reason,
// and the drain stays InProgress through many runs of it.
func TestStatusThatCannotBeReadIsNeverCompleted(t *testing.T) {
	for _, tc := range []struct{ name, status, want string }{
		{"lower case", `echo completed`, `printed state "completed"`},
		{"exit code", `echo Completed; echo "it broke" >&2; exit 3`, "exited 3: it broke"},
		{"Completed with work left", `echo '{"state":"Completed","remaining":4}'`, "Completed with 4 remaining"},
		{"hangs", `echo $$ >> {{dir}}/pids; echo Completed; exec sleep 60`, "ran longer than its timeout 300ms and was killed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, `
maintenance:
  evacuate: [{command: [true]}]
  status: {command: ["{{dir}}/status"], timeout: 300ms}
`, map[string]string{"status": logLine + "; " + tc.status}).start()
			f.post("d3", "r3", Maintenance)
			f.waitFor("d3", "to report "+tc.want, func(_ int, a Answer) bool {
				if a.State == "Completed" {
					t.Fatalf("Completed on a status that cannot be read: %+v", a)
				}
				return f.count("status_Maintenance_r3") >= 3 && strings.Contains(a.Message, tc.want)
			})
			if _, a := f.get("d3"); a.State != "InProgress" {
				t.Errorf("answer %+v, want InProgress", a)
			}
			if tc.name == "hangs" {
				// Every run was killed: those that timed out at once, the
				// one running now when the sidecar stops.
				f.stop()
				data, _ := os.ReadFile(filepath.Join(f.dir, "pids"))
				for _, pid := range strings.Fields(string(data)) {
					if n, _ := strconv.Atoi(pid); n <= 0 || syscall.Kill(n, 0) == nil {
						t.Errorf("status run %s is still running", pid)
					}
				}
			}
		})
	}
}

// TestCommandLeavingAProcessBehind: a command that exits but leaves a
// process of another session holding its output is not a success, and does
// not hang the drain.
func TestCommandLeavingAProcessBehind(t *testing.T) {
	f := newFixture(t, `
maintenance:
  evacuate: [{command: ["{{dir}}/detach"], timeout: 1m}]
`, map[string]string{"detach": `setsid sleep 30 & echo $! >> {{dir}}/pids; echo started`}).start()
	f.post("d12", "r", Maintenance)
	a := f.waitFor("d12", "to report the process left behind", func(_ int, a Answer) bool {
		return strings.Contains(a.Message, "exited 0 but left a process holding its output open")
	})
	if a.State != "InProgress" {
		t.Errorf("answer %+v, want InProgress", a)
	}
	f.stop()
	data, _ := os.ReadFile(filepath.Join(f.dir, "pids"))
	for _, pid := range strings.Fields(string(data)) {
		if n, _ := strconv.Atoi(pid); n > 0 {
			_ = syscall.Kill(n, syscall.SIGKILL)
		}
	}
}

// TestEvacuateRefusedThenRetried: the app's refusal (an evacuate command
// exiting non-zero) is the answer's message, and evacuate runs again, from
// its first command, until it succeeds.
func TestEvacuateRefusedThenRetried(t *testing.T) {
	f := newFixture(t, `
maintenance:
  evacuate:
  - command: ["{{dir}}/check"]
  - command: ["{{dir}}/move"]
`, map[string]string{
		"check": logLine + `; [ -e {{dir}}/allowed ] || { echo "checking quorum"; echo "node rabbit@a is quorum-critical for queue q1" >&2; exit 69; }`,
		"move":  `echo moved >> {{dir}}/log`,
	}).start()
	f.post("d4", "r4", Maintenance)
	a := f.waitFor("d4", "to say why it waits", func(_ int, a Answer) bool {
		return strings.Contains(a.Message, "exited 69: node rabbit@a is quorum-critical for queue q1") && f.count("evacuate_Maintenance_r4") >= 2
	})
	if a.State != "InProgress" || f.count("moved") != 0 {
		t.Fatalf("answer %+v, moved %d times: want InProgress, nothing moved", a, f.count("moved"))
	}
	f.touch("allowed")
	f.waitState("d4", "Completed")
	if n := f.count("moved"); n != 1 {
		t.Errorf("the second command ran %d times, want once", n)
	}
}

// TestRestartResumes: a sidecar stopped mid-evacuation (its command and
// the command's children killed) resumes the drain from its state file when
// it starts again, without being asked again.
func TestRestartResumes(t *testing.T) {
	f := newFixture(t, `
maintenance:
  evacuate: [{command: ["{{dir}}/evacuate"]}]
  status: {command: ["{{dir}}/status"]}
`, map[string]string{
		"evacuate": logLine + `; [ -e {{dir}}/second ] && exit 0; sleep 60 & echo $! > {{dir}}/child; wait`,
		"status":   `echo Completed`,
	}).start()
	f.post("d5", "r5", Maintenance)
	f.waitFor("d5", "to run evacuate", func(_ int, a Answer) bool {
		data, _ := os.ReadFile(filepath.Join(f.dir, "child"))
		return len(bytes.TrimSpace(data)) > 0
	})
	f.stop()
	f.pidGone("child")
	f.touch("second")
	f.start()
	if _, a := f.get("d5"); a.State == "Completed" {
		t.Fatalf("a drain whose evacuate was killed is Completed after a restart: %+v", a)
	}
	f.waitState("d5", "Completed")
	if n := f.count("evacuate_Maintenance_r5"); n != 2 {
		t.Errorf("evacuate ran %d times, want twice (killed, then resumed)", n)
	}
	if !strings.Contains(f.log.String(), "resuming a drain after a restart") {
		t.Errorf("the log does not say the drain was resumed:\n%s", f.log)
	}
	// A Completed drain stays Completed across a restart, without running
	// anything again.
	f.stop()
	f.start()
	f.waitState("d5", "Completed")
	f.post("d5", "r5", Maintenance)
	if n := f.count("evacuate_Maintenance_r5"); n != 2 {
		t.Errorf("evacuate ran %d times after a second restart, want 2", n)
	}
}

// TestCancelUndoes: a cancel after a completed Maintenance evacuation runs
// the cancel commands; a cancel mid-evacuation kills evacuate first. Then
// the drain is forgotten (404).
func TestCancelUndoes(t *testing.T) {
	const config = `
maintenance:
  evacuate: [{command: ["{{dir}}/evacuate"]}]
  cancel: [{command: ["{{dir}}/cancel"]}]
`
	scripts := map[string]string{
		"evacuate": logLine + `; [ -e {{dir}}/slow ] || exit 0; echo $$ > {{dir}}/pid; exec sleep 60`,
		"cancel":   logLine,
	}
	t.Run("after Completed", func(t *testing.T) {
		f := newFixture(t, config, scripts).start()
		f.post("d6", "r6", Maintenance)
		f.waitState("d6", "Completed")
		if code, _, body := f.do(http.MethodDelete, "d6", "r6", nil); code != http.StatusAccepted {
			t.Fatalf("DELETE: HTTP %d %s", code, body)
		}
		f.waitGone("d6")
		if got := strings.Join(f.lines(), " "); got != "evacuate_Maintenance_r6 cancel_Maintenance_r6" {
			t.Errorf("ran %q, want evacuate then cancel", got)
		}
		if code, _, _ := f.do(http.MethodDelete, "d6", "r6", nil); code != http.StatusNotFound {
			t.Errorf("a second DELETE: HTTP %d, want 404 (nothing to undo)", code)
		}
	})
	t.Run("mid-evacuation", func(t *testing.T) {
		f := newFixture(t, config, scripts)
		f.touch("slow")
		f.start()
		f.post("d7", "r7", Maintenance)
		// Up to its sleep: a cancel before the script wrote its pid would
		// leave nothing to check.
		f.waitFor("d7", "to run evacuate up to its sleep", func(int, Answer) bool {
			pid, _ := os.ReadFile(filepath.Join(f.dir, "pid"))
			return f.count("evacuate_Maintenance_r7") == 1 && len(bytes.TrimSpace(pid)) > 0
		})
		if code, _, body := f.do(http.MethodDelete, "d7", "r7", nil); code != http.StatusAccepted {
			t.Fatalf("DELETE: HTTP %d %s", code, body)
		}
		f.waitGone("d7")
		f.pidGone("pid")
		if n := f.count("cancel_Maintenance_r7"); n != 1 {
			t.Errorf("cancel ran %d times, want once: %v", n, f.lines())
		}
	})
}

// TestModeRaised: a Decommission asked after a Maintenance runs the
// Decommission steps; a cancel undoes both, the last started first.
func TestModeRaised(t *testing.T) {
	f := newFixture(t, `
maintenance:
  evacuate: [{command: ["{{dir}}/step"]}]
  cancel: [{command: ["{{dir}}/step"]}]
decommission:
  evacuate: [{command: ["{{dir}}/step"]}, {command: ["{{dir}}/shrink"]}]
  cancel: [{command: ["{{dir}}/grow"]}]
`, map[string]string{"step": logLine, "shrink": `echo shrink >> {{dir}}/log`, "grow": `echo grow >> {{dir}}/log`}).start()
	f.post("d8", "r8", Maintenance)
	f.waitState("d8", "Completed")
	f.post("d8", "r9", Decommission)
	f.waitFor("d8", "to be Completed as a Decommission", func(_ int, a Answer) bool {
		return a.State == "Completed" && f.count("shrink") == 1
	})
	f.post("d8", "r9", Maintenance) // modes never go down
	f.do(http.MethodDelete, "d8", "r9", nil)
	f.waitGone("d8")
	want := "evacuate_Maintenance_r8 evacuate_Decommission_r9 shrink grow cancel_Decommission_r9"
	if got := strings.Join(f.lines(), " "); got != want {
		t.Errorf("ran %q, want %q", got, want)
	}
}

// TestStartedWhileCancelling: a drain asked again while its cancel runs
// starts afresh once the cancel is done.
func TestStartedWhileCancelling(t *testing.T) {
	f := newFixture(t, `
maintenance:
  evacuate: [{command: ["{{dir}}/step"]}]
  cancel: [{command: ["{{dir}}/cancel"]}]
`, map[string]string{"step": logLine, "cancel": logLine + `; [ -e {{dir}}/undone ]`}).start()
	f.post("d9", "r1", Maintenance)
	f.waitState("d9", "Completed")
	f.do(http.MethodDelete, "d9", "r1", nil)
	f.waitFor("d9", "to try its cancel", func(_ int, a Answer) bool { return strings.Contains(a.Message, "cancel: ") })
	_, a := f.post("d9", "r2", Maintenance)
	if !strings.Contains(a.Message, "undoing the previous run") {
		t.Errorf("POST while cancelling answered %+v", a)
	}
	f.touch("undone")
	f.waitFor("d9", "to run again for r2", func(_ int, a Answer) bool { return a.State == "Completed" && a.Run == "r2" })
	if n := f.count("evacuate_Maintenance_r2"); n != 1 {
		t.Errorf("evacuate of the new run ran %d times: %v", n, f.lines())
	}
}

// TestRequestsRefused: what is not the protocol gets a 4xx with a message
// and changes nothing.
func TestRequestsRefused(t *testing.T) {
	f := newFixture(t, `
maintenance:
  evacuate: [{command: ["{{dir}}/step"]}]
`, map[string]string{"step": logLine}).start()
	for _, tc := range []struct {
		name, method, drain string
		body                any
		code                int
		want                string
	}{
		{"a drain that is a path", "POST", "..%2Fx", map[string]string{"node": "n", "mode": Maintenance}, 400, "want the drain's UID"},
		{"no drain", "GET", "", nil, 400, "want the drain's UID"},
		{"bad mode", "POST", "d", map[string]string{"node": "n", "mode": "Drain"}, 400, `mode "Drain"`},
		{"bad node", "POST", "d", map[string]string{"node": "Node_1", "mode": Maintenance}, 400, `node "Node_1"`},
		{"another drain in the body", "POST", "d", map[string]string{"drain": "e", "node": "n", "mode": Maintenance}, 400, `the body names drain "e"`},
		{"not JSON", "POST", "d", "just text", 400, "not the protocol's JSON"},
		{"unknown", "GET", "nope", nil, 404, "not known here"},
		{"unknown cancel", "DELETE", "nope", nil, 404, "nothing to undo"},
		{"method", "PUT", "d", nil, 405, "want POST, GET or DELETE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, body := f.do(tc.method, tc.drain, "", tc.body)
			if code != tc.code || !strings.Contains(body, tc.want) {
				t.Errorf("HTTP %d %q, want %d saying %q", code, body, tc.code, tc.want)
			}
		})
	}
}

// TestFinishedDrainsHoldNoSlot: at most MaxDrains drains are followed at
// once, but a drain whose evacuation is Completed no longer counts: three
// finished drains (their pods were not evicted, nobody cancelled) do not
// make the next drain's POST answer 503.
func TestFinishedDrainsHoldNoSlot(t *testing.T) {
	f := newFixture(t, `
maintenance:
  evacuate: [{command: ["{{dir}}/step"]}]
  status: {command: ["{{dir}}/status"]}
`, map[string]string{"step": logLine, "status": statusFromFile}).start()
	for i := range 3 {
		f.post(fmt.Sprint("full-", i), "r", Maintenance)
	}
	code, _, body := f.do(http.MethodPost, "one-more", "r", map[string]string{"node": "n", "mode": Maintenance})
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "already follows 3 drains") {
		t.Errorf("a fourth drain while three are in progress: HTTP %d %q, want 503", code, body)
	}
	f.touch("done")
	for i := range 3 {
		f.waitState(fmt.Sprint("full-", i), "Completed")
	}
	code, _, body = f.do(http.MethodPost, "one-more", "r", map[string]string{"node": "n", "mode": Maintenance})
	if code != http.StatusAccepted {
		t.Errorf("a fourth drain once the three are Completed: HTTP %d %q, want 202 (finished drains hold no slot)", code, body)
	}
	f.waitState("one-more", "Completed")
	if n := len(f.lines()); n != 4 {
		t.Errorf("evacuate ran %d times, want 4 (once per accepted drain): %v", n, f.lines())
	}
	// A finished drain is still undone when cancelled.
	if code, _, body := f.do(http.MethodDelete, "full-0", "r", nil); code != http.StatusAccepted {
		t.Errorf("DELETE of a finished drain: HTTP %d %q, want 202", code, body)
	}
	f.waitGone("full-0")
}

// TestNewRunStartsAfresh: a POST of the same drain with a new run id (the
// drain failed and a requester joined again, or it was asked again after a
// cancel) never reads the old run's Completed: evacuate runs again for the
// new run (a primary that became primary again is switched over again),
// and the answer names the new run.
func TestNewRunStartsAfresh(t *testing.T) {
	f := newFixture(t, `
maintenance:
  evacuate: [{command: ["{{dir}}/step"]}]
  status: {command: ["{{dir}}/status"]}
`, map[string]string{"step": logLine, "status": statusFromFile}).start()
	f.touch("done")
	f.post("d1", "run-1", Maintenance)
	f.waitState("d1", "Completed")
	os.Remove(filepath.Join(f.dir, "done"))
	_, a := f.post("d1", "run-2", Maintenance)
	if a.State == "Completed" {
		t.Errorf("POST of run-2 answered %+v: run-1's Completed read as run-2's", a)
	}
	f.waitFor("d1", "to run evacuate for run-2", func(_ int, a Answer) bool { return a.Run == "run-2" && a.Message == "waiting for done" })
	if n := f.count("evacuate_Maintenance_run-2"); n != 1 {
		t.Errorf("evacuate ran %d times for run-2, want once: %v", n, f.lines())
	}
	f.touch("done")
	f.waitState("d1", "Completed")
	// The same run again is idempotent: no third evacuate.
	f.post("d1", "run-2", Maintenance)
	if n := len(f.lines()); n != 2 {
		t.Errorf("evacuate ran %d times, want 2 (once per run): %v", n, f.lines())
	}
}

// TestOutputIsBounded: a command that prints megabytes is kept to its head
// and tail; its last line still explains a failure.
func TestOutputIsBounded(t *testing.T) {
	f := newFixture(t, `
maintenance:
  evacuate: [{command: ["{{dir}}/loud"]}]
`, map[string]string{"loud": `head -c 4000000 /dev/zero | tr '\0' x; echo; echo "final words" >&2; exit 3`}).start()
	f.post("d10", "r", Maintenance)
	f.waitFor("d10", "to report the failure", func(_ int, a Answer) bool { return strings.Contains(a.Message, "exited 3: final words") })
	var c capped
	for range 100 {
		c.Write(bytes.Repeat([]byte("y"), 10000))
	}
	c.Write([]byte("\nlast"))
	if s := c.String(); len(s) > headBytes+tailBytes+64 || !strings.HasSuffix(s, "\nlast") {
		t.Errorf("kept %d bytes ending %q", len(s), s[len(s)-10:])
	}
}

// TestStateFiles: a state file that does not decode is moved aside, never
// deleted; a state directory that cannot be written is refused at start.
func TestStateFiles(t *testing.T) {
	f := newFixture(t, `
maintenance:
  evacuate: [{command: [true]}]
`, nil)
	if err := os.WriteFile(filepath.Join(f.state, "d11.json"), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.start()
	if code, _ := f.get("d11"); code != http.StatusNotFound {
		t.Errorf("GET of a drain whose state is corrupt: HTTP %d, want 404 (vacate posts again)", code)
	}
	if _, err := os.Stat(filepath.Join(f.state, "d11.json.corrupt")); err != nil {
		t.Errorf("the corrupt file was not kept aside: %v", err)
	}
	if !strings.Contains(f.log.String(), "could not be read") {
		t.Errorf("the log does not report the corrupt file:\n%s", f.log)
	}
	cfg, err := ParseConfig([]byte("stateDir: " + filepath.Join(f.dir, "missing") + "\nmaintenance: {evacuate: [{command: [true]}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg, Options{}); err == nil || !strings.Contains(err.Error(), "stateDir") {
		t.Errorf("a missing state directory: %v, want an error naming stateDir", err)
	}
}

// TestMainChecksAndInstalls: the command line refuses a bad configuration
// naming the field, and install copies the program.
func TestMainChecksAndInstalls(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("stateDir: /s\nmaintenance: {evacuate: [{command: [true], timeout: forever}]}\n"), 0o644)
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"check", "--config", bad}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), `maintenance.evacuate[0].timeout: "forever"`) {
		t.Errorf("check of a bad configuration: exit %d, %q", code, errb.String())
	}
	errb.Reset()
	if code := Main(context.Background(), []string{"--config", bad}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "timeout") {
		t.Errorf("serving a bad configuration: exit %d, %q", code, errb.String())
	}
	if code := Main(context.Background(), []string{"install", dir}, &out, &errb); code != 0 {
		t.Fatalf("install: exit %d: %s", code, errb.String())
	}
	if info, err := os.Stat(filepath.Join(dir, "vacate-hook")); err != nil || info.Mode().Perm() != 0o755 {
		t.Errorf("installed: %v %v", info, err)
	}
}
