// Package ci checks the GitHub workflows of .github/workflows: that `make
// lint-workflows` (in `make verify`) fails on a broken workflow, that the
// workflows keep to their powers (no secret and no write where a pull
// request runs, a release only from a version tag), and that the commands
// the docs give for a published release are what the release workflow
// publishes. It starts no cluster.
package ci

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// root is the repository, two levels up from this package.
const root = "../.."

// TestLintWorkflowsFailsOnBrokenOnes runs `make lint-workflows` as `make
// verify` runs it, with the pinned actionlint built afresh: it passes on
// the repository's workflows, and fails on each broken workflow of
// testdata/broken, naming each mistake, so the check in make verify can
// fail.
func TestLintWorkflowsFailsOnBrokenOnes(t *testing.T) {
	tools := t.TempDir()
	lint := func(workflows ...string) (string, error) {
		args := []string{"--no-print-directory", "-C", root, "lint-workflows", "TOOLS_BIN=" + tools}
		if len(workflows) > 0 {
			args = append(args, "WORKFLOWS="+strings.Join(workflows, " "))
		}
		out, err := exec.Command("make", args...).CombinedOutput()
		return string(out), err
	}

	out, err := lint()
	if err != nil {
		t.Fatalf("make lint-workflows fails on .github/workflows: %v\n%s", err, out)
	}
	for _, w := range realWorkflows(t) {
		if !strings.Contains(out, filepath.ToSlash(filepath.Join(".github/workflows", filepath.Base(w)))) {
			t.Errorf("make lint-workflows did not lint %s:\n%s", w, out)
		}
	}

	broken := map[string][]string{
		// A misspelt event, an unknown property of a context, a job needing
		// one that does not exist, a string where a number goes.
		"broken.yml": {`unknown Webhook event "pull_requests"`, `property "evnt" is not defined`,
			`job "test" needs job "verfy" which does not exist`, `[syntax-check]`},
		// A pull request's title in a script: script injection.
		"injection.yml": {`"github.event.pull_request.title" is potentially untrusted`},
	}
	for file, want := range broken {
		out, err := lint("test/ci/testdata/broken/" + file)
		var exit *exec.ExitError
		if !asExit(err, &exit) {
			t.Errorf("make lint-workflows passed on testdata/broken/%s:\n%s", file, out)
			continue
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("make lint-workflows on testdata/broken/%s does not say %q:\n%s", file, w, out)
			}
		}
	}
}

// asExit reports whether err is a command's non-zero exit.
func asExit(err error, exit **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*exit = e
	return ok && e.ExitCode() != 0
}

// realWorkflows are the repository's workflow files.
func realWorkflows(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, ext := range []string{"*.yml", "*.yaml"} {
		m, err := filepath.Glob(filepath.Join(root, ".github", "workflows", ext))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 2 {
		t.Fatalf(".github/workflows has %d workflows, want ci.yml and release.yml", len(files))
	}
	return files
}

// workflow is what the checks read of a workflow file.
type workflow struct {
	file string
	raw  string
	// on is each trigger and its filters (nil for none).
	on          map[string]any
	permissions any
	jobs        map[string]job
}

type job struct {
	// raw is the job as written (as JSON).
	raw         string
	If          string         `json:"if"`
	Environment any            `json:"environment"`
	Permissions any            `json:"permissions"`
	Env         map[string]any `json:"env"`
	Steps       []step         `json:"steps"`
}

type step struct {
	Uses string         `json:"uses"`
	Run  string         `json:"run"`
	With map[string]any `json:"with"`
}

// readWorkflow parses a workflow file.
func readWorkflow(t *testing.T, path string) workflow {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]json.RawMessage
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	w := workflow{file: filepath.Base(path), raw: string(raw), on: map[string]any{}}
	// sigs.k8s.io/yaml reads YAML 1.1, where the key on is the boolean true.
	on, ok := doc["on"]
	if !ok {
		on = doc["true"]
	}
	var trig any
	if err := json.Unmarshal(on, &trig); err != nil {
		t.Fatalf("%s: on: %v", path, err)
	}
	switch v := trig.(type) {
	case string:
		w.on[v] = nil
	case []any:
		for _, e := range v {
			w.on[e.(string)] = nil
		}
	case map[string]any:
		w.on = v
	}
	if p, ok := doc["permissions"]; ok {
		if err := json.Unmarshal(p, &w.permissions); err != nil {
			t.Fatal(err)
		}
	}
	var jobs map[string]json.RawMessage
	if err := json.Unmarshal(doc["jobs"], &jobs); err != nil {
		t.Fatalf("%s: jobs: %v", path, err)
	}
	w.jobs = map[string]job{}
	for name, raw := range jobs {
		var j job
		if err := json.Unmarshal(raw, &j); err != nil {
			t.Fatalf("%s: job %s: %v", path, name, err)
		}
		j.raw = string(raw)
		w.jobs[name] = j
	}
	return w
}
