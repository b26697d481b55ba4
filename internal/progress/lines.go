package progress

import (
	"fmt"
	"sort"
	"strconv"
	"time"
)

// Lines turns the tracker's changes into lines for logs and scripts, one
// event per line, fields separated by spaces, free text last and quoted:
//
//	2026-11-22T15:30:01Z node-1 Evicting 3/10
//	2026-11-22T15:30:02Z node-1 Blocked shop/db-0 PodDisruptionBudget "PodDisruptionBudget shop/db" "..."
//	2026-11-22T15:30:09Z node-1 Unblocked shop/db-0 PodDisruptionBudget
//	2026-11-22T15:30:09Z node-2 Evacuation node-2.volumes InProgress "3 of 6 volume(s) ... (3 remaining)"
//	2026-11-22T15:30:10Z node-1 Drained 10/10 "in 9s"
//
// A line is written only when something changed, so the output is the same
// however often the caller polls.
type Lines struct {
	last map[string]lineState
}

type lineState struct {
	state    string
	blockers map[string]string // pod -> reason
	hooks    map[string]string // evacuation -> phase and message
}

// NewLines starts with nothing printed.
func NewLines() *Lines { return &Lines{last: map[string]lineState{}} }

// Changes returns the lines for what changed since the last call.
func (l *Lines) Changes(t *Tracker, now time.Time) []string {
	ts := now.UTC().Format(time.RFC3339)
	var out []string
	for _, n := range t.Nodes() {
		if !n.Seen {
			continue
		}
		prev := l.last[n.Name]
		cur := lineState{state: stateLine(n, now), blockers: map[string]string{}, hooks: map[string]string{}}
		for _, h := range n.Hooks {
			line := h.Phase + " " + strconv.Quote(h.Message)
			cur.hooks[h.Name] = line
			if prev.hooks[h.Name] != line {
				out = append(out, fmt.Sprintf("%s %s Evacuation %s %s", ts, n.Name, h.Name, line))
			}
		}
		for _, b := range n.Blockers {
			cur.blockers[b.Pod] = b.Reason
			if prev.blockers[b.Pod] != b.Reason {
				holder := b.Holder
				if holder == "" {
					holder = "-"
				}
				out = append(out, fmt.Sprintf("%s %s Blocked %s %s %s %s", ts, n.Name, b.Pod, b.Reason, strconv.Quote(holder), strconv.Quote(b.Detail)))
			}
		}
		var cleared []string
		for pod, reason := range prev.blockers {
			if _, still := cur.blockers[pod]; !still {
				cleared = append(cleared, pod+" "+reason)
			}
		}
		sort.Strings(cleared)
		for _, c := range cleared {
			out = append(out, fmt.Sprintf("%s %s Unblocked %s", ts, n.Name, c))
		}
		if cur.state != prev.state {
			out = append(out, ts+" "+n.Name+" "+cur.state)
		}
		l.last[n.Name] = cur
	}
	return out
}

// stateLine is "Phase evicted/total" with a quoted note when there is one.
// It leaves out anything that changes with the clock alone.
func stateLine(n *Node, now time.Time) string {
	s := fmt.Sprintf("%s %d/%d", n.Phase, n.Evicted, n.Total)
	switch {
	case n.Cancelled:
		return "Cancelled " + fmt.Sprintf("%d/%d", n.Evicted, n.Total) + " " + strconv.Quote("the request was withdrawn")
	case n.Ended() && !n.End.IsZero():
		note := "in " + Duration(n.Took(now))
		if n.Waiting != "" {
			note += ": " + n.Waiting
		}
		return s + " " + strconv.Quote(note)
	case n.Waiting != "":
		return s + " " + strconv.Quote(n.Waiting)
	}
	return s
}
