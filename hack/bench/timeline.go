package main

import (
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// This file prints, with -timeline, where a drain's time goes: one PDB's
// budget (disruptionsAllowed over time, from the harness's watch) against
// the drainer's eviction calls and the API server's updates of the PDB's
// status that those calls make (from the audit log), and for the whole run
// the idle budget split by whether the drainer had a call of the PDB in
// flight, the calls by answer, and the status updates the API server made
// again after a conflict.

var timelinePDB = flag.String("timeline", "", "print each run's timeline of one PDB's budget against the drainer's eviction calls: "+
	"a PDB as namespace/name, or \"worst\" for the one with the most idle budget; \"\" prints none")

// apiServerUser is the API server's loopback identity: the Eviction API
// updates a PDB's status through it.
const apiServerUser = "system:apiserver"

// call is one eviction call of the drainer, or one update of a PDB's
// status by the API server.
type call struct {
	pod      string // namespace/name; the PDB's for a status update
	from, to time.Time
	code     int
}

// timelineCalls are the drainer's eviction calls and the API server's PDB
// status updates received in [from, to].
func timelineCalls(reqs []request, user string, from, to time.Time) (evictions, pdbUpdates []call) {
	for _, r := range reqs {
		if r.received.Before(from) || r.received.After(to) {
			continue
		}
		key := r.namespace + "/" + r.name
		switch {
		case r.user == user && r.eviction():
			evictions = append(evictions, call{pod: key, from: r.received, to: r.done, code: r.code})
		case r.user == apiServerUser && r.resource == "poddisruptionbudgets" && r.subresource == "status" && r.verb == "update":
			pdbUpdates = append(pdbUpdates, call{pod: key, from: r.received, to: r.done, code: r.code})
		}
	}
	return evictions, pdbUpdates
}

// idleSplit is a PDB's idle budget (budget.go: a disruption allowed while
// one of its pods waits) in [start, end], split by whether an eviction
// call of one of its pods was in flight: with one, the budget waits on
// the API server's answer (or on the drainer's bound of calls per PDB);
// without, on the drainer noticing.
func idleSplit(states []pdbState, ws []waiter, calls []call, start, end time.Time) (inFlight, none time.Duration) {
	mine := map[string]bool{}
	cuts := []time.Time{start, end}
	for _, w := range ws {
		mine[w.pod] = true
		cuts = append(cuts, w.from, w.until)
	}
	var ours []call
	for _, c := range calls {
		if mine[c.pod] {
			ours = append(ours, c)
			cuts = append(cuts, c.from, c.to)
		}
	}
	for _, s := range states {
		cuts = append(cuts, s.at)
	}
	cuts = window(cuts, start, end)
	for i := 0; i+1 < len(cuts); i++ {
		t, d := cuts[i], cuts[i+1].Sub(cuts[i])
		waiting := false
		for _, w := range ws {
			waiting = waiting || w.waiting(t)
		}
		if !waiting || allowedAt(states, t) <= 0 {
			continue
		}
		flying := false
		for _, c := range ours {
			flying = flying || (!t.Before(c.from) && t.Before(c.to))
		}
		if flying {
			inFlight += d
		} else {
			none += d
		}
	}
	return inFlight, none
}

// printTimeline prints the run's timeline when -timeline asks for one.
func printTimeline(out io.Writer, rec *recorder, waiters []waiter, reqs []request, user string, start, end time.Time) {
	if *timelinePDB == "" {
		return
	}
	states, cordoned, _ := rec.snapshot()
	evictions, updates := timelineCalls(reqs, user, start, end.Add(time.Second))
	byPDB := map[string][]waiter{}
	for _, w := range waiters {
		for _, p := range w.pdbs {
			byPDB[p] = append(byPDB[p], w)
		}
	}
	var accepted []evictionAt
	for _, c := range evictions {
		if c.code >= 200 && c.code < 300 {
			accepted = append(accepted, evictionAt{pod: c.pod, at: c.to})
		}
	}
	use := measureBudgets(states, waiters, accepted, start, end)
	var inFlight, none time.Duration
	pdbs := make([]string, 0, len(use.idle))
	for p := range use.idle {
		pdbs = append(pdbs, p)
		f, n := idleSplit(states[p], byPDB[p], evictions, start, end)
		inFlight, none = inFlight+f, none+n
	}
	sort.Slice(pdbs, func(i, j int) bool {
		return use.idle[pdbs[i]] > use.idle[pdbs[j]] || (use.idle[pdbs[i]] == use.idle[pdbs[j]] && pdbs[i] < pdbs[j])
	})
	codes := map[int]int{}
	first := time.Time{}
	for _, c := range evictions {
		codes[c.code]++
		if first.IsZero() || c.from.Before(first) {
			first = c.from
		}
	}
	conflicts := 0
	for _, u := range updates {
		if u.code == 409 {
			conflicts++
		}
	}
	fmt.Fprintf(out, "timeline: %d eviction calls by answer %v; the API server's PDB status updates: %d, %d of them conflicts (each costs its eviction a retry 500 ms later)\n",
		len(evictions), codes, len(updates), conflicts)
	if !first.IsZero() {
		fmt.Fprintf(out, "timeline: first eviction call %s after the start", ms(first.Sub(start)))
		if last := lastDrainCreated(reqs, start, first); !last.IsZero() {
			fmt.Fprintf(out, ", %s after the last NodeDrain's creation (%s after the start)", ms(first.Sub(last)), ms(last.Sub(start)))
		}
		fmt.Fprintln(out)
	}
	wall := end.Sub(start)
	fmt.Fprintf(out, "timeline: idle budget summed over %d PDBs %s (%.1f%% of wall each on average): %s with an eviction call of the PDB in flight, %s with none\n",
		len(pdbs), ms(inFlight+none), pct(inFlight+none, wall*time.Duration(max(len(pdbs), 1))), ms(inFlight), ms(none))
	pdb := *timelinePDB
	if pdb == "worst" {
		if len(pdbs) == 0 {
			return
		}
		pdb = pdbs[0]
	}
	printPDB(out, pdb, states[pdb], byPDB[pdb], cordoned, evictions, updates, start, end)
}

// printPDB prints one PDB's timeline, one line per change.
func printPDB(out io.Writer, pdb string, states []pdbState, ws []waiter, cordoned map[string]time.Time, evictions, updates []call, start, end time.Time) {
	type line struct {
		at   time.Time
		text string
	}
	mine := map[string]bool{}
	for _, w := range ws {
		mine[w.pod] = true
	}
	var lines []line
	nodes := map[string]bool{}
	for _, w := range ws {
		if n, ok := nodeOf(w, cordoned); ok && !nodes[n] {
			nodes[n] = true
			lines = append(lines, line{w.from, "cordoned " + n})
		}
	}
	waitingAt := func(t time.Time) int {
		n := 0
		for _, w := range ws {
			if w.waiting(t) {
				n++
			}
		}
		return n
	}
	for _, s := range states {
		if s.at.Before(start) || s.at.After(end) {
			continue
		}
		lines = append(lines, line{s.at, fmt.Sprintf("PDB allows %d (healthy %d, desired %d); %d pods wait", s.allowed, s.healthy, s.desired, waitingAt(s.at))})
	}
	for _, c := range evictions {
		if !mine[c.pod] {
			continue
		}
		lines = append(lines, line{c.from, "evict " + c.pod + " sent"},
			line{c.to, fmt.Sprintf("evict %s answered %d after %s", c.pod, c.code, ms(c.to.Sub(c.from)))})
	}
	for _, u := range updates {
		if u.pod == pdb {
			lines = append(lines, line{u.to, fmt.Sprintf("API server updates the PDB's status: %d", u.code)})
		}
	}
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].at.Before(lines[j].at) })
	inFlight, none := idleSplit(states, ws, evictions, start, end)
	fmt.Fprintf(out, "timeline of PDB %s (%d pods to move; idle budget %s with a call in flight, %s with none):\n", pdb, len(ws), ms(inFlight), ms(none))
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "  %9s  %s\n", ms(l.at.Sub(start)), l.text)
	}
	fmt.Fprint(out, b.String())
}

// nodeOf is the node of the waiter's pod, as the cordon that started its
// wait names it.
func nodeOf(w waiter, cordoned map[string]time.Time) (string, bool) {
	for n, at := range cordoned {
		if at.Equal(w.from) {
			return n, true
		}
	}
	return "", false
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

func pct(d, of time.Duration) float64 {
	if of <= 0 {
		return 0
	}
	return 100 * float64(d) / float64(of)
}

// lastDrainCreated is when the API server received the harness's last
// NodeDrain creation in [from, to]: the moment the batch was complete.
func lastDrainCreated(reqs []request, from, to time.Time) time.Time {
	var last time.Time
	for _, r := range reqs {
		if r.user == adminUser && r.verb == "create" && r.resource == "nodedrains" && r.accepted() &&
			!r.received.Before(from) && !r.received.After(to) && r.received.After(last) {
			last = r.received
		}
	}
	return last
}
