package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// citedTest is a test as docs/dev/security.md cites it: `PACKAGE TestName`.
var citedTest = regexp.MustCompile("`((?:api|cmd|config|examples|hack|internal|pkg|test)/[\\w/.-]*) (Test\\w+)`")

// TestSecurityTableNamesRealTests: every test docs/dev/security.md names
// as the proof that a power cannot be abused exists, in the package it
// names, so the table cannot point at a test that was renamed or never
// written.
func TestSecurityTableNamesRealTests(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root, "docs/dev/security.md"))
	if err != nil {
		t.Fatal(err)
	}
	cited := citedTest.FindAllStringSubmatch(string(doc), -1)
	if len(cited) < 50 {
		t.Fatalf("docs/dev/security.md cites %d tests as `PACKAGE TestName`: the table moved, or the reader is broken", len(cited))
	}
	tests := map[string]string{} // package dir -> its test files' text
	for _, c := range cited {
		dir, name := c[1], c[2]
		text, ok := tests[dir]
		if !ok {
			files, _ := filepath.Glob(filepath.Join(root, dir, "*_test.go"))
			var b strings.Builder
			for _, f := range files {
				data, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				b.Write(data)
			}
			text = b.String()
			tests[dir] = text
		}
		if !strings.Contains(text, "\nfunc "+name+"(t *testing.T)") {
			t.Errorf("docs/dev/security.md cites `%s %s`: no such test in %s", dir, name, dir)
		}
	}
}
