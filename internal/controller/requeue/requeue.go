// Package requeue holds the pauses vacate's controllers ask for between
// passes, the same for all of them.
package requeue

import "time"

// Resync bounds how long a drain, or an admission queue, goes without a
// pass while it waits; watches on pods, nodes, PDBs and eviction outcomes
// normally wake it much sooner.
const Resync = 30 * time.Second

// ConflictRetry is the pause before a pass that lost an optimistic-lock race
// runs again (the cache it read was behind).
const ConflictRetry = 100 * time.Millisecond
