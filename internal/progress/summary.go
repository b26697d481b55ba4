package progress

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Summary writes a table: per node the result, pods evicted, time taken and
// the blockers met (with the pods they held and for how long).
func (t *Tracker) Summary(w io.Writer, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tRESULT\tEVICTED\tTOOK\tBLOCKERS MET")
	for _, n := range t.Nodes() {
		result := string(n.Phase)
		switch {
		case n.Cancelled:
			result = "Cancelled"
		case !n.Seen:
			result = "NotStarted"
		case !n.Ended():
			result = "Running (" + result + ")"
		}
		met := make([]string, 0, len(n.Met))
		for _, k := range n.MetKeys() {
			m := n.Met[k]
			met = append(met, fmt.Sprintf("%s (%d pod(s), %s)", k, len(m.Pods), Duration(m.Held(now))))
		}
		if len(met) == 0 {
			met = append(met, "-")
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%s\t%s\n", n.Name, result, n.Evicted, n.Total, Duration(n.Took(now)), strings.Join(met, "; "))
	}
	return tw.Flush()
}

// Report is the record of a set of drains, for files and scripts.
type Report struct {
	Started  time.Time    `json:"started"`
	Finished time.Time    `json:"finished"`
	Nodes    []NodeReport `json:"nodes"`
}

// NodeReport is one node's drain in a Report.
type NodeReport struct {
	Node        string          `json:"node"`
	Result      string          `json:"result"`
	Evicted     int32           `json:"evicted"`
	Total       int32           `json:"total"`
	Start       *time.Time      `json:"start,omitempty"`
	End         *time.Time      `json:"end,omitempty"`
	TookSeconds float64         `json:"tookSeconds"`
	Message     string          `json:"message,omitempty"`
	BlockersMet []BlockerReport `json:"blockersMet,omitempty"`
}

// BlockerReport is one blocker met.
type BlockerReport struct {
	Holder      string   `json:"holder"`
	Pods        []string `json:"pods"`
	HeldSeconds float64  `json:"heldSeconds"`
}

// Report returns the record of the drains as seen until now.
func (t *Tracker) Report(now time.Time) Report {
	r := Report{Started: t.start.UTC(), Finished: now.UTC()}
	for _, n := range t.Nodes() {
		nr := NodeReport{Node: n.Name, Result: string(n.Phase), Evicted: n.Evicted, Total: n.Total,
			TookSeconds: n.Took(now).Seconds(), Message: n.Waiting}
		if n.Cancelled {
			nr.Result = "Cancelled"
		}
		if !n.Start.IsZero() {
			s := n.Start.UTC()
			nr.Start = &s
		}
		if !n.End.IsZero() {
			e := n.End.UTC()
			nr.End = &e
		}
		for _, k := range n.MetKeys() {
			m := n.Met[k]
			pods := make([]string, 0, len(m.Pods))
			for p := range m.Pods {
				pods = append(pods, p)
			}
			sort.Strings(pods)
			nr.BlockersMet = append(nr.BlockersMet, BlockerReport{Holder: k, Pods: pods, HeldSeconds: m.Held(now).Seconds()})
		}
		r.Nodes = append(r.Nodes, nr)
	}
	return r
}

// WriteJSON writes the report as indented JSON.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
