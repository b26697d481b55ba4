// Package azure is the agent's source for Azure virtual machines: it polls
// the Instance Metadata Service's Scheduled Events and reports each event
// that affects this VM as a notice; when the agent is done with a notice it
// acknowledges the event, so Azure may start it before its NotBefore.
//
// What the documentation says, and this source relies on:
//   - every request carries Metadata: true and no X-Forwarded-For (the
//     default client bypasses proxies, as IMDS requires), and an api-version;
//   - the document lists every event of the VM's availability set or
//     placement group: only those whose Resources name this VM are its own;
//   - an event is Scheduled, not to start before NotBefore, then Started
//     (NotBefore empty) once approved or NotBefore passed, and leaves the
//     list when it is over; it may also leave the list unstarted, cancelled;
//   - a POST of StartRequests approves an event for every VM it lists, so
//     an event shared with other VMs is not approved here: it starts at its
//     NotBefore, when the other VMs' agents have had their notice;
//   - the first request may take up to two minutes, as it enables the
//     service; polling once a second is recommended.
package azure

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/agent"
	"github.com/vacate-dev/vacate/internal/backoff"
)

// Name is the source's name.
const Name = "azure"

// Notice sources, one per event type.
const (
	SourcePreempt   = "azure-preempt"
	SourceTerminate = "azure-terminate"
	SourceReboot    = "azure-reboot"
	SourceRedeploy  = "azure-redeploy"
	SourceFreeze    = "azure-freeze"
)

// Problem reasons.
const (
	// ReasonMetadataUnavailable: IMDS does not answer, or not as expected.
	ReasonMetadataUnavailable = "MetadataUnavailable"
	// ReasonUnknownEvent: an event of this VM has a type the source does
	// not know.
	ReasonUnknownEvent = "UnknownScheduledEvent"
)

const (
	// DefaultEndpoint is IMDS.
	DefaultEndpoint = "http://169.254.169.254"
	// APIVersion is the Scheduled Events API version used.
	APIVersion = "2020-07-01"
	// computeAPIVersion is the instance metadata API version used to read
	// the VM's name.
	computeAPIVersion = "2021-02-01"
	// DefaultInterval is how often Scheduled Events is polled: the
	// documentation recommends once a second, as a Preempt event may come
	// only 30 seconds ahead.
	DefaultInterval = time.Second
	// requestTimeout bounds a request.
	requestTimeout = 10 * time.Second
	// firstTimeout bounds the first Scheduled Events request, which may
	// take up to two minutes.
	firstTimeout = 2*time.Minute + requestTimeout
	// maxBody bounds what is read of an answer.
	maxBody = 1 << 20
)

// kind is what an event type is for the node.
type kind struct {
	source     string
	mode       v1alpha1.DrainMode
	cordonOnly bool
}

// Options configure a Source.
type Options struct {
	// Endpoint is IMDS's base URL (default DefaultEndpoint).
	Endpoint string
	// VMName is this VM's name as events' Resources give it (default: read
	// from IMDS, instance/compute/name).
	VMName string
	// Interval is how often Scheduled Events is polled (default
	// DefaultInterval).
	Interval time.Duration
	// RetryMax caps the backoff after a failed request, which starts at
	// Interval and doubles (default 5s): internal/backoff's, as the HTTP
	// hooks', each pause up to a fifth longer so that the agents of a
	// region do not call a recovering IMDS together.
	RetryMax time.Duration
	// Client sends the requests (default: one that bypasses proxies, which
	// IMDS refuses).
	Client *http.Client
	// Now is the clock (default time.Now).
	Now func() time.Time
	Log logr.Logger
	// FreezeDrain drains the node for a Freeze event, a pause of a few
	// seconds, instead of only cordoning it.
	FreezeDrain bool
}

// Source watches Azure Scheduled Events. It implements agent.Source and
// agent.Finisher.
type Source struct {
	o    Options
	base *url.URL
	// sleep pauses between requests (backoff.Sleep; tests record).
	sleep   func(context.Context, time.Duration) bool
	baseErr error
	kinds   map[string]kind

	mu     sync.Mutex
	vmName string
	// deadlines keeps each current event's deadline, so that it stays
	// when NotBefore empties as the event starts.
	deadlines map[string]time.Time
	// acked are the current events this source acknowledged.
	acked map[string]bool
}

var (
	_ agent.Source   = (*Source)(nil)
	_ agent.Finisher = (*Source)(nil)
)

