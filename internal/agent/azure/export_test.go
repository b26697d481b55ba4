package azure

import (
	"context"
	"time"
)

// SetSleep replaces the source's pause between requests, so that a test
// records the pauses instead of waiting them.
func SetSleep(s *Source, f func(context.Context, time.Duration) bool) { s.sleep = f }
