package admission

import (
	"k8s.io/apimachinery/pkg/types"
)

// This file finds the batches their requesters declared complete
// (Requester.Batch: vacate drain n1 n2 ... knows its nodes): plan.go lets
// their drains skip the rest of the batch window, and nothing else.

// batchKey is one requester's batch.
type batchKey struct {
	requester, id string
}

// completeBatches are the drains, by UID, of every complete batch among
// the queue's running drains (waiting or admitted): a requester's batch
// whose entries all name the same size and that exactly that many of them
// carry. Only running drains of the queue count, the ones a pass cordons
// before it admits any: a drain without the NodeDrain controller's
// finalizer yet, or of another queue, leaves its batch incomplete, and a
// batch spread over two policies waits for the window. A batch whose
// entries disagree on the size, or that more drains carry than it
// declares, is not complete either: its drains wait for the window, as
// drains without a batch do. An entry exists only while its requester
// wants the drain.
// Each drain maps to its complete batch (the first, if it carries two).
func completeBatches(ms []*member) map[types.UID]batchKey {
	members := map[batchKey][]types.UID{}
	sizes := map[batchKey]int32{}
	mixed := map[batchKey]bool{}
	for _, m := range ms {
		for _, r := range m.drain.Spec.Requesters {
			if r.Batch == nil {
				continue
			}
			k := batchKey{requester: r.Name, id: r.Batch.ID}
			if s, seen := sizes[k]; seen && s != r.Batch.Size {
				mixed[k] = true
			}
			sizes[k] = r.Batch.Size
			members[k] = append(members[k], m.drain.UID)
		}
	}
	out := map[types.UID]batchKey{}
	for k, uids := range members {
		if mixed[k] || len(uids) != int(sizes[k]) {
			continue
		}
		for _, uid := range uids {
			if old, ok := out[uid]; !ok || batchLess(k, old) {
				out[uid] = k
			}
		}
	}
	return out
}

// batchLess orders batches, so that a drain of two complete batches is
// given the same one whatever the order of a map.
func batchLess(a, b batchKey) bool {
	return a.requester < b.requester || (a.requester == b.requester && a.id < b.id)
}

// together splits the admissions, in order, into the runs written at once
// (write): the drains of one complete batch that follow each other, which
// one request asked for together, side by side; every other drain alone,
// in its turn, so that a pass cut short (the controller killed) has
// admitted the drains requested first.
func together(order []types.UID, complete map[types.UID]batchKey) [][]types.UID {
	var runs [][]types.UID
	for i, uid := range order {
		k, inBatch := complete[uid]
		if i > 0 && inBatch {
			if prev, ok := complete[order[i-1]]; ok && prev == k {
				runs[len(runs)-1] = append(runs[len(runs)-1], uid)
				continue
			}
		}
		runs = append(runs, []types.UID{uid})
	}
	return runs
}
