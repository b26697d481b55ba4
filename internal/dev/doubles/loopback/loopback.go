// Package loopback serves a test double's HTTP handler on a free port of
// 127.0.0.1 that a test can stop and start again, as a metadata service
// that goes away and comes back on the same address.
package loopback

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// Server serves one handler. Its methods may be called from any goroutine.
type Server struct {
	name    string // in errors: the double's package
	addr    string
	handler http.Handler

	mu  sync.Mutex
	srv *http.Server // nil while stopped
}

// Listen serves handler on a free port of 127.0.0.1; name (the double's
// package) prefixes its errors.
func Listen(name string, handler http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("%s: listening: %w", name, err)
	}
	s := &Server{name: name, addr: ln.Addr().String(), handler: handler}
	s.serve(ln)
	return s, nil
}

// URL is the server's base URL.
func (s *Server) URL() string { return "http://" + s.addr }

// Running reports whether the server serves (it was not stopped, or was
// started again).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv != nil
}

// Stop closes the listener and every connection: requests are refused
// until Start. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// Start listens again on the same address after Stop. Starting a running
// server does nothing.
func (s *Server) Start() error {
	if s.Running() {
		return nil
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("%s: listening again on %s: %w", s.name, s.addr, err)
	}
	s.serve(ln)
	return nil
}

func (s *Server) serve(ln net.Listener) {
	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 5 * time.Second}
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			panic(fmt.Sprintf("%s: serving: %v", s.name, err))
		}
	}()
}
