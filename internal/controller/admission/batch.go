package admission

import (
	"k8s.io/apimachinery/pkg/types"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// This file finds the batches their requesters declared complete
// (Requester.Batch: vacate drain n1 n2 ... knows its nodes): plan.go lets
// their drains skip the rest of the batch window, and nothing else.

// batchKey is one requester's batch.
type batchKey struct {
	requester, id string
}

// completeBatches are the drains, by UID, of every complete batch: a
// requester's batch whose entries all name the same size and are carried
// by exactly that many NodeDrains. Every NodeDrain counts, running or not
// (a drain of the batch that ended, or joined drained, is still part of
// it); an entry exists only while its requester wants the drain. A batch
// whose entries disagree on the size, or that more drains carry than it
// declares, is not complete: its drains wait for the window, as drains
// without a batch do.
func completeBatches(all []v1alpha1.NodeDrain) map[types.UID]bool {
	members := map[batchKey][]types.UID{}
	sizes := map[batchKey]int32{}
	mixed := map[batchKey]bool{}
	for i := range all {
		nd := &all[i]
		for _, r := range nd.Spec.Requesters {
			if r.Batch == nil {
				continue
			}
			k := batchKey{requester: r.Name, id: r.Batch.ID}
			if s, seen := sizes[k]; seen && s != r.Batch.Size {
				mixed[k] = true
			}
			sizes[k] = r.Batch.Size
			members[k] = append(members[k], nd.UID)
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
