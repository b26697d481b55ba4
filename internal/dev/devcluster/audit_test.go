package devcluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadAuditLeavesALineStillBeingWritten: the API server appends to its
// audit log while tests read it (CI saw "decoding audit event: unexpected
// end of JSON input" once). A last line without its newline yet is left for
// the next read; a complete line that is not JSON is still an error.
func TestReadAuditLeavesALineStillBeingWritten(t *testing.T) {
	dir := t.TempDir()
	complete := `{"stage":"ResponseComplete","verb":"create","objectRef":{"resource":"pods","subresource":"eviction","namespace":"ns","name":"web-1"},"responseStatus":{"code":201}}` + "\n"
	for _, tc := range []struct {
		name, text string
		events     int
		err        string
	}{
		{"a line being written", complete + `{"stage":"ResponseComplete","verb":"cre`, 1, ""},
		{"only a line being written", `{"stage":"Resp`, 0, ""},
		{"every line complete", complete + complete, 2, ""},
		{"a complete line that is not JSON", complete + "not json\n", 0, "decoding audit event"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if err := os.WriteFile(path, []byte(tc.text), 0o600); err != nil {
				t.Fatal(err)
			}
			events, err := ReadAudit(path)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("ReadAudit: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("ReadAudit error %v, want one saying %q", err, tc.err)
			case tc.err == "" && len(events) != tc.events:
				t.Errorf("%d events, want %d", len(events), tc.events)
			}
			if tc.err == "" && tc.events > 0 && SuccessfulEvictions(events)["ns/web-1"] != tc.events {
				t.Errorf("evictions %v", SuccessfulEvictions(events))
			}
		})
	}
}
