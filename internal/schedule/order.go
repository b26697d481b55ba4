package schedule

// next returns the index of the waiting drain that starts next, -1 if none
// may: of the drains every filter lets through, the first by startsBefore.
func (r *room) next(waiting []Drain) int {
	best := -1
	for i, d := range waiting {
		if r.turnedAwayBy(d) != nil {
			continue
		}
		if best < 0 || r.startsBefore(d, waiting[best]) {
			best = i
		}
	}
	return best
}

// startsBefore is the admission order: a drain with a deadline first,
// earliest first; then a drain whose PDBs all have room now (counting what
// the drains admitted before it will take) before one with room in only
// some; then the queue's order.
func (r *room) startsBefore(a, b Drain) bool {
	if urgent(a, b) || urgent(b, a) {
		return urgent(a, b)
	}
	if ha, hb := r.headroom(a), r.headroom(b); ha != hb {
		return ha
	}
	return queuedBefore(a, b)
}

// queuedBefore is the queue's order, which gives the waiting drains their
// positions: a drain with a deadline first, earliest first; then first
// requested, first served; then by node name.
func queuedBefore(a, b Drain) bool {
	if urgent(a, b) || urgent(b, a) {
		return urgent(a, b)
	}
	if !a.Requested.Equal(b.Requested) {
		return a.Requested.Before(b.Requested)
	}
	return a.Node < b.Node
}

// urgent says whether a's deadline comes before b's (a drain without one
// comes last).
func urgent(a, b Drain) bool {
	switch {
	case a.Deadline.IsZero():
		return false
	case b.Deadline.IsZero():
		return true
	}
	return a.Deadline.Before(b.Deadline)
}
