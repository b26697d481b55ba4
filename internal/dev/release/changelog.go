package release

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
)

// Changelog is the file release notes come from, relative to the module
// root.
const Changelog = "CHANGELOG.md"

// Notes is the section of a changelog for version: from its heading "## "
// followed by the version (and, optionally, " - " and a date) to the next
// "## " heading, without the heading. A changelog without that section, or
// with an empty one, is an error: a release says what it changes.
func Notes(changelog []byte, version string) (string, error) {
	var (
		in    bool
		found bool
		body  []string
	)
	sc := bufio.NewScanner(bytes.NewReader(changelog))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			if in {
				break
			}
			title := strings.TrimSpace(strings.TrimPrefix(line, "## "))
			title = strings.Trim(strings.Fields(title + " ")[0], "[]")
			if title == version {
				in, found = true, true
			}
			continue
		}
		if in {
			body = append(body, line)
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	if !found {
		return "", fmt.Errorf("%s has no section \"## %s\": write the release's notes there first", Changelog, version)
	}
	notes := strings.TrimSpace(strings.Join(body, "\n"))
	if notes == "" {
		return "", fmt.Errorf("the section \"## %s\" of %s is empty: say what the release changes", version, Changelog)
	}
	return notes + "\n", nil
}
