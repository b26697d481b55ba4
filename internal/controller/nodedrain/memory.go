package nodedrain

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// podMemory is what the controller remembers of some pods beyond what
// their objects say, across all drains: one value per pod UID, under one
// lock, each with its pod's node, so that a drain that stops forgets its
// node's (the gates of endpoint-aware pods, the refused creates of
// replacements). The zero value is empty and ready.
type podMemory[V any] struct {
	mu    sync.Mutex
	byPod map[types.UID]memo[V]
}

// memo is one pod's value and node.
type memo[V any] struct {
	node string
	v    V
}

// get is the pod's value; the zero value if it has none.
func (m *podMemory[V]) get(uid types.UID) V {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.byPod[uid].v
}

// update runs f on the pod's value (the zero value if it has none) under
// the lock, and keeps it only if f says so. node is the pod's, for a value
// it did not have.
func (m *podMemory[V]) update(uid types.UID, node string, f func(*V) (keep bool)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.byPod[uid]
	if !ok {
		e.node = node
	}
	if !f(&e.v) {
		delete(m.byPod, uid)
		return
	}
	if m.byPod == nil {
		m.byPod = map[types.UID]memo[V]{}
	}
	m.byPod[uid] = e
}

// forget drops the pod's value.
func (m *podMemory[V]) forget(uid types.UID) {
	m.update(uid, "", func(*V) bool { return false })
}

// count is how many of the node's pods have a value.
func (m *podMemory[V]) count(node string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, e := range m.byPod {
		if e.node == node {
			n++
		}
	}
	return n
}

// forgetNode drops the values of the node's pods: its drain stopped.
func (m *podMemory[V]) forgetNode(node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for uid, e := range m.byPod {
		if e.node == node {
			delete(m.byPod, uid)
		}
	}
}
