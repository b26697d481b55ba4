package v1alpha1

// EarliestDeadline is the drain's deadline: the earliest of its requesters'
// deadlines, with the requester's name (the first by name on a tie), or nil
// when none has one.
func EarliestDeadline(requesters []Requester) *DrainDeadline {
	var out *DrainDeadline
	for _, r := range requesters {
		if r.Deadline == nil {
			continue
		}
		if out == nil || r.Deadline.Before(&out.Time) || (r.Deadline.Equal(&out.Time) && r.Name < out.Requester) {
			out = &DrainDeadline{Time: *r.Deadline, Requester: r.Name}
		}
	}
	return out
}
