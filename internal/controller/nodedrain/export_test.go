package nodedrain

// RememberedPods is how many things the reconciler keeps of the node's
// pods: gates, and the eviction queue's state (queued, in flight, evicted
// lately, reserved, refused).
func (r *Reconciler) RememberedPods(node string) int {
	return r.gates.count(node) + r.Evictions.Remembered(node)
}
