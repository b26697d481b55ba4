package sidecar

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseConfigDefaults(t *testing.T) {
	c, err := ParseConfig([]byte(`
stateDir: /var/lib/vacate-hook
maintenance:
  evacuate:
  - command: [true]
  status: {command: ["/bin/echo", "Completed"]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != ":7070" || c.Path != "/evacuate" || c.statusInterval != 5*time.Second || c.retryInterval != 10*time.Second {
		t.Errorf("defaults: listen %q path %q status %s retry %s", c.Listen, c.Path, c.statusInterval, c.retryInterval)
	}
	if ev := c.Maintenance.Evacuate[0]; ev.timeout != DefaultTimeout || !strings.HasSuffix(ev.path, "/true") {
		t.Errorf("evacuate: timeout %s, path %q", ev.timeout, ev.path)
	}
	if c.Maintenance.Status.timeout != DefaultStatusTimeout {
		t.Errorf("status timeout %s", c.Maintenance.Status.timeout)
	}
	if set, steps := c.stepSet(Decommission); set != "maintenance" || steps != c.Maintenance {
		t.Errorf("without decommission steps, a Decommission runs %s", set)
	}
}

// TestParseConfigRefusesBadInput: each bad configuration is refused with a
// message that names the field.
func TestParseConfigRefusesBadInput(t *testing.T) {
	const ok = "stateDir: /s\nmaintenance: {evacuate: [{command: [true]}]}\n"
	plain := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, config, want string }{
		{"empty", "", "the configuration is empty"},
		{"not YAML", "{", "does not decode"},
		{"unknown field", ok + "stateDri: /x\n", `unknown field "stateDri"`},
		{"unknown field in a command", "stateDir: /s\nmaintenance: {evacuate: [{command: [true], timeot: 1s}]}\n", `unknown field "timeot"`},
		{"command as a string", "stateDir: /s\nmaintenance: {evacuate: [{command: \"rabbitmq-upgrade drain\"}]}\n", "command"},
		{"no state dir", "maintenance: {evacuate: [{command: [true]}]}\n", "stateDir: required"},
		{"relative state dir", "stateDir: state\nmaintenance: {evacuate: [{command: [true]}]}\n", "stateDir: \"state\" is not an absolute path"},
		{"no maintenance", "stateDir: /s\n", "maintenance: required"},
		{"no evacuate", "stateDir: /s\nmaintenance: {cancel: [{command: [true]}]}\n", "maintenance.evacuate: required"},
		{"empty argv", "stateDir: /s\nmaintenance: {evacuate: [{command: []}]}\n", "maintenance.evacuate[0].command: required"},
		{"not in PATH", "stateDir: /s\nmaintenance: {evacuate: [{command: [true]}, {command: [no-such-program-here]}]}\n", `maintenance.evacuate[1].command[0]: "no-such-program-here" is not in PATH`},
		{"relative program", "stateDir: /s\nmaintenance: {evacuate: [{command: [bin/x]}]}\n", "maintenance.evacuate[0].command[0]: \"bin/x\": a program with a slash must be an absolute path"},
		{"not executable", "stateDir: /s\nmaintenance: {evacuate: [{command: [" + plain + "]}]}\n", `maintenance.evacuate[0].command[0]: "` + plain + `" is not an executable file`},
		{"bad timeout", "stateDir: /s\nmaintenance: {evacuate: [{command: [true], timeout: soon}]}\n", `maintenance.evacuate[0].timeout: "soon" is not a duration`},
		{"zero timeout", "stateDir: /s\nmaintenance: {evacuate: [{command: [true], timeout: 0s}]}\n", "maintenance.evacuate[0].timeout: \"0s\": must be more than zero"},
		{"huge timeout", "stateDir: /s\nmaintenance: {evacuate: [{command: [true], timeout: 48h}]}\n", "must be at most 24h0m0s"},
		{"status timeout", "stateDir: /s\nmaintenance: {evacuate: [{command: [true]}], status: {command: [true], timeout: -1s}}\n", "maintenance.status.timeout"},
		{"cancel", "stateDir: /s\nmaintenance: {evacuate: [{command: [true]}], cancel: [{command: [nope-nope]}]}\n", "maintenance.cancel[0].command[0]"},
		{"decommission without evacuate", ok + "decommission: {status: {command: [true]}}\n", "decommission.evacuate: required"},
		{"bad interval", ok + "statusInterval: often\n", "statusInterval: \"often\""},
		{"bad retry", ok + "retryInterval: 1h\n", "retryInterval: \"1h\": must be at most 10m0s"},
		{"bad listen", ok + "listen: \"7070\"\n", "listen: \"7070\" is not host:port"},
		{"bad listen host", ok + "listen: \"pod:7070\"\n", "listen: \"pod:7070\": the host must be an IP address"},
		{"bad port", ok + "listen: \":70700\"\n", "the port must be a number from 1 to 65535"},
		{"metrics on the protocol's port", ok + "metricsListen: \"127.0.0.1:7070\"\n", "metricsListen: \"127.0.0.1:7070\": the protocol's port"},
		{"bad metrics port", ok + "metricsListen: \":0\"\n", "metricsListen: \":0\": the port must be a number"},
		{"bad path", ok + "path: evacuate\n", "path: \"evacuate\" must start with /"},
		{"path with query", ok + "path: /e?x=1\n", "path: \"/e?x=1\": only a path"},
		{"path with dots", ok + "path: /a/../b\n", "a path with a .. segment"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.config))
			if err == nil {
				t.Fatalf("accepted, want refused with %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to say %q", err, tc.want)
			}
		})
	}
}

func TestParseStatus(t *testing.T) {
	for _, tc := range []struct {
		out, state, message, err string
		remaining                int64
	}{
		{out: `{"state":"InProgress","message":"3 queues led here","remaining":3}`, state: "InProgress", message: "3 queues led here", remaining: 3},
		{out: `{"state":"Completed","message":"leads no queue","remaining":0}`, state: "Completed", message: "leads no queue"},
		{out: `{"state":"Completed","leader":"x"}`, state: "Completed"},
		{out: "Completed\n", state: "Completed"},
		{out: "InProgress\nthe primary is still\nhere\n", state: "InProgress", message: "the primary is still here"},
		{out: "Failed\nswitchover refused", state: "Failed", message: "switchover refused"},
		{out: "", err: "printed nothing"},
		{out: "done", err: `printed state "done"`},
		{out: "completed", err: `printed state "completed"`},
		{out: "Completed yes", err: `printed state "Completed yes"`},
		{out: `{"state":"Completed","remaining":2}`, err: "Completed with 2 remaining"},
		{out: `{"state":"InProgress","remaining":-1}`, err: "remaining -1"},
		{out: `{"state":"Completed"`, err: "does not decode"},
		{out: `{"state":"InProgress"}{"state":"Completed"}`, err: "more than one JSON object"},
		{out: `{"state":7}`, err: "does not decode"},
		{out: `{"message":"no state"}`, err: `printed state ""`},
	} {
		a, err := parseStatus(tc.out)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.out, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.out, err)
			continue
		}
		var rem int64
		if a.Remaining != nil {
			rem = *a.Remaining
		}
		if a.State != tc.state || a.Message != tc.message || rem != tc.remaining {
			t.Errorf("%q: got %+v (remaining %d)", tc.out, a, rem)
		}
	}
}
