package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/vacate-dev/vacate/internal/hook"
)

// maxRequest bounds a request's body.
const maxRequest = 64 << 10

// Handler serves the protocol at the configured path, and /healthz; not
// /metrics, which has a listener of its own (MetricsHandler).
func (s *Sidecar) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "ok\n")
	})
	var protocol http.Handler = http.HandlerFunc(s.serveProtocol)
	if s.verify != nil {
		protocol = s.verify.Require(protocol)
	}
	mux.Handle(s.cfg.Path, s.metrics.counted(protocol))
	return mux
}

func (s *Sidecar) serveProtocol(w http.ResponseWriter, r *http.Request) {
	req := Drain{UID: r.URL.Query().Get("drain"), Run: r.URL.Query().Get("run")}
	var (
		a      Answer
		status = http.StatusOK
		err    error
	)
	switch r.Method {
	case http.MethodPost:
		if err = readStart(w, r, &req); err == nil {
			a, status, err = s.Evacuate(req)
		}
	case http.MethodGet:
		a, err = s.Status(req)
	case http.MethodDelete:
		a, status, err = s.Cancel(req)
	default:
		w.Header().Set("Allow", "POST, GET, DELETE")
		err = refuse(http.StatusMethodNotAllowed, "method %s: want POST, GET or DELETE", r.Method)
	}
	if err != nil {
		var re *requestError
		if !errors.As(err, &re) {
			re = &requestError{status: http.StatusInternalServerError, msg: err.Error()}
		}
		if re.status != http.StatusNotFound {
			s.log.Info("refused a request", "method", r.Method, "from", r.RemoteAddr, "status", re.status, "why", re.msg)
		}
		http.Error(w, re.msg, re.status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(a)
}

// readStart reads a POST's body into the request: it must name the same
// drain and run as the query, if it names them.
func readStart(w http.ResponseWriter, r *http.Request, req *Drain) error {
	var body struct {
		Drain string `json:"drain"`
		Run   string `json:"run"`
		Node  string `json:"node"`
		Mode  string `json:"mode"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequest)).Decode(&body); err != nil {
		return refuse(http.StatusBadRequest, "the body is not the protocol's JSON {drain, run, node, mode}: %v", err)
	}
	switch {
	case req.UID == "":
		req.UID = body.Drain
	case body.Drain != "" && body.Drain != req.UID:
		return refuse(http.StatusBadRequest, "the body names drain %q, the query %q", hook.Summary(body.Drain), hook.Summary(req.UID))
	}
	switch {
	case req.Run == "":
		req.Run = body.Run
	case body.Run != "" && body.Run != req.Run:
		return refuse(http.StatusBadRequest, "the body names run %q, the query %q", hook.Summary(body.Run), hook.Summary(req.Run))
	}
	req.Node, req.Mode = body.Node, body.Mode
	return nil
}

// Serve serves the protocol on l until ctx ends, then stops the workers
// (their commands are killed; each drain's state stays for the next start)
// and waits for them.
func (s *Sidecar) Serve(ctx context.Context, l net.Listener) error {
	srv := newServer(s.Handler())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	var err error
	select {
	case <-ctx.Done():
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = srv.Shutdown(shut)
	case err = <-errc:
		err = fmt.Errorf("serving %s: %w", l.Addr(), err)
	}
	s.stop()
	s.Wait()
	return err
}

// newServer is an HTTP server of h with the sidecar's bounds: a slow or
// oversized request is cut off, not waited for.
func newServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    16 << 10,
	}
}
