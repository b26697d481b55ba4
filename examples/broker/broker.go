// Package broker is a small persistent message queue that speaks vacate's
// HTTP evacuation protocol: the reference for apps that move their own data
// off a node before their pod is evicted.
//
// Every message is a file under the data directory, named by its id
// (<broker>-<sequence>), written atomically; consuming removes it. On
// POST /evacuate the broker stops taking publishes (clients get 503 with the
// peers to use instead) and forwards every stored message to the peer its
// id maps to, which stores it under the same id, before removing its own
// copy: a message is never in no place, and a crash mid-way only resends to
// the same peer what it already has (a peer keeps one copy per id).
// GET /evacuate reports the messages remaining; DELETE /evacuate takes
// publishes again.
//
// API (JSON):
//
//	POST   /publish                 body: the message       -> 200 {"id": "..."} | 503 {"retry": true, "peers": [...]}
//	GET    /consume?max=N           up to N messages, removed -> 200 [{"id": "...", "body": "..."}]
//	POST   /accept?id=ID            a peer's message          -> 200 (idempotent per id)
//	GET    /stats                                          -> 200 {"stored": N, "evacuating": bool}
//	POST   /evacuate?drain=UID      start                     -> 202
//	GET    /evacuate?drain=UID      -> 200 {"state": "InProgress|Completed", "remaining": N} | 404 unknown drain
//	DELETE /evacuate?drain=UID      stop, take publishes again -> 200
//	POST   /fault?hook=none|error|garbage|hang   fault injection for tests
//
// With Callers set, the /evacuate calls are served only to vacate-controller
// (pkg/hookauth: its token for this pod); anyone else gets 401 or 403.
package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vacate-dev/vacate/pkg/hookauth"
)

// MaxMessage bounds a message's size.
const MaxMessage = 1 << 20

// Broker stores messages in Dir and forwards them to Peers on evacuation.
type Broker struct {
	Name  string
	Dir   string
	Peers []string // base URLs, such as http://127.64.0.3:7070
	// ForwardDelay slows forwarding down (tests use it to act mid-way).
	ForwardDelay time.Duration
	// NoSync skips fsync: a killed process loses nothing (the kernel has
	// the data), a crashed machine may. For tests on slow disks.
	NoSync bool
	Client *http.Client
	// Callers, when set, checks who calls /evacuate (pkg/hookauth): the
	// whole of what an app needs to answer vacate-controller alone.
	Callers *hookauth.Verifier

	mu    sync.Mutex
	seq   int64
	fault string
	// forwarding runs while an evacuation is wanted.
	forwarding bool
}

// Open prepares the data directory and resumes an evacuation that was
// under way when the process stopped.
func (b *Broker) Open() error {
	if b.Client == nil {
		b.Client = &http.Client{Timeout: 5 * time.Second}
	}
	if err := os.MkdirAll(filepath.Join(b.Dir, "msgs"), 0o755); err != nil {
		return err
	}
	seq, err := os.ReadFile(filepath.Join(b.Dir, "seq"))
	if err == nil {
		b.seq, _ = strconv.ParseInt(strings.TrimSpace(string(seq)), 10, 64)
	}
	if b.evacuatingFor() != "" {
		b.startForwarding()
	}
	return nil
}

// Serve opens the broker and serves its API on listen until ctx ends.
func (b *Broker) Serve(ctx context.Context, listen string) error {
	if err := b.Open(); err != nil {
		return err
	}
	srv := &http.Server{Addr: listen, Handler: b.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Handler serves the API.
func (b *Broker) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /publish", b.publish)
	mux.HandleFunc("GET /consume", b.consume)
	mux.HandleFunc("POST /accept", b.accept)
	mux.HandleFunc("GET /stats", b.stats)
	var evacuate http.Handler = http.HandlerFunc(b.evacuate)
	if b.Callers != nil {
		evacuate = b.Callers.Require(evacuate)
	}
	mux.Handle("/evacuate", evacuate)
	mux.HandleFunc("POST /fault", func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.fault = r.URL.Query().Get("hook")
		b.mu.Unlock()
	})
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (b *Broker) publish(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxMessage+1))
	if err != nil || len(body) > MaxMessage {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "message missing or larger than 1 MiB"})
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.evacuatingFor() != "" {
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"retry": true, "peers": b.Peers,
			"error": "this broker is moving its messages away; publish to a peer"})
		return
	}
	b.seq++
	if err := b.writeFile(filepath.Join(b.Dir, "seq"), []byte(strconv.FormatInt(b.seq, 10))); err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	id := fmt.Sprintf("%s-%d", b.Name, b.seq)
	if err := b.writeFile(b.path(id), body); err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"id": id})
}

// Message is a stored message.
type Message struct {
	ID   string `json:"id"`
	Body string `json:"body"`
}

func (b *Broker) consume(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(r.URL.Query().Get("max"))
	if err != nil || n < 1 {
		n = 100
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	ids, err := b.ids()
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	out := []Message{}
	for _, id := range ids[:min(n, len(ids))] {
		data, err := os.ReadFile(b.path(id))
		if err != nil {
			continue
		}
		if err := os.Remove(b.path(id)); err != nil {
			continue
		}
		out = append(out, Message{ID: id, Body: string(data)})
	}
	writeJSON(w, http.StatusOK, out)
}

// accept stores a peer's message under its id; a second copy is ignored.
func (b *Broker) accept(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	if id == "" || strings.ContainsAny(id, "/\\") || strings.HasPrefix(id, ".") {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "bad id"})
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxMessage+1))
	if err != nil || len(body) > MaxMessage {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "message missing or too large"})
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, err := os.Stat(b.path(id)); err == nil {
		writeJSON(w, http.StatusOK, map[string]string{"id": id, "note": "already stored"})
		return
	}
	if err := b.writeFile(b.path(id), body); err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"id": id})
}

