package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// request is one API request as the audit log records it.
type request struct {
	id          string
	user        string
	verb        string
	resource    string
	subresource string
	namespace   string
	name        string
	code        int       // 0 while only the response's start is recorded
	received    time.Time // requestReceivedTimestamp
	done        time.Time // stageTimestamp of the last stage seen
}

// eviction reports whether the request asked the Eviction API to evict a pod.
func (r request) eviction() bool {
	return r.verb == "create" && r.resource == "pods" && r.subresource == "eviction"
}

// accepted reports whether the API server answered 2xx.
func (r request) accepted() bool { return r.code >= 200 && r.code < 300 }

// auditLine is the part of an audit event (audit.k8s.io/v1, level Metadata)
// the benchmark reads.
type auditLine struct {
	AuditID string `json:"auditID"`
	Stage   string `json:"stage"`
	Verb    string `json:"verb"`
	User    struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	Received time.Time `json:"requestReceivedTimestamp"`
	StageAt  time.Time `json:"stageTimestamp"`
}

// parseAudit reads audit events, one JSON object a line, and returns one
// request per audit ID (a watch is recorded at ResponseStarted and again at
// ResponseComplete; it counts once), in the order they were received.
func parseAudit(r io.Reader) ([]request, error) {
	byID := map[string]*request{}
	var order []*request
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		var l auditLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("decoding audit event: %w", err)
		}
		req, ok := byID[l.AuditID]
		if !ok {
			req = &request{id: l.AuditID, user: l.User.Username, verb: l.Verb, received: l.Received}
			if o := l.ObjectRef; o != nil {
				req.resource, req.subresource, req.namespace, req.name = o.Resource, o.Subresource, o.Namespace, o.Name
			}
			byID[l.AuditID] = req
			order = append(order, req)
		}
		if l.ResponseStatus != nil {
			req.code = l.ResponseStatus.Code
		}
		req.done = l.StageAt
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading audit log: %w", err)
	}
	out := make([]request, len(order))
	for i, r := range order {
		out[i] = *r
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].received.Before(out[j].received) })
	return out, nil
}

// readAudit parses the API server's audit log and its rotated backups
// (audit-<time>.log beside it).
func readAudit(path string) ([]request, error) {
	backups, err := filepath.Glob(filepath.Join(filepath.Dir(path), "audit-*.log"))
	if err != nil {
		return nil, fmt.Errorf("listing audit logs: %w", err)
	}
	var all []request
	for _, p := range append(backups, path) {
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("opening audit log: %w", err)
		}
		reqs, err := parseAudit(f)
		_ = f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		all = append(all, reqs...)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].received.Before(all[j].received) })
	return all, nil
}

// byUser returns the requests of one user received in [from, to].
func byUser(reqs []request, user string, from, to time.Time) []request {
	var out []request
	for _, r := range reqs {
		if r.user == user && !r.received.Before(from) && !r.received.After(to) {
			out = append(out, r)
		}
	}
	return out
}

// countBy counts requests by verb and resource ("create pods/eviction").
func countBy(reqs []request) map[string]int {
	n := map[string]int{}
	for _, r := range reqs {
		res := r.resource
		if res == "" {
			res = "(non-resource URL)"
		}
		if r.subresource != "" {
			res += "/" + r.subresource
		}
		n[r.verb+" "+res]++
	}
	return n
}

// eventWrites counts the requests that write Kubernetes Events (core or
// events.k8s.io): creates, and the patches that count a series' repeats.
func eventWrites(reqs []request) int {
	n := 0
	for _, r := range reqs {
		if r.resource == "events" && (r.verb == "create" || r.verb == "patch" || r.verb == "update") {
			n++
		}
	}
	return n
}
