package sidecar

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Phases of a drain's record.
const (
	// phaseEvacuating: the evacuate commands of the record's step set run
	// (again, after a failure or a restart) until they all exit 0.
	phaseEvacuating = "Evacuating"
	// phaseWatching: evacuate succeeded; status runs until Completed.
	phaseWatching = "Watching"
	// phaseCompleted: the step set's evacuation is done. Final, unless the
	// mode goes up to a step set not yet run, or the drain is cancelled.
	phaseCompleted = "Completed"
	// phaseCancelling: the cancel commands of each step set started run
	// until they all exit 0; then the record goes.
	phaseCancelling = "Cancelling"
)

// record is one drain's state, kept in a file so that a restarted sidecar
// resumes it.
type record struct {
	Drain string `json:"drain"`
	Run   string `json:"run"`
	Node  string `json:"node"`
	// Mode is the highest mode asked for this drain.
	Mode  string `json:"mode"`
	Phase string `json:"phase"`
	// Started lists the step sets whose evacuate was started, in order: a
	// cancel undoes them last first.
	Started []string `json:"started,omitempty"`
	// Evacuated lists the step sets whose evacuate commands all exited 0.
	Evacuated []string `json:"evacuated,omitempty"`
	// Attempts counts evacuate (or, cancelling, cancel) attempts of the
	// current phase.
	Attempts int `json:"attempts"`
	// Answer is what a GET answers: the last status, or what the sidecar
	// is doing.
	Answer Answer `json:"answer"`
	// Next is the drain asked for while this one was being cancelled: it
	// starts afresh when the cancel is done.
	Next *Drain `json:"next,omitempty"`
	// Updated is when the record last changed.
	Updated time.Time `json:"updated"`
}

func (r *record) drain() Drain { return Drain{UID: r.Drain, Run: r.Run, Node: r.Node, Mode: r.Mode} }

func has(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func add(list []string, s string) []string {
	if has(list, s) {
		return list
	}
	return append(list, s)
}

// Shapes of what a request names: a drain UID and run id are at most 64
// letters, digits and dashes (a UID is a file name here); a node is a DNS
// subdomain.
var (
	idShape   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]{0,63}$`)
	nodeShape = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// store keeps the records, one JSON file per drain UID in a directory.
type store struct{ dir string }

// openStore checks that the state directory exists and is writable.
func openStore(dir string) (*store, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("stateDir: %w", err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("stateDir: %s is not a directory", dir)
	}
	f, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return nil, fmt.Errorf("stateDir: %s is not writable (mount a volume there): %w", dir, err)
	}
	name := f.Name()
	f.Close()
	os.Remove(name)
	return &store{dir: dir}, nil
}

func (s *store) file(uid string) string { return filepath.Join(s.dir, uid+".json") }

// save writes a record whole: to a temporary file, synced, then renamed
// over the old one, so a crash leaves the old or the new, never half.
func (s *store) save(r *record) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(s.dir, ".tmp-"+r.Drain+"-*")
	if err != nil {
		return fmt.Errorf("saving drain %s: %w", r.Drain, err)
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("saving drain %s: %w", r.Drain, err)
	}
	if err := os.Rename(tmp, s.file(r.Drain)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("saving drain %s: %w", r.Drain, err)
	}
	return syncDir(s.dir)
}

// remove forgets a record.
func (s *store) remove(uid string) error {
	if err := os.Remove(s.file(uid)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("forgetting drain %s: %w", uid, err)
	}
	return syncDir(s.dir)
}

// load reads every record. A file that does not decode is renamed aside
// (name.corrupt) and reported, never deleted.
func (s *store) load() ([]*record, []error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, []error{fmt.Errorf("reading stateDir: %w", err)}
	}
	var recs []*record
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".tmp-") {
			os.Remove(filepath.Join(s.dir, name)) // a save that did not finish
			continue
		}
		uid, ok := strings.CutSuffix(name, ".json")
		if !ok || e.IsDir() {
			continue
		}
		path := filepath.Join(s.dir, name)
		data, err := os.ReadFile(path)
		var r record
		if err == nil {
			err = json.Unmarshal(data, &r)
		}
		if err == nil {
			err = r.check(uid)
		}
		if err != nil {
			aside := path + ".corrupt"
			os.Rename(path, aside)
			errs = append(errs, fmt.Errorf("state file %s: %v; moved to %s", path, err, aside))
			continue
		}
		recs = append(recs, &r)
	}
	return recs, errs
}

// check is what a record read back must be.
func (r *record) check(uid string) error {
	switch {
	case r.Drain != uid:
		return fmt.Errorf("names drain %q, not %q", r.Drain, uid)
	case !idShape.MatchString(r.Drain):
		return fmt.Errorf("drain %q is not a UID", r.Drain)
	case r.Mode != Maintenance && r.Mode != Decommission:
		return fmt.Errorf("mode %q", r.Mode)
	}
	switch r.Phase {
	case phaseEvacuating, phaseWatching, phaseCompleted, phaseCancelling:
	default:
		return fmt.Errorf("phase %q", r.Phase)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
