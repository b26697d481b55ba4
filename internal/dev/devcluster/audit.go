package devcluster

import (
	"bufio"
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

// ReadAudit returns the completed requests recorded in the audit log.
func ReadAudit(path string) ([]AuditEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening audit log: %w", err)
	}
	defer f.Close()
	var out []AuditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		var e AuditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("decoding audit event: %w", err)
		}
		if e.Stage == "ResponseComplete" {
			out = append(out, e)
		}
	}
	return out, sc.Err()
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