// New returns a source; Run starts it.
func New(o Options) *Source {
	if o.Endpoint == "" {
		o.Endpoint = DefaultEndpoint
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.RetryMax <= 0 {
		o.RetryMax = 5 * time.Second
	}
	o.RetryMax = max(o.RetryMax, o.Interval)
	if o.Client == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.Proxy = nil
		o.Client = &http.Client{Transport: t}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Source{
		o:         o,
		sleep:     backoff.Sleep,
		deadlines: map[string]time.Time{},
		acked:     map[string]bool{},
		kinds: map[string]kind{
			"Preempt":   {source: SourcePreempt, mode: v1alpha1.ModeDecommission},
			"Terminate": {source: SourceTerminate, mode: v1alpha1.ModeDecommission},
			"Reboot":    {source: SourceReboot, mode: v1alpha1.ModeMaintenance},
			// The VM moves to another host and loses its local disks.
			"Redeploy": {source: SourceRedeploy, mode: v1alpha1.ModeDecommission},
			"Freeze":   {source: SourceFreeze, mode: v1alpha1.ModeMaintenance, cordonOnly: !o.FreezeDrain},
		},
	}
	base, err := url.Parse(o.Endpoint)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		s.baseErr = fmt.Errorf("azure metadata endpoint %q is not an http URL", o.Endpoint)
	}
	s.base = base
	return s
}

// Name is "azure".
func (s *Source) Name() string { return Name }

// document is the Scheduled Events document.
type document struct {
	DocumentIncarnation json.Number `json:"DocumentIncarnation"`
	Events              []event     `json:"Events"`
}

// event is one scheduled event. Numbers are json.Number, which takes them
// quoted too.
type event struct {
	EventID           string      `json:"EventId"`
	EventType         string      `json:"EventType"`
	ResourceType      string      `json:"ResourceType"`
	Resources         []string    `json:"Resources"`
	EventStatus       string      `json:"EventStatus"`
	NotBefore         string      `json:"NotBefore"`
	Description       string      `json:"Description"`
	EventSource       string      `json:"EventSource"`
	DurationInSeconds json.Number `json:"DurationInSeconds"`
}

// affects reports whether the event is this VM's.
func (e event) affects(vm string) bool {
	return e.ResourceType == "VirtualMachine" &&
		slices.ContainsFunc(e.Resources, func(r string) bool { return strings.EqualFold(r, vm) })
}

// Run reads the VM's name if it was not given, then polls Scheduled Events
// until ctx ends, reporting this VM's events whenever they change. While
// IMDS does not answer it reports the problem MetadataUnavailable, keeps
// the notices it reported, and backs off. It returns nil when ctx ends, or
// an error if the endpoint is not a URL.
func (s *Source) Run(ctx context.Context, r agent.Reporter) error {
	if s.baseErr != nil {
		return s.baseErr
	}
	rep := &reports{r: r}
	vm, ok := s.resolveVMName(ctx, rep)
	if !ok {
		return nil
	}
	s.mu.Lock()
	s.vmName = vm
	s.mu.Unlock()

	first, failing := true, false
	var unknown []agent.Problem // of the last document read
	pauses := backoff.New(s.o.Interval, s.o.RetryMax)
	for {
		doc, err := s.read(ctx, first)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if !failing {
				s.o.Log.Error(err, "reading scheduled events; retrying")
			}
			failing = true
			rep.problems(append([]agent.Problem{s.unavailable(err)}, unknown...))
			if !s.sleep(ctx, pauses.Step()) {
				return nil
			}
			continue
		}
		if failing {
			s.o.Log.Info("scheduled events answer again")
		}
		first, failing = false, false
		pauses = backoff.New(s.o.Interval, s.o.RetryMax)
		var ns []agent.Notice
		ns, unknown = s.update(doc, vm)
		rep.notices(ns)
		rep.problems(unknown)
		if !s.sleep(ctx, s.o.Interval) {
			return nil
		}
	}
}

// resolveVMName returns Options.VMName, or reads it from IMDS, retrying
// until it answers; false when ctx ended first.
func (s *Source) resolveVMName(ctx context.Context, rep *reports) (string, bool) {
	if s.o.VMName != "" {
		return s.o.VMName, true
	}
	pauses := backoff.New(s.o.Interval, s.o.RetryMax)
	for {
		u := s.base.JoinPath("metadata/instance/compute/name")
		u.RawQuery = url.Values{"api-version": {computeAPIVersion}, "format": {"text"}}.Encode()
		body, err := s.do(ctx, http.MethodGet, u, nil, requestTimeout)
		if ctx.Err() != nil {
			return "", false
		}
		name := strings.TrimSpace(string(body))
		if err == nil && name == "" {
			err = errors.New("IMDS gave an empty VM name")
		}
		if err == nil {
			s.o.Log.Info("watching scheduled events", "vm", name)
			return name, true
		}
		rep.problems([]agent.Problem{s.unavailable(fmt.Errorf("reading the VM's name: %w", err))})
		if !s.sleep(ctx, pauses.Step()) {
			return "", false
		}
	}
}

