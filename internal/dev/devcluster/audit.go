package devcluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"time"
)

// AuditEvent is the part of an API server audit event that tests read.
type AuditEvent struct {
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	// UserAgent tells apart processes that run as the same user (two
	// controller replicas).
	UserAgent string `json:"userAgent"`
	User      struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		APIGroup    string `json:"apiGroup"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	Stage    string    `json:"stage"`
	Received time.Time `json:"requestReceivedTimestamp"`
}

// Succeeded reports whether the request was answered with a 2xx code.
func (e AuditEvent) Succeeded() bool {
	return e.ResponseStatus != nil && e.ResponseStatus.Code >= 200 && e.ResponseStatus.Code < 300
}

// ReadAudit returns the completed requests recorded in the audit log. The
// API server writes it while tests read it: a last line still being written
// (no newline yet) is left for the next read; any complete line that does
// not decode is an error.
func ReadAudit(path string) ([]AuditEvent, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("opening audit log: %w", err)
	}
	if i := bytes.LastIndexByte(data, '\n'); i < len(data)-1 {
		data = data[:i+1] // i is -1 when no line is complete yet
	}
	var out []AuditEvent
	for _, line := range bytes.Split(data, []byte{'\n'}) {
		if len(line) == 0 {
			continue
		}
		var e AuditEvent
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("decoding audit event: %w", err)
		}
		if e.Stage == "ResponseComplete" {
			out = append(out, e)
		}
	}
	return out, nil
}

// DryRun says whether the request was a dry run (endpoint-aware eviction
// asks the PDBs with one before it takes a pod out of service).
func (e AuditEvent) DryRun() bool {
	u, err := url.Parse(e.RequestURI)
	return err == nil && u.Query().Get("dryRun") != ""
}

// SuccessfulEvictions counts accepted evictions per namespace/name of pod
// (dry runs left out).
func SuccessfulEvictions(events []AuditEvent) map[string]int {
	n := map[string]int{}
	for _, e := range events {
		if e.Verb == "create" && e.ObjectRef != nil && e.ObjectRef.Resource == "pods" &&
			e.ObjectRef.Subresource == "eviction" && e.Succeeded() && !e.DryRun() {
			n[e.ObjectRef.Namespace+"/"+e.ObjectRef.Name]++
		}
	}
	return n
}
