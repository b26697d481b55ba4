package cli

import (
	"encoding/json"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
)

// TestOutputsAsKubectl: status, plan and explain print as kubectl get
// does, through cli-runtime's printers: -o name, jsonpath=, custom-columns=,
// -l on nodes, and for named nodes without a drain an error line each,
// after what exists is printed.
func TestOutputsAsKubectl(t *testing.T) {
	c := testenv.Start(t)
	testenv.Controller(t, c)
	nodes := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "cli-out", Count: 2, Labels: map[string]string{"pool": "cli-out"}})
	alice := user{t: t, kubeconfig: c.Kubeconfig}
	drained, idle := nodes[0], nodes[1]
	alice.must(ExitOK, "drain", drained, "--wait-timeout", "2m")
	t.Cleanup(func() { alice.vacate("cancel", drained) })

	out := alice.must(ExitOK, "status", "-l", "pool=cli-out")
	if !regexp.MustCompile(`(?m)^NODE\s+PHASE\s+EVICTED/TOTAL\s+BLOCKED\s+REQUESTERS\s+AGE$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^`+drained+`\s+Drained\s+0/0\s+0\s+cli:\S+\s+\d+s$`).MatchString(out) || strings.Contains(out, idle) {
		t.Errorf("status -l pool=cli-out:\n%s", out)
	}
	if out := alice.must(ExitOK, "status", "-l", "pool=cli-out", "-o", "wide"); !regexp.MustCompile(`(?m)^NODE\s+.*\s+MODE\s+POLICY\s+TOOK\s+WHY$`).MatchString(out) ||
		!strings.Contains(out, "(built-in)") {
		t.Errorf("status -o wide:\n%s", out)
	}
	checkKubectlGetNodeDrains(t, c, drained)
	if out := alice.must(ExitOK, "status", "-l", "pool=cli-out", "-o", "name"); out != "nodedrain.vacate.dev/"+drained+"\n" {
		t.Errorf("status -o name: %q", out)
	}
	if out := alice.must(ExitOK, "status", drained, "-o", "jsonpath={.status.phase}"); out != "Drained" {
		t.Errorf("status -o jsonpath: %q", out)
	}
	out = alice.must(ExitOK, "status", "-l", "pool=cli-out", "-o", "custom-columns=NODE:.metadata.name,PHASE:.status.phase,MISSING:.status.nothing")
	if !regexp.MustCompile(`(?m)^NODE\s+PHASE\s+MISSING\n` + drained + `\s+Drained\s+<none>\n$`).MatchString(out) {
		t.Errorf("status -o custom-columns:\n%s", out)
	}

	// What exists, then an error line for each node without a drain.
	code, out, errOut := alice.vacate("status", drained, idle, "no-such-node")
	if code != ExitError || !strings.Contains(out, drained) || strings.Count(errOut, "error: ") != 2 ||
		!strings.Contains(errOut, "node "+idle+" has no drain") || !strings.Contains(errOut, `node "no-such-node" not found`) {
		t.Errorf("status of a drain, a node without one and no node: exit %d\n%s\n%s", code, out, errOut)
	}

	if out := alice.must(ExitOK, "plan", idle, "-o", "jsonpath={.mode}"); out != "Maintenance" {
		t.Errorf("plan -o jsonpath: %q", out)
	}
	out = alice.must(ExitOK, "plan", "-l", "pool=cli-out", "-o", "custom-columns=NODE:.node,MODE:.mode")
	if !regexp.MustCompile(`(?m)^NODE\s+MODE$`).MatchString(out) || strings.Count(out, "Maintenance") != 2 {
		t.Errorf("plan -o custom-columns:\n%s", out)
	}
	if out := alice.must(ExitOK, "plan", idle, "-o", "name"); out != "node/"+idle+"\n" {
		t.Errorf("plan -o name: %q", out)
	}

	out = alice.must(ExitOK, "explain", drained, "-o", "json")
	var e struct {
		Kind, Node, State string
		Findings          []any
	}
	if err := json.Unmarshal([]byte(out), &e); err != nil || e.Kind != "DrainExplanation" || e.Node != drained || !strings.Contains(e.State, "Drained") {
		t.Errorf("explain -o json: %v %+v\n%s", err, e, out)
	}
	if out := alice.must(ExitOK, "explain", drained, "-o", "name"); out != "nodedrain.vacate.dev/"+drained+"\n" {
		t.Errorf("explain -o name: %q", out)
	}
	out = alice.must(ExitOK, "explain", "-l", "pool=cli-out", "-o", "custom-columns=NODE:.metadata.name,STATE:.state")
	if !regexp.MustCompile(`(?m)^`+drained+`\s+.*Drained`).MatchString(out) || strings.Contains(out, idle) {
		t.Errorf("explain -l -o custom-columns (the node without a drain left out):\n%s", out)
	}
}

// checkKubectlGetNodeDrains (issue 44): kubectl get nodedrains, through the
// CRD's printer columns, shows the phase, the mode and the requester, and
// no NODE column repeating NAME; -o wide lists every requester.
func checkKubectlGetNodeDrains(t *testing.T, c *devcluster.Cluster, drained string) {
	t.Helper()
	kubectl := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(c.Binaries[devcluster.Kubectl], append(args, "--kubeconfig", c.Kubeconfig)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	out := kubectl("get", "nodedrains", drained)
	if !regexp.MustCompile(`(?m)^NAME\s+PHASE\s+MODE\s+REQUESTER\s+EVICTED/TOTAL\s+BLOCKED\s+AGE$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^`+drained+`\s+Drained\s+Maintenance\s+`+admin+`\s`).MatchString(out) || strings.Contains(out, "NODE") {
		t.Errorf("kubectl get nodedrains:\n%s", out)
	}
	if out := kubectl("get", "nodedrains", drained, "-o", "wide"); !regexp.MustCompile(`REQUESTERS\n.*\[\{.*"name":"` + admin + `"`).MatchString(out) {
		t.Errorf("kubectl get nodedrains -o wide:\n%s", out)
	}
}
