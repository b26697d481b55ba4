package ci

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/vacate-dev/vacate/internal/dev/release"
)

// fenced is a fenced block of Markdown: its language and its text.
var fenced = regexp.MustCompile("(?ms)^```(\\w*)\n(.*?)^```$")

// makeTarget is a make command's first target.
var makeTarget = regexp.MustCompile(`(?m)^make ([\w-]+)`)

// publishedRef is what exists only once a release is published: the
// project's registry, its release page, krew's index.
var publishedRef = regexp.MustCompile(`oci://\S+|ghcr\.io/\S+|https://github\.com/\S+/releases/download/\S+|krew install \S+`)

// section is the text of a Markdown file under the heading, to the next
// heading of the same level or higher (outside fenced blocks, where a line
// may start with #).
func section(t *testing.T, doc, heading string) string {
	t.Helper()
	level := len(strings.Fields(heading)[0]) // "##" is 2
	var b strings.Builder
	in, fence := false, false
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(l, "```") {
			fence = !fence
		}
		if !fence && strings.HasPrefix(l, "#") {
			h := len(l) - len(strings.TrimLeft(l, "#"))
			if in && h <= level {
				break
			}
			if l == heading {
				in = true
				continue
			}
		}
		if in {
			b.WriteString(l + "\n")
		}
	}
	if !in {
		t.Fatalf("no heading %q", heading)
	}
	return b.String()
}

// commands are the lines of a block that are not comments, without a
// trailing comment.
func commands(block string) []string {
	var out []string
	for _, l := range strings.Split(block, "\n") {
		if i := strings.Index(l, " # "); i >= 0 {
			l = l[:i]
		}
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// TestPublishedCommandsAreWhatTheReleasePublishes: the commands README and
// docs/install.md give for a published release name what the release
// workflow publishes (its REGISTRY, the release page of the repository it
// runs in, as the release's files name it), are never run as a checkout's
// commands (```text, not ```sh, which test/install runs), and README's are
// install.md's; README's commands that work today from a checkout name no
// published thing and only make targets that exist.
func TestPublishedCommandsAreWhatTheReleasePublishes(t *testing.T) {
	w := readWorkflow(t, filepath.Join(root, ".github/workflows/release.yml"))
	rel, ok := w.jobs["release"]
	if !ok {
		t.Fatal("release.yml has no job release")
	}
	registry, _ := rel.Env["REGISTRY"].(string)
	if registry == "" {
		t.Fatal("release.yml's job release sets no REGISTRY")
	}
	if want := "https://github.com/" + project + "/releases/download"; release.DefaultBaseURL != want {
		t.Errorf("release.DefaultBaseURL is %s: the krew manifest would name archives away from the release page the workflow publishes (%s)", release.DefaultBaseURL, want)
	}
	checkRef := func(where, ref string) {
		switch {
		case strings.HasPrefix(ref, "oci://"):
			if !strings.HasPrefix(ref, "oci://"+registry+"/charts/vacate") {
				t.Errorf("%s: %s: the release workflow pushes the chart to oci://%s/charts/vacate", where, ref, registry)
			}
		case strings.HasPrefix(ref, "ghcr.io/"):
			if !strings.HasPrefix(ref, registry+"/") {
				t.Errorf("%s: %s: the release workflow pushes to %s", where, ref, registry)
			}
		case strings.HasPrefix(ref, "https://"):
			if !strings.HasPrefix(ref, release.DefaultBaseURL+"/") {
				t.Errorf("%s: %s: the release page is %s/<tag>", where, ref, release.DefaultBaseURL)
			}
		}
	}

	install := read(t, "docs/install.md")
	published := map[string]bool{}
	for _, b := range fenced.FindAllStringSubmatch(section(t, install, "## From a published release"), -1) {
		if b[1] == "sh" {
			t.Errorf("docs/install.md, From a published release: a sh block, which test/install would run without a published release:\n%s", b[2])
		}
		for _, c := range commands(b[2]) {
			published[c] = true
			for _, ref := range publishedRef.FindAllString(c, -1) {
				checkRef("docs/install.md", ref)
			}
		}
	}
	if len(published) < 4 {
		t.Fatalf("docs/install.md, From a published release: %d commands", len(published))
	}

	readme := section(t, read(t, "README.md"), "### 3. Install on a real cluster")
	var fromRelease, fromCheckout int
	for _, b := range fenced.FindAllStringSubmatch(readme, -1) {
		for _, c := range commands(b[2]) {
			refs := publishedRef.FindAllString(c, -1)
			switch {
			case b[1] == "sh" && len(refs) > 0:
				t.Errorf("README, Install: %q needs a published release, in a block of commands that work from a checkout", c)
			case b[1] == "sh":
				fromCheckout++
				if m := makeTarget.FindStringSubmatch(c); m != nil && !strings.Contains(read(t, "Makefile"), "\n"+m[1]+":") {
					t.Errorf("README, Install: %q: no make target %s", c, m[1])
				}
			case len(refs) > 0:
				fromRelease++
				if !published[c] {
					t.Errorf("README, Install: %q is not among docs/install.md's commands for a published release", c)
				}
			}
		}
	}
	if fromRelease == 0 || fromCheckout == 0 {
		t.Errorf("README, Install: %d commands for a published release, %d from a checkout: want both", fromRelease, fromCheckout)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
