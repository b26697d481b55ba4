package progress

import (
	"fmt"
	"io"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// barWidth is the width of a progress bar, in cells.
const barWidth = 24

// maxBlockerLines bounds the blockers shown under one node in the live view.
const maxBlockerLines = 3

// Frame renders the live view: a header with the elapsed time and the ETA,
// then per node a bar, the counts and the phase, and under it the blockers
// with what holds them and for how long. Lines are cut to width cells.
func (t *Tracker) Frame(now time.Time, width int) []string {
	drained, failed, running := t.Counts()
	eta := "ETA unknown"
	if d, ok := t.ETA(now); ok {
		eta = "ETA ~" + Duration(d)
	}
	if running == 0 {
		eta = "done"
	}
	head := fmt.Sprintf("Draining %d node(s): %d drained, %d failed, %d running   elapsed %s   %s",
		len(t.nodes), drained, failed, running, Duration(t.Elapsed(now)), eta)
	lines := []string{head}
	nameWidth := 0
	for _, n := range t.Nodes() {
		nameWidth = max(nameWidth, len(n.Name))
	}
	for _, n := range t.Nodes() {
		lines = append(lines, fmt.Sprintf("%-*s %s %7s  %s", nameWidth, n.Name, Bar(n.Evicted, n.Total, barWidth), counts(n), state(n, now)))
		for i, b := range n.Blockers {
			if i == maxBlockerLines {
				lines = append(lines, fmt.Sprintf("%*s ... and %d more blocked", nameWidth, "", int(n.Blocked)-maxBlockerLines))
				break
			}
			lines = append(lines, fmt.Sprintf("%*s   blocked %s: %s", nameWidth, "", Duration(now.Sub(b.Since.Time)), blockerText(b)))
		}
	}
	for i, l := range lines {
		lines[i] = Cut(l, width)
	}
	return lines
}

func counts(n *Node) string {
	if !n.Seen {
		return "-"
	}
	return fmt.Sprintf("%d/%d", n.Evicted, n.Total)
}

// state is the phase with what matters about it.
func state(n *Node, now time.Time) string {
	switch {
	case n.Cancelled:
		return "Cancelled: the request was withdrawn"
	case !n.Seen:
		return "requested"
	case n.Phase == v1alpha1.PhaseDrained:
		return "Drained in " + Duration(n.Took(now))
	case n.Phase == v1alpha1.PhaseFailed:
		return "Failed: " + n.Waiting
	case n.Waiting != "":
		return string(n.Phase) + ": " + n.Waiting
	}
	return string(n.Phase) + " " + Duration(n.Took(now))
}

// blockerText is "pod by holder (detail)" or "pod: reason (detail)".
func blockerText(b v1alpha1.Blocker) string {
	if b.Holder != "" {
		detail := strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(b.Detail, b.Holder), ":"))
		if detail == "" {
			return b.Pod + " held by " + b.Holder
		}
		return b.Pod + " held by " + b.Holder + ": " + detail
	}
	if b.Detail == "" {
		return b.Pod + ": " + b.Reason
	}
	return b.Pod + ": " + b.Reason + " (" + b.Detail + ")"
}

// Bar draws done of total as a bar of width cells.
func Bar(done, total int32, width int) string {
	filled := 0
	if total > 0 {
		filled = int(int64(done) * int64(width) / int64(total))
	}
	filled = min(max(filled, 0), width)
	return "[" + strings.Repeat("█", filled) + strings.Repeat("░", width-filled) + "]"
}

// Duration renders a duration for people: 45s, 3m05s, 1h02m.
func Duration(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

// Fit keeps a frame within height lines, so the cursor can move back over
// it: the last line then says how many were left out. height <= 0 means no
// limit.
func Fit(lines []string, height int) []string {
	if height <= 1 || len(lines) < height {
		return lines
	}
	kept := append([]string(nil), lines[:height-2]...)
	return append(kept, fmt.Sprintf("... %d more line(s): enlarge the terminal, or pipe the output for one line per change", len(lines)-len(kept)))
}

// Cut shortens s to width cells (runes), marking the cut, after turning
// control characters (newlines, escapes from messages) into spaces so a
// line stays one line. width <= 0 means no limit.
func Cut(s string, width int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	if width <= 0 || utf8.RuneCountInString(s) <= width {
		return s
	}
	r := []rune(s)
	if width == 1 {
		return "…"
	}
	return string(r[:width-1]) + "…"
}

// Screen redraws a frame in place on a terminal: it moves the cursor up over
// the previous frame and rewrites each line.
type Screen struct {
	w     io.Writer
	lines int
}

// NewScreen draws on w, which must be a terminal.
func NewScreen(w io.Writer) *Screen { return &Screen{w: w} }

// Reset forgets the previous frame: the next one is drawn below whatever
// was printed since, instead of over it.
func (s *Screen) Reset() { s.lines = 0 }

// Draw replaces the previous frame with lines.
func (s *Screen) Draw(lines []string) error {
	var b strings.Builder
	if s.lines > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", s.lines) // cursor up to the frame's first line
	}
	for _, l := range lines {
		b.WriteString("\r\x1b[2K") // start of line, clear it
		b.WriteString(l)
		b.WriteString("\n")
	}
	for i := len(lines); i < s.lines; i++ { // clear what a longer frame left
		b.WriteString("\r\x1b[2K\n")
	}
	if extra := s.lines - len(lines); extra > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", extra) // back to just under the new frame
	}
	s.lines = len(lines)
	_, err := io.WriteString(s.w, b.String())
	return err
}
