package ci

import (
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// project is the repository the release workflow may run in (forks hold
// neither its key nor its registry).
const project = "vacate-dev/vacate"

// releaseGuard is the condition every job with a write permission or a
// secret runs under.
const releaseGuard = "github.repository == '" + project + "'"

// unsafeTriggers run with the base repository's token and secrets on
// what a fork's pull request wrote.
var unsafeTriggers = []string{"pull_request_target", "workflow_run"}

// pinnedUses is an action named by the commit it runs, with its version
// as a comment: `uses: owner/repo@<40 hex> # vX.Y.Z`.
var pinnedUses = regexp.MustCompile(`^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$`)

// usesLine is a `uses:` line and its trailing comment.
var usesLine = regexp.MustCompile(`(?m)^\s*(?:-\s+)?uses:\s*(\S+)\s*(#\s*v\S+)?`)

// untrustedInScript are the contexts a pull request's author writes:
// pasted into a script, they run as shell.
var untrustedInScript = regexp.MustCompile(`\$\{\{[^}]*(github\.event\.|github\.head_ref)`)

// findings are what a workflow does beyond its powers (docs/dev/security.md,
// "CI and releases").
func findings(w workflow) []string {
	var f []string
	add := func(format string, a ...any) { f = append(f, w.file+": "+fmt.Sprintf(format, a...)) }
	for _, tr := range unsafeTriggers {
		if _, ok := w.on[tr]; ok {
			add("trigger %s runs a fork's code with the repository's token and secrets: use pull_request", tr)
		}
	}
	if w.permissions == nil {
		add("no top-level permissions: the token gets the repository's default, which may write")
	}
	release := releaseTrigger(w.on)
	for _, name := range slices.Sorted(maps.Keys(w.jobs)) {
		j := w.jobs[name]
		writes := append(writeScopes(w.permissions), writeScopes(j.Permissions)...)
		secrets := strings.Contains(j.raw, "secrets.")
		switch {
		case !release && len(writes) > 0:
			add("job %s: %s: write, on %s: only the release workflow, on a version tag, writes", name, strings.Join(writes, ", "), triggers(w.on))
		case !release && secrets:
			add("job %s reads secrets on %s: only the release workflow, on a version tag, holds secrets", name, triggers(w.on))
		case release && (len(writes) > 0 || secrets):
			if j.If != releaseGuard {
				add("job %s writes or reads secrets without `if: %s` (forks run it too)", name, releaseGuard)
			}
			if j.Environment != "release" {
				add("job %s writes or reads secrets outside the environment release (its reviewers and tag rule)", name)
			}
		}
		for i, s := range j.Steps {
			if release && (strings.HasPrefix(s.Uses, "actions/cache@") ||
				strings.HasPrefix(s.Uses, "actions/setup-go@") && s.With["cache"] != false) {
				add("job %s step %d: a release restores a cache (anything another run wrote): build from the source and the module proxy", name, i+1)
			}
			if strings.HasPrefix(s.Uses, "actions/checkout@") && s.With["persist-credentials"] != false {
				add("job %s step %d: actions/checkout without persist-credentials: false leaves the token in the checkout", name, i+1)
			}
			if untrustedInScript.MatchString(s.Run) {
				add("job %s step %d: a pull request's own text in a script (pass it through env)", name, i+1)
			}
		}
	}
	for _, m := range usesLine.FindAllStringSubmatch(w.raw, -1) {
		uses, comment := m[1], m[2]
		if strings.HasPrefix(uses, "./") {
			continue
		}
		if !pinnedUses.MatchString(uses) || comment == "" {
			add("uses: %s is not pinned to a commit with its version as a comment (owner/repo@<sha> # vX.Y.Z)", uses)
		}
	}
	return f
}

// releaseTrigger: the workflow runs on pushed tags and nothing else.
func releaseTrigger(on map[string]any) bool {
	if len(on) != 1 {
		return false
	}
	push, ok := on["push"].(map[string]any)
	if !ok || len(push) != 1 {
		return false
	}
	tags, ok := push["tags"].([]any)
	return ok && len(tags) > 0
}

// writeScopes are the scopes a permissions value grants write on.
func writeScopes(p any) []string {
	switch v := p.(type) {
	case string:
		if v == "write-all" {
			return []string{"all"}
		}
	case map[string]any:
		var w []string
		for _, k := range slices.Sorted(maps.Keys(v)) {
			if v[k] == "write" {
				w = append(w, k)
			}
		}
		return w
	}
	return nil
}

func triggers(on map[string]any) string {
	return strings.Join(slices.Sorted(maps.Keys(on)), ", ")
}

// TestWorkflowsKeepTheirPowers: no workflow runs on pull_request_target or
// workflow_run; every workflow sets its token's permissions; only the
// release workflow, run by pushed tags alone, writes or reads secrets, and
// its jobs that do run only in this repository and in the environment
// release; every action is pinned to a commit; no checkout keeps the token;
// no script pastes a pull request's text; a release restores no cache. The same checks find each
// mistake of testdata/unsafe, so they can fail.
func TestWorkflowsKeepTheirPowers(t *testing.T) {
	var releases []string
	for _, path := range realWorkflows(t) {
		w := readWorkflow(t, path)
		for _, f := range findings(w) {
			t.Error(f)
		}
		if releaseTrigger(w.on) {
			releases = append(releases, w.file)
		}
	}
	if !slices.Equal(releases, []string{"release.yml"}) {
		t.Errorf("workflows run by version tags: %v, want release.yml alone", releases)
	}
	ci := readWorkflow(t, filepath.Join(root, ".github/workflows/ci.yml"))
	if _, ok := ci.on["pull_request"]; !ok {
		t.Errorf("ci.yml runs on %s, not on pull requests", triggers(ci.on))
	}

	unsafe := map[string][]string{
		"pr-target.yml": {"trigger pull_request_target"},
		"pr-writes.yml": {"job test: packages: write, on pull_request", "persist-credentials: false"},
		"no-permissions.yml": {"no top-level permissions", "uses: actions/checkout@v7 is not pinned",
			"uses: actions/setup-go@b7ad1dad31e06c5925ef5d2fc7ad053ef454303e is not pinned"},
		"release-anywhere.yml": {"job release: contents: write, on push, workflow_dispatch"},
		"release-unguarded.yml": {"job release writes or reads secrets without `if: " + releaseGuard,
			"outside the environment release", "job release step 2: a release restores a cache"},
		"pr-secrets.yml": {"job test reads secrets on pull_request", "a pull request's own text in a script"},
	}
	for file, want := range unsafe {
		got := findings(readWorkflow(t, filepath.Join("testdata", "unsafe", file)))
		for _, w := range want {
			if !slices.ContainsFunc(got, func(f string) bool { return strings.Contains(f, w) }) {
				t.Errorf("testdata/unsafe/%s: no finding says %q; found %q", file, w, got)
			}
		}
	}
}

// tagCheck is the release workflow's test of the tag, in bash.
var tagCheck = regexp.MustCompile(`\[\[ "\$VERSION" =~ (\S+) \]\]`)

// TestReleaseTagCheckRefusesWhatIsNotAVersion: the tag reaches make's
// command line (and make's recipe, unquoted), so the release workflow
// first checks, in bash as the runner runs it, that it is a version:
// what make release accepts passes, anything else (a shell command
// among them) is refused before make.
func TestReleaseTagCheckRefusesWhatIsNotAVersion(t *testing.T) {
	w := readWorkflow(t, filepath.Join(root, ".github/workflows/release.yml"))
	var re string
	for _, s := range w.jobs["release"].Steps {
		if m := tagCheck.FindStringSubmatch(s.Run); m != nil {
			re = m[1]
		}
	}
	if re == "" {
		t.Fatal(`release.yml's job release has no step testing [[ "$VERSION" =~ ... ]]`)
	}
	for version, want := range map[string]bool{
		"v0.1.0": true, "v1.22.333": true, "v1.2.3-rc.1": true, "v2.0.0-alpha.0": true,
		"v1.2": false, "1.2.3": false, "v01.2.3": false, "v1.2.3;id": false, "v1.2.3$(id)": false,
		"v1.2.3-rc.1`id`": false, "v1.2.3 x": false, "v1.2.3\nid": false, "": false,
	} {
		err := exec.Command("bash", "-c", `[[ "$1" =~ $2 ]]`, "check", version, re).Run()
		if got := err == nil; got != want {
			t.Errorf("release.yml's check of the tag %q: accepted %v, want %v", version, got, want)
		}
	}
}
