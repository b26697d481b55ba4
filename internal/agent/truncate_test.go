package agent

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestTruncateKeepsCharactersWhole: a reason cut inside a character would
// be stored as U+FFFD and never compare equal to what the agent wants, so
// it would write it again on every pass.
func TestTruncateKeepsCharactersWhole(t *testing.T) {
	long := strings.Repeat("é", 600) // 2 bytes each
	for n := 10; n < 20; n++ {
		got := truncate(long, n)
		if !utf8.ValidString(got) || len(got) > n || !strings.HasSuffix(got, "...") {
			t.Errorf("truncate to %d: %q (%d bytes, valid %t)", n, got, len(got), utf8.ValidString(got))
		}
	}
	if got := truncate("short", 10); got != "short" {
		t.Errorf("truncate(short) = %q", got)
	}
}