func (b *Broker) stats(w http.ResponseWriter, _ *http.Request) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ids, err := b.ids()
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"stored": len(ids), "evacuating": b.evacuatingFor() != ""})
}

// evacuate is the HTTP evacuation hook.
func (b *Broker) evacuate(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	fault := b.fault
	b.mu.Unlock()
	switch fault {
	case "error":
		http.Error(w, "injected fault", http.StatusInternalServerError)
		return
	case "garbage":
		_, _ = w.Write([]byte("\x00\x01 not json"))
		return
	case "hang":
		select {
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
		return
	}
	drain := r.URL.Query().Get("drain")
	if drain == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "?drain= is required"})
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	current := b.evacuatingFor()
	switch r.Method {
	case http.MethodPost:
		if current != drain {
			if err := b.writeFile(filepath.Join(b.Dir, "evacuating"), []byte(drain)); err != nil {
				writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
				return
			}
		}
		b.startForwarding()
		w.WriteHeader(http.StatusAccepted)
	case http.MethodGet:
		if current != drain {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "not evacuating for drain " + drain})
			return
		}
		ids, err := b.ids()
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
		state, msg := "InProgress", fmt.Sprintf("forwarding %d stored message(s) to %d peer(s); publishes refused", len(ids), len(b.Peers))
		if len(ids) == 0 {
			state, msg = "Completed", "every stored message is on a peer"
		}
		writeJSON(w, http.StatusOK, map[string]any{"state": state, "message": msg, "remaining": len(ids)})
	case http.MethodDelete:
		if current == drain {
			_ = os.Remove(filepath.Join(b.Dir, "evacuating"))
		}
		writeJSON(w, http.StatusOK, map[string]string{"state": "Cancelled"})
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

// evacuatingFor is the drain the broker evacuates for, "" when none. The
// marker file keeps it across restarts. Called with mu held (or before serving).
func (b *Broker) evacuatingFor() string {
	data, err := os.ReadFile(filepath.Join(b.Dir, "evacuating"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

// startForwarding runs the forwarding loop once. Called with mu held (or before serving).
func (b *Broker) startForwarding() {
	if b.forwarding {
		return
	}
	b.forwarding = true
	go b.forward()
}

// forward sends every stored message to its peer (peerFor) and removes
// the local copy once the peer has it, until none is left or the
// evacuation is cancelled.
func (b *Broker) forward() {
	defer func() {
		b.mu.Lock()
		b.forwarding = false
		b.mu.Unlock()
	}()
	for {
		b.mu.Lock()
		if b.evacuatingFor() == "" {
			b.mu.Unlock()
			return
		}
		ids, err := b.ids()
		b.mu.Unlock()
		if err != nil || len(ids) == 0 {
			if err == nil {
				return
			}
			time.Sleep(time.Second)
			continue
		}
		for _, id := range ids {
			if len(b.Peers) == 0 {
				time.Sleep(time.Second)
				break
			}
			if err := b.send(b.peerFor(id), id); err != nil {
				time.Sleep(100 * time.Millisecond) // it waits for that peer; the others go on
				continue
			}
			if b.ForwardDelay > 0 {
				time.Sleep(b.ForwardDelay)
			}
			b.mu.Lock()
			stop := b.evacuatingFor() == ""
			b.mu.Unlock()
			if stop {
				return
			}
		}
	}
}

// peerFor is the one peer a message goes to, by its id: a message resent
// after a crash goes where its first copy went, and that peer keeps one
// copy per id, so it is never stored twice.
func (b *Broker) peerFor(id string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return b.Peers[h.Sum32()%uint32(len(b.Peers))]
}

// send gives one message to a peer, then removes the local copy.
func (b *Broker) send(peer, id string) error {
	data, err := os.ReadFile(b.path(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil // consumed meanwhile
	}
	if err != nil {
		return err
	}
	resp, err := b.Client.Post(peer+"/accept?id="+url.QueryEscape(id), "application/octet-stream", bytes.NewReader(data))
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("peer %s answered %d", peer, resp.StatusCode)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := os.Remove(b.path(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func (b *Broker) path(id string) string { return filepath.Join(b.Dir, "msgs", id) }

// ids are the stored messages' ids, oldest first (by sequence within a broker).
func (b *Broker) ids() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(b.Dir, "msgs"))
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(entries))
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") {
			ids = append(ids, e.Name())
		}
	}
	sort.Slice(ids, func(i, j int) bool { return less(ids[i], ids[j]) })
	return ids, nil
}

func less(a, b string) bool {
	ai, bi := strings.LastIndexByte(a, '-'), strings.LastIndexByte(b, '-')
	if ai < 0 || bi < 0 || a[:ai] != b[:bi] {
		return a < b
	}
	an, _ := strconv.ParseInt(a[ai+1:], 10, 64)
	bn, _ := strconv.ParseInt(b[bi+1:], 10, 64)
	return an < bn
}

// writeFile writes atomically: a temporary file, synced, renamed into place.
func (b *Broker) writeFile(path string, data []byte) error { return writeFile(path, data, !b.NoSync) }

func writeFile(path string, data []byte, sync bool) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := syncFile(tmp, sync); err != nil {
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

func syncFile(f *os.File, sync bool) error {
	if !sync {
		return nil
	}
	return f.Sync()
}
