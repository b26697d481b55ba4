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
func completeBatches(ms []*member) map[types.UID]bool {
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
	out := map[types.UID]bool{}
	for k, uids := range members {
		if mixed[k] || len(uids) != int(sizes[k]) {
			continue
		}
		for _, uid := range uids {
			out[uid] = true
		}
	}
	return out
}
