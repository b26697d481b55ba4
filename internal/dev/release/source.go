package release

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Source is the commit a release is built from.
type Source struct {
	// Commit is empty outside a git checkout.
	Commit string
	// Date is SOURCE_DATE_EPOCH when set, else the commit's time: it dates
	// the images, the archives and the chart, so that the same commit gives
	// the same bytes.
	Date time.Time
	// Dirty: the checkout has changes that are not committed.
	Dirty bool
}

// DateString is Date in RFC 3339, UTC.
func (s Source) DateString() string { return s.Date.UTC().Format(time.RFC3339) }

// SourceOf reads the checkout at dir.
func SourceOf(dir string) (Source, error) {
	var s Source
	s.Commit = git(dir, "rev-parse", "HEAD")
	if s.Commit != "" {
		s.Dirty = git(dir, "status", "--porcelain", "--untracked-files=no") != ""
	}
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		epoch = git(dir, "log", "-1", "--format=%ct")
	}
	if epoch == "" {
		return s, errors.New("no commit time: set SOURCE_DATE_EPOCH (seconds since 1970) outside a git checkout")
	}
	sec, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return s, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", epoch, err)
	}
	s.Date = time.Unix(sec, 0).UTC()
	return s, nil
}

func git(dir string, args ...string) string {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	b, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