// update takes a new document: this VM's events as notices, sorted by
// deadline, and the problems of those of unknown type.
func (s *Source) update(doc document, vm string) ([]agent.Notice, []agent.Problem) {
	now := s.o.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	ns := []agent.Notice{}
	ps := []agent.Problem{}
	current := map[string]bool{}
	for _, e := range doc.Events {
		if !e.affects(vm) {
			continue
		}
		current[e.EventID] = true
		k, ok := s.kinds[e.EventType]
		if !ok {
			ps = append(ps, agent.Problem{
				Source: Name,
				Reason: ReasonUnknownEvent,
				Message: fmt.Sprintf("scheduled event %s has type %q, which vacate does not know: it requests no drain for it (%s); check the agent's version",
					e.EventID, e.EventType, e.Description),
			})
			continue
		}
		d := s.deadlineLocked(e, now)
		reason := "Azure scheduled event " + e.EventType
		if e.EventSource != "" {
			reason += " (" + e.EventSource + ")"
		}
		reason += ", not before " + d.UTC().Format(time.RFC3339)
		if desc := strings.TrimSpace(e.Description); desc != "" {
			reason += ": " + desc
		}
		ns = append(ns, agent.Notice{
			Source:     k.source,
			CordonOnly: k.cordonOnly,
			Mode:       k.mode,
			Deadline:   d,
			Reason:     reason,
			ID:         e.EventID,
		})
	}
	for id := range s.deadlines {
		if !current[id] {
			delete(s.deadlines, id)
		}
	}
	for id := range s.acked {
		if !current[id] {
			delete(s.acked, id)
		}
	}
	slices.SortFunc(ns, func(a, b agent.Notice) int {
		if c := a.Deadline.Compare(b.Deadline); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	slices.SortFunc(ps, func(a, b agent.Problem) int { return strings.Compare(a.Message, b.Message) })
	return ns, ps
}

// deadlineLocked is the event's NotBefore; once it is empty (the event
// started) or unreadable, the deadline it had, or now for an event first
// seen so.
func (s *Source) deadlineLocked(e event, now time.Time) time.Time {
	if e.NotBefore != "" {
		t, err := parseNotBefore(e.NotBefore)
		if err == nil {
			s.deadlines[e.EventID] = t
			return t
		}
		if _, ok := s.deadlines[e.EventID]; !ok {
			s.o.Log.Error(err, "unreadable NotBefore: the deadline is now", "eventId", e.EventID, "notBefore", e.NotBefore)
		}
	}
	d, ok := s.deadlines[e.EventID]
	if !ok {
		d = now
		s.deadlines[e.EventID] = d
	}
	return d
}

// parseNotBefore reads NotBefore, documented as RFC 1123 in GMT ("Mon, 19
// Sep 2016 18:29:47 GMT"); other zones and RFC 3339 are taken too.
func parseNotBefore(v string) (time.Time, error) {
	var err error
	for _, layout := range []string{time.RFC1123, time.RFC1123Z, time.RFC3339} {
		var t time.Time
		if t, err = time.Parse(layout, v); err == nil {
			return t, nil
		}
	}
	return time.Time{}, err
}

// Finish acknowledges the notice's event, once, if it is still Scheduled
// and this VM's alone: Azure may then start it at once. An event that is
// over, started, or shared with other VMs (whose agents may not be done) is
// left to start at its NotBefore. An error (IMDS does not answer) leaves
// the event unacknowledged, for Finish to be called again.
func (s *Source) Finish(ctx context.Context, n agent.Notice, drained bool) error {
	if s.baseErr != nil {
		return s.baseErr
	}
	if n.ID == "" || !s.ours(n.Source) {
		return fmt.Errorf("notice %s %q is not an Azure scheduled event's", n.Source, n.ID)
	}
	s.mu.Lock()
	vm := s.vmName
	claimed := !s.acked[n.ID]
	s.acked[n.ID] = true
	s.mu.Unlock()
	if !claimed {
		return nil
	}
	acked := false
	defer func() {
		if !acked {
			s.mu.Lock()
			delete(s.acked, n.ID)
			s.mu.Unlock()
		}
	}()
	log := s.o.Log.WithValues("eventId", n.ID, "source", n.Source, "drained", drained)

	doc, err := s.read(ctx, false)
	if err != nil {
		return fmt.Errorf("reading scheduled events to acknowledge %s: %w", n.ID, err)
	}
	i := slices.IndexFunc(doc.Events, func(e event) bool { return e.EventID == n.ID })
	switch {
	case i < 0:
		log.Info("scheduled event is over: nothing to acknowledge")
		return nil
	case doc.Events[i].EventStatus != "Scheduled":
		log.Info("scheduled event already started: nothing to acknowledge", "status", doc.Events[i].EventStatus)
		return nil
	case len(doc.Events[i].Resources) != 1 || !doc.Events[i].affects(vm):
		log.Info("scheduled event also affects other VMs: not acknowledged, it starts at its NotBefore", "resources", doc.Events[i].Resources)
		return nil
	}
	body, err := json.Marshal(map[string]any{"StartRequests": []map[string]string{{"EventId": n.ID}}})
	if err != nil {
		return fmt.Errorf("acknowledging scheduled event %s: %w", n.ID, err)
	}
	u := s.base.JoinPath("metadata/scheduledevents")
	u.RawQuery = url.Values{"api-version": {APIVersion}}.Encode()
	if _, err := s.do(ctx, http.MethodPost, u, body, requestTimeout); err != nil {
		return fmt.Errorf("acknowledging scheduled event %s: %w", n.ID, err)
	}
	acked = true
	log.Info("acknowledged scheduled event")
	return nil
}

// ours reports whether source is one of this source's notice sources.
func (s *Source) ours(source string) bool {
	for _, k := range s.kinds {
		if k.source == source {
			return true
		}
	}
	return false
}

// read gets the Scheduled Events document.
func (s *Source) read(ctx context.Context, first bool) (document, error) {
	u := s.base.JoinPath("metadata/scheduledevents")
	u.RawQuery = url.Values{"api-version": {APIVersion}}.Encode()
	timeout := requestTimeout
	if first {
		timeout = firstTimeout
	}
	body, err := s.do(ctx, http.MethodGet, u, nil, timeout)
	if err != nil {
		return document{}, fmt.Errorf("reading scheduled events: %w", err)
	}
	var doc document
	if err := json.Unmarshal(body, &doc); err != nil {
		return document{}, fmt.Errorf("reading scheduled events: the answer is not a Scheduled Events document: %w", err)
	}
	return doc, nil
}

// do sends a request to IMDS and returns the body of its 200 answer.
func (s *Source) do(ctx context.Context, method string, u *url.URL, body []byte, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Metadata", "true")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.o.Client.Do(req)
	if err != nil {
		if uerr, ok := errors.AsType[*url.Error](err); ok {
			err = uerr.Err // the URL is in the problem's message already
		}
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	out, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s", resp.Status, bytes.TrimSpace(out[:min(len(out), 200)]))
	}
	return out, nil
}

// unavailable is the problem of IMDS not answering.
func (s *Source) unavailable(err error) agent.Problem {
	return agent.Problem{
		Source: Name,
		Reason: ReasonMetadataUnavailable,
		Message: fmt.Sprintf("the instance metadata service at %s does not answer (%v): a scheduled event is not seen until it does; retrying",
			s.o.Endpoint, err),
	}
}

// reports tells a Reporter what changed since it was last told.
type reports struct {
	r                                 agent.Reporter
	reportedNotices, reportedProblems bool
	lastNotices                       []agent.Notice
	lastProblems                      []agent.Problem
}

func (rp *reports) notices(ns []agent.Notice) {
	if rp.reportedNotices && slices.EqualFunc(ns, rp.lastNotices, sameNotice) {
		return
	}
	rp.reportedNotices, rp.lastNotices = true, ns
	rp.r.Notices(ns)
}

func (rp *reports) problems(ps []agent.Problem) {
	if ps == nil {
		ps = []agent.Problem{}
	}
	if rp.reportedProblems && slices.Equal(ps, rp.lastProblems) {
		return
	}
	rp.reportedProblems, rp.lastProblems = true, ps
	rp.r.Problems(ps)
}

func sameNotice(a, b agent.Notice) bool {
	return a.Source == b.Source && a.CordonOnly == b.CordonOnly && a.Mode == b.Mode &&
		a.Deadline.Equal(b.Deadline) && a.Reason == b.Reason && a.ID == b.ID
}

// NoticeSources are the notices the Azure source reports.
func (s *Source) NoticeSources() []string {
	return []string{SourcePreempt, SourceTerminate, SourceReboot, SourceRedeploy, SourceFreeze}
}
