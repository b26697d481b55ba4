package nodedrain

// RememberedPods is how many pods of the node the reconciler keeps per-pod
// state for: refusals of their evictions, and the eviction queue's state
// (queued, in flight, evicted lately).
func (r *Reconciler) RememberedPods(node string) int {
	return r.ledger.refusals(node) + r.Evictions.Remembered(node)
}
