package drain

import (
	"sort"
	"time"
)

// ReplacementReady is the time a forecast assumes a replacement pod takes
// to become Ready elsewhere, which a PDB waits for between two evictions.
const ReplacementReady = 5 * time.Second

// PDBForecast is what one PodDisruptionBudget means for a node's drain.
type PDBForecast struct {
	// Name is namespace/name.
	Name string
	// Allowed is the disruptions the PDB allows now.
	Allowed int32
	// CurrentHealthy, DesiredHealthy and ExpectedPods are the PDB's status.
	CurrentHealthy, DesiredHealthy, ExpectedPods int32
	// OnNode are the pods to evict from the node that the PDB selects.
	OnNode []string
	// Blocks is set when the PDB refuses every eviction now.
	Blocks bool
	// Rounds is how many times evictions must wait for replacements: the
	// pods on the node, Allowed at a time.
	Rounds int
}

// Forecast is what a drain of the node would do, and how long it takes.
type Forecast struct {
	PDBs []PDBForecast
	// Rounds of evictions: the most any PDB forces, or the evictions in
	// flight per node allow, whichever is more.
	Rounds int
	// MaxGrace is the longest grace period of a pod to evict.
	MaxGrace time.Duration
	// Low and High bound the time the evictions take: between rounds the
	// drain waits ReplacementReady (Low), and each pod may also use its
	// whole grace period (High). Without evictions both are 0.
	Low, High time.Duration
	// Stuck is set when the drain cannot finish without a change: a pod
	// blocked by policy, or a PDB that allows no disruption now.
	Stuck bool
}

// NewForecast predicts the drain of a plan: the PDBs it meets and the time
// its evictions take. grace overrides the pods' grace period when set;
// perNode bounds the evictions in flight.
func NewForecast(plan Plan, grace *int64, perNode int) Forecast {
	var f Forecast
	onNode := map[string][]string{}
	evictions := 0
	for _, d := range plan.Decisions {
		if d.Action == Block {
			f.Stuck = true
		}
		if d.Action != Evict {
			continue
		}
		evictions++
		for _, name := range d.PDBs {
			onNode[name] = append(onNode[name], d.Key())
		}
		g := time.Duration(30) * time.Second
		if d.Pod.Spec.TerminationGracePeriodSeconds != nil {
			g = time.Duration(*d.Pod.Spec.TerminationGracePeriodSeconds) * time.Second
		}
		if grace != nil {
			g = time.Duration(*grace) * time.Second
		}
		f.MaxGrace = max(f.MaxGrace, g)
	}
	if evictions == 0 {
		return f
	}
	perNode = max(perNode, 1)
	f.Rounds = (evictions + perNode - 1) / perNode
	for name, pods := range onNode {
		p := plan.PDBs[name]
		pf := PDBForecast{Name: name, OnNode: pods, Allowed: p.Status.DisruptionsAllowed,
			CurrentHealthy: p.Status.CurrentHealthy, DesiredHealthy: p.Status.DesiredHealthy, ExpectedPods: p.Status.ExpectedPods}
		if pf.Allowed <= 0 {
			pf.Blocks, f.Stuck = true, true
			pf.Rounds = len(pods) // if it ever allows one, one at a time
		} else {
			pf.Rounds = (len(pods) + int(pf.Allowed) - 1) / int(pf.Allowed)
		}
		f.Rounds = max(f.Rounds, pf.Rounds)
		f.PDBs = append(f.PDBs, pf)
	}
	sort.Slice(f.PDBs, func(i, j int) bool { return f.PDBs[i].Name < f.PDBs[j].Name })
	f.Low = time.Duration(f.Rounds-1) * ReplacementReady
	f.High = f.Low + time.Duration(f.Rounds)*f.MaxGrace
	return f
}
