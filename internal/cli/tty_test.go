package cli

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/creack/pty"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// screen is a minimal terminal: it applies what the live view writes
// (text, CR, LF, cursor up, erase line) to a grid of lines, so a test sees
// what a person would.
type screen struct {
	mu    sync.Mutex
	lines []string
	row   int
	col   int
	// frames are the screen's text each time a redraw began.
	frames []string
}

var csi = regexp.MustCompile(`^\x1b\[(\d*)([A-Za-z])`)

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := string(p)
	for len(b) > 0 {
		if m := csi.FindStringSubmatch(b); m != nil {
			n := 1
			if m[1] != "" {
				n, _ = strconv.Atoi(m[1])
			}
			switch m[2] {
			case "A": // cursor up: a new frame starts
				s.frames = append(s.frames, s.text())
				s.row = max(s.row-n, 0)
			case "K":
				s.grow()
				s.lines[s.row] = ""
			}
			b = b[len(m[0]):]
			continue
		}
		r, size := utf8.DecodeRuneInString(b)
		b = b[size:]
		switch r {
		case '\r':
			s.col = 0
		case '\n':
			s.row++
			s.grow()
		default:
			s.grow()
			line := []rune(s.lines[s.row])
			for len(line) < s.col {
				line = append(line, ' ')
			}
			if s.col < len(line) {
				line[s.col] = r
			} else {
				line = append(line, r)
			}
			s.lines[s.row] = string(line)
			s.col++
		}
	}
	return len(p), nil
}

func (s *screen) grow() {
	for len(s.lines) <= s.row {
		s.lines = append(s.lines, "")
	}
}

func (s *screen) text() string { return strings.Join(s.lines, "\n") }

func (s *screen) snapshot() (string, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.text(), append([]string(nil), s.frames...)
}

// TestProgressViewInTerminal runs the real binary in a pseudo-terminal: the
// live view redraws in place, its bar advances, the PDB that holds a pod
// appears with what holds it, lines fit the terminal, and the summary ends it.
func TestProgressViewInTerminal(t *testing.T) {
	c := testenv.Start(t)
	testenv.Controller(t, c)
	ns, nodes := shop(t, c, "cli-tty", 3, "1")
	ctx := testenv.Context(t)
	target, dbPods := tightPDBOnDB(t, c, ns, nodes)
	leave := mustLeave(t, c, target)

	bin := testutil.Program(t, "github.com/vacate-dev/vacate/cmd/vacate")
	const cols = 160
	cmd := exec.Command(bin, "drain", target, "--wait", "--timeout", "2m", "--kubeconfig", c.Kubeconfig)
	cmd.Env = append(os.Environ(), "TERM=xterm")
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: cols})
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	scr := &screen{}
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(scr, tty) // ends with EIO when the process exits
		close(copied)
	}()

	blockedLine := regexp.MustCompile(`blocked \d+s: ` + ns + `/db-0 held by PodDisruptionBudget ` + ns + `/db`)
	waitScreen := func(what string, cond func(string) bool) {
		t.Helper()
		testutil.Eventually(t, time.Minute, "the terminal to show "+what, func() error {
			text, _ := scr.snapshot()
			if cond(text) {
				return nil
			}
			return fmt.Errorf("it shows:\n%s", text)
		})
	}
	waitScreen("db-0 held by its PDB", blockedLine.MatchString)

	// Relax the PDB, as explain would suggest: the drain finishes.
	pdb, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "db", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	two := intstr.FromInt32(2)
	pdb.Spec.MinAvailable = &two
	if _, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Update(ctx, pdb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			text, _ := scr.snapshot()
			t.Fatalf("vacate drain --wait exited with %v; screen:\n%s", err, text)
		}
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("vacate drain --wait did not end after the PDB was relaxed")
	}
	select {
	case <-copied:
	case <-time.After(10 * time.Second):
	}

	text, frames := scr.snapshot()
	t.Logf("final screen:\n%s", text)
	checkLiveView(t, frames, text, blockedLine, cols, target, leave)
	for _, want := range []string{
		fmt.Sprintf("%s [%s] %7s  Drained in", target, strings.Repeat("█", 24), fmt.Sprintf("%d/%d", leave, leave)),
		fmt.Sprintf("PodDisruptionBudget %s/db (%d pod(s), ", ns, dbPods),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("final screen lacks %q", want)
		}
	}
	// The terminal got the live view, not the line output for scripts.
	if regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ` + target + ` `).MatchString(text) {
		t.Error("the terminal shows line output")
	}
	cancel := user{t: t, kubeconfig: c.Kubeconfig}
	cancel.must(ExitOK, "cancel", target)
}

// tightPDBOnDB puts a PDB on the shop's db that allows no disruption, and
// returns the node of db-0, whose drain waits for it, and how many db pods
// run there.
func tightPDBOnDB(t *testing.T, c *devcluster.Cluster, ns string, nodes []string) (string, int) {
	t.Helper()
	ctx := testenv.Context(t)
	if _, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, devcluster.PDB(ns, "db", "db", "3", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.WaitForPDB(ctx, c.Client, ns, "db", 3, time.Minute); err != nil {
		t.Fatal(err)
	}
	db0, err := c.Client.CoreV1().Pods(ns).Get(ctx, "db-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	target := db0.Spec.NodeName
	if !strings.HasPrefix(target, "cli-tty") {
		t.Fatalf("db-0 runs on %q, not on one of %v", target, nodes)
	}
	dbPods := 0
	for _, p := range testenv.PodsOnNode(t, c, target) {
		if p.Labels[devcluster.AppLabel] == "db" {
			dbPods++
		}
	}
	return target, dbPods
}

// checkLiveView checks the frames the live view drew in a terminal of cols
// cells, and its final text: it redrew in place, the node's bar advanced to
// all leave pods evicted, some frame showed the PDB holding db-0
// (blockedLine), and no line is wider than the terminal.
func checkLiveView(t *testing.T, frames []string, text string, blockedLine *regexp.Regexp, cols int, target string, leave int) {
	t.Helper()
	if len(frames) < 2 {
		t.Fatalf("the view redrew %d times; want a live view redrawn in place", len(frames))
	}
	// The bar advanced: the node's count took more than one value, ending
	// with every pod evicted.
	count := regexp.MustCompile(regexp.QuoteMeta(target) + ` \[[█░]+\]\s+(\d+)/(\d+) `)
	var seen []string
	for _, f := range append(frames, text) {
		if m := count.FindStringSubmatch(f); m != nil && (len(seen) == 0 || seen[len(seen)-1] != m[1]) {
			seen = append(seen, m[1])
		}
	}
	if len(seen) < 2 || seen[len(seen)-1] != strconv.Itoa(leave) {
		t.Errorf("evicted counts seen in the frames: %v; want the bar to advance to %d", seen, leave)
	}
	blocked := 0
	for _, f := range frames {
		if blockedLine.MatchString(f) {
			blocked++
		}
		for _, l := range strings.Split(f, "\n") {
			if n := utf8.RuneCountInString(l); n > cols {
				t.Errorf("a line of %d cells in a %d-cell terminal: %q", n, cols, l)
			}
		}
	}
	if blocked == 0 {
		t.Error("no frame shows the PDB holding db-0")
	}
}
