package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeSaysWhatMakeTestNeeds (issue 44): README.md's first lines stay
// the two commands, and before anything else it says what they need: for
// make test, each prerequisite target of the Makefile that installs
// packages with apt-get, each package it installs, that this takes a
// Debian-family machine and root; for make demo, Linux and no root.
func TestReadmeSaysWhatMakeTestNeeds(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	if !strings.HasPrefix(text, "# vacate\n\n```sh\nmake demo   #") || !strings.Contains(text, "\nmake test   #") {
		t.Errorf("README.md no longer starts with the two commands")
	}
	top, _, _ := strings.Cut(text, "\n---\n") // what a newcomer reads first
	prereqs := regexp.MustCompile(`(?m)^test: ([^#\n]*)##`).FindStringSubmatch(string(makefile))
	if prereqs == nil {
		t.Fatal("the Makefile has no test target")
	}
	vars := map[string][]string{}
	for _, m := range regexp.MustCompile(`(?m)^(\w+)\s*:=\s*(.*)$`).FindAllStringSubmatch(string(makefile), -1) {
		vars[m[1]] = strings.Fields(m[2])
	}
	installers := 0
	for _, target := range strings.Fields(prereqs[1]) {
		recipe := regexp.MustCompile(`(?ms)^` + regexp.QuoteMeta(target) + `:[^\n]*\n((?:\t[^\n]*\n)+)`).FindStringSubmatch(string(makefile))
		if recipe == nil || !strings.Contains(recipe[1], "apt-get install") {
			continue
		}
		installers++
		if !strings.Contains(top, "`"+target+"`") {
			t.Errorf("README.md does not say that make test runs %s, which installs packages", target)
		}
		var pkgs []string
		for _, m := range regexp.MustCompile(`apt-get install -y --no-install-recommends (\S+)`).FindAllStringSubmatch(recipe[1], -1) {
			word := strings.TrimSuffix(m[1], ";")
			if name, ok := strings.CutPrefix(word, "$$"); ok {
				if name == "missing" {
					for _, v := range regexp.MustCompile(`\$\((\w+)\)`).FindAllStringSubmatch(recipe[1], -1) {
						pkgs = append(pkgs, vars[v[1]]...)
					}
				}
				continue
			}
			pkgs = append(pkgs, word)
		}
		if len(pkgs) == 0 {
			t.Errorf("could not read the packages %s installs", target)
		}
		for _, p := range pkgs {
			if !strings.Contains(top, "`"+p+"`") {
				t.Errorf("README.md does not name the package %s, which make test installs (%s)", p, target)
			}
		}
	}
	if installers < 2 {
		t.Errorf("found %d targets of make test that install packages, want 2 (dbus-daemon, stateful-servers)", installers)
	}
	for _, want := range []string{"Debian-family", "as root", "`jq`", "10 GB", "**`make demo`**: Linux", "no root"} {
		if !strings.Contains(top, want) {
			t.Errorf("README.md's opening does not say %q", want)
		}
	}
}
