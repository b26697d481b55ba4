// Package replicatedvolume is the reference EvacuationProvider for a storage
// system with node-local replicas: volumes whose replicas are real files
// under a directory per node, each volume with a checksum. Pods use a volume
// on their node (the replica they read is "in use").
//
// It registers as two EvacuationProviders, one per stage:
//
//   - Mover (BeforeEviction): marks the draining node ineligible for new
//     replicas and, for every volume with a replica there, places one more
//     replica on an eligible node and copies the data until its checksum
//     matches (single-replica volumes too). On cancel it removes the
//     replicas it added, unless one is now in use (then it removes the
//     original instead), and makes the node eligible again.
//   - Cleaner (AfterEviction): once the node's pods have left, deletes the
//     replicas on the node, each only once no pod uses it.
//
// The layout (which node holds which volume, what was added for which
// drain, which nodes are ineligible) is a JSON file written atomically, so
// the provider resumes after a restart without copying anything twice.
//
// Both run through pkg/evacuation's Runner, and both EvacuationProviders
// name the identity they run as in spec.reporter, so that no other system
// can complete their Evacuations and release the pods whose volumes have
// not been copied yet (the admission policy vacate-evacuation-status): the
// demo registers them with its own user name; trust_test.go shows another
// service account refused.
package replicatedvolume

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
)

// Layout is the store's metadata.
type Layout struct {
	// Volumes by name.
	Volumes map[string]*Volume `json:"volumes"`
	// Ineligible nodes get no new replica.
	Ineligible []string `json:"ineligible,omitempty"`
	// Added are the replicas placed for evacuations, by drained node.
	Added map[string][]Move `json:"added,omitempty"`
}

// Volume is one volume: its replicas' nodes and its data's checksum.
type Volume struct {
	Replicas []string `json:"replicas"`
	Checksum string   `json:"checksum"`
}

// Move is a replica added on To for a volume that had one on From.
type Move struct {
	Volume string `json:"volume"`
	From   string `json:"from"`
	To     string `json:"to"`
}

// Store keeps volumes under Root: Root/nodes/<node>/<volume> holds a
// replica's data, Root/layout.json the layout.
type Store struct {
	Root string
	mu   sync.Mutex
}

// Checksum of data, as stored in the layout.
func Checksum(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// ReplicaPath is where a node's replica of a volume lives.
func (s *Store) ReplicaPath(node, volume string) string {
	return filepath.Join(s.Root, "nodes", node, volume)
}

// Load reads the layout (empty when none was written).
func (s *Store) Load() (*Layout, error) {
	l := &Layout{Volumes: map[string]*Volume{}, Added: map[string][]Move{}}
	data, err := os.ReadFile(filepath.Join(s.Root, "layout.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, l); err != nil {
		return nil, fmt.Errorf("reading the layout: %w", err)
	}
	if l.Added == nil {
		l.Added = map[string][]Move{}
	}
	return l, nil
}

func (s *Store) save(l *Layout) error {
	data, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(s.Root, "layout.json"), data)
}

// Create makes a volume with data on the given nodes.
func (s *Store) Create(volume string, data []byte, nodes ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, err := s.Load()
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if err := writeAtomic(s.ReplicaPath(n, volume), data); err != nil {
			return err
		}
	}
	l.Volumes[volume] = &Volume{Replicas: slices.Clone(nodes), Checksum: Checksum(data)}
	return s.save(l)
}

// Verify reports whether node's replica of volume has the volume's data.
func (s *Store) Verify(l *Layout, node, volume string) bool {
	data, err := os.ReadFile(s.ReplicaPath(node, volume))
	return err == nil && Checksum(data) == l.Volumes[volume].Checksum
}

// onNode are the volumes with a replica on node, sorted.
func (l *Layout) onNode(node string) []string {
	var out []string
	for name, v := range l.Volumes {
		if slices.Contains(v.Replicas, node) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// pick is the eligible node, of nodes, holding no replica of v and the
// fewest replicas overall ("" when none is left).
func (l *Layout) pick(v *Volume, nodes []string) string {
	load := map[string]int{}
	for _, vol := range l.Volumes {
		for _, n := range vol.Replicas {
			load[n]++
		}
	}
	best := ""
	for _, n := range nodes {
		if slices.Contains(l.Ineligible, n) || slices.Contains(v.Replicas, n) {
			continue
		}
		if best == "" || load[n] < load[best] || (load[n] == load[best] && n < best) {
			best = n
		}
	}
	return best
}

func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return writeAtomic(to, data)
}

func writeAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
