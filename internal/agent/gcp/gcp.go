// Package gcp is the agent's source for Google Compute Engine: it watches
// the metadata server's instance/preempted and instance/maintenance-event
// keys with hanging GETs and reports a preemption or a terminating host
// maintenance as a notice.
//
// What the metadata server documents, and this source relies on:
//   - every request carries Metadata-Flavor: Google and no X-Forwarded-For
//     (a proxied request is rejected: the default client bypasses proxies),
//     and every answer carries Metadata-Flavor: Google and an ETag;
//   - wait_for_change=true hangs until the value changes; last_etag returns
//     at once when the value's ETag is no longer the one given, so no change
//     is lost between two hanging GETs; timeout_sec ends the hang with the
//     current value;
//   - instance/preempted turns "TRUE" when Compute Engine preempts a Spot
//     or preemptible VM, which then has 30 seconds before it stops;
//   - instance/maintenance-event is "NONE", "MIGRATE_ON_HOST_MAINTENANCE"
//     (the VM is live migrated: it keeps running, so nothing is drained) or
//     "TERMINATE_ON_HOST_MAINTENANCE" (the VM is stopped for maintenance and
//     restarted after it). A value it does not know is a problem for a
//     person to look at, never a drain;
//   - the value changes 60 seconds before the event ("Query the metadata
//     server for maintenance event notices"), but Compute Engine gives VMs
//     with GPUs a 1-hour notice ("Handle GPU host maintenance events");
//   - instance/machine-type is projects/PROJECT_NUM/machineTypes/NAME
//     ("Predefined metadata keys"), and changes only while the VM is
//     stopped; every machine type of the accelerator-optimized series A2,
//     A3, A4, A4X, G2 and G4 has GPUs attached ("Accelerator-optimized
//     machine family"). The source reads it once, and gives a VM of those
//     series the hour. GPUs attached to an N1 VM show in no documented
//     metadata key: such a VM gets the 60 seconds.
package gcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/agent"
	"github.com/vacate-dev/vacate/internal/backoff"
)

// Name is the source's name.
const Name = "gcp"

// Notice sources.
const (
	SourcePreempted   = "gcp-preempted"
	SourceMaintenance = "gcp-maintenance"
)

// Problem reasons.
const (
	// ReasonMetadataUnavailable: the metadata server does not answer, or
	// not as the metadata server.
	ReasonMetadataUnavailable = "MetadataUnavailable"
	// ReasonUnexpectedValue: a key holds a value the source does not know.
	ReasonUnexpectedValue = "UnexpectedMetadataValue"
)

// Documented notice periods.
const (
	// PreemptionNotice is how long a preempted VM has before it stops.
	PreemptionNotice = 30 * time.Second
	// MaintenanceNotice is how long before a host maintenance event
	// maintenance-event changes on a VM without GPUs.
	MaintenanceNotice = 60 * time.Second
	// GPUMaintenanceNotice is how long before a host maintenance event
	// maintenance-event changes on a VM with GPUs.
	GPUMaintenanceNotice = time.Hour
)

// gpuSeries are the machine series whose machine types all have GPUs
// attached: the accelerator-optimized family.
var gpuSeries = []string{"a2", "a3", "a4", "a4x", "g2", "g4"}

// Values of instance/maintenance-event.
const (
	MaintenanceNone      = "NONE"
	MaintenanceMigrate   = "MIGRATE_ON_HOST_MAINTENANCE"
	MaintenanceTerminate = "TERMINATE_ON_HOST_MAINTENANCE"
)

// DefaultEndpoint is the metadata server.
const DefaultEndpoint = "http://metadata.google.internal"

// Keys watched, in the order their notices are reported.
const (
	keyPreempted   = "instance/preempted"
	keyMaintenance = "instance/maintenance-event"
)

var keys = []string{keyPreempted, keyMaintenance}

// keyMachineType is read once: it does not change while the VM runs.
const keyMachineType = "instance/machine-type"

// requestGrace is how long a request may take beyond the wait it asks for.
const requestGrace = 10 * time.Second

// maxBody bounds what is read of an answer.
const maxBody = 64 << 10

// Options configure a Source.
type Options struct {
	// Endpoint is the metadata server's base URL (default DefaultEndpoint).
	Endpoint string
	// Client sends the requests (default: one that bypasses proxies, which
	// the metadata server refuses). A Client.Timeout, if set, must exceed
	// WaitTimeout or it cuts every hanging GET short.
	Client *http.Client
	// WaitTimeout is the timeout_sec of each hanging GET, in whole seconds
	// (default 60s).
	WaitTimeout time.Duration
	// RetryMin and RetryMax bound the backoff after a failed request
	// (default 500ms and 5s: short, since a preemption gives 30 seconds):
	// internal/backoff's, as the HTTP hooks', doubling from RetryMin up to
	// RetryMax, each pause up to a fifth longer so that the agents of a zone
	// do not call a recovering metadata server together.
	RetryMin, RetryMax time.Duration
	// Now is the clock notices' deadlines are taken from (default time.Now).
	Now func() time.Time
	Log logr.Logger
}

// Source watches the Compute Engine metadata server. It implements
// agent.Source.
type Source struct {
	o Options
	// sleep pauses between failed requests (backoff.Sleep; tests record).
	sleep func(context.Context, time.Duration) bool
}

var _ agent.Source = (*Source)(nil)

// New returns a source; Run starts it.
func New(o Options) *Source {
	if o.Endpoint == "" {
		o.Endpoint = DefaultEndpoint
	}
	if o.Client == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.Proxy = nil
		o.Client = &http.Client{Transport: t}
	}
	if o.WaitTimeout < time.Second {
		o.WaitTimeout = 60 * time.Second
	}
	if o.RetryMin <= 0 {
		o.RetryMin = 500 * time.Millisecond
	}
	if o.RetryMax < o.RetryMin {
		o.RetryMax = max(5*time.Second, o.RetryMin)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Source{o: o, sleep: backoff.Sleep}
}

// Name is "gcp".
func (s *Source) Name() string { return Name }

// answer is one request's outcome for a key.
type answer struct {
	key   string
	value string
	err   error
}

// Run watches the two keys until ctx ends, reporting the notices once both
// have answered (or at once if one holds a notice), then on every change.
// While the metadata server does not answer it reports the problem
// MetadataUnavailable and keeps the notices it reported. It returns nil
// when ctx ends, or an error if the endpoint is not a URL.
func (s *Source) Run(ctx context.Context, r agent.Reporter) error {
	base, err := url.Parse(s.o.Endpoint)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return fmt.Errorf("gcp metadata endpoint %q is not an http URL", s.o.Endpoint)
	}
	ctx, cancel := context.WithCancel(ctx)
	answers := make(chan answer)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	for _, key := range keys {
		wg.Go(func() { s.watch(ctx, base, key, answers) })
	}
	wg.Go(func() { s.readOnce(ctx, base, keyMachineType, answers) })
	st := newState(s.o.Endpoint, s.o.Log)
	for {
		select {
		case <-ctx.Done():
			return nil
		case a := <-answers:
			st.apply(a, s.o.Now)
			st.report(r)
		}
	}
}

// readOnce reads key until it answers, with the same backoff as watch,
// sending every outcome.
func (s *Source) readOnce(ctx context.Context, base *url.URL, key string, out chan<- answer) {
	s.poll(ctx, base, key, out, true)
}

// watch reads key until ctx ends: a plain GET first (and after a failure,
// so a recovery shows at once), then hanging GETs that each pass the ETag
// of the answer before.
func (s *Source) watch(ctx context.Context, base *url.URL, key string, out chan<- answer) {
	s.poll(ctx, base, key, out, false)
}

// poll sends every outcome of reading key, backing off after a failure;
// with once it stops at the first answer, else it goes on with hanging
// GETs until ctx ends.
func (s *Source) poll(ctx context.Context, base *url.URL, key string, out chan<- answer, once bool) {
	etag := ""
	pauses := backoff.New(s.o.RetryMin, s.o.RetryMax)
	for {
		value, next, err := s.get(ctx, base, key, etag)
		if ctx.Err() != nil {
			return
		}
		if !once {
			etag = next // empty after a failure
		}
		select {
		case out <- answer{key: key, value: value, err: err}:
		case <-ctx.Done():
			return
		}
		if err == nil && once {
			return
		}
		if err == nil {
			pauses = backoff.New(s.o.RetryMin, s.o.RetryMax)
			continue
		}
		if !s.sleep(ctx, pauses.Step()) {
			return
		}
	}
}

// get reads key: at once without etag, else waiting for its ETag to differ
// from etag. It returns the value and its ETag.
func (s *Source) get(ctx context.Context, base *url.URL, key, etag string) (string, string, error) {
	u := base.JoinPath("computeMetadata/v1", key)
	timeout := requestGrace
	if etag != "" {
		sec := int((s.o.WaitTimeout + time.Second - 1) / time.Second)
		u.RawQuery = url.Values{
			"wait_for_change": {"true"},
			"last_etag":       {etag},
			"timeout_sec":     {strconv.Itoa(sec)},
		}.Encode()
		timeout += time.Duration(sec) * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", "", fmt.Errorf("reading %s: %w", key, err)
	}
	req.Header.Set("Metadata-Flavor", "Google")
	resp, err := s.o.Client.Do(req)
	if err != nil {
		// The URL, with its changing last_etag, stays out of the message.
		if uerr, ok := errors.AsType[*url.Error](err); ok {
			err = uerr.Err
		}
		return "", "", fmt.Errorf("reading %s: %w", key, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return "", "", fmt.Errorf("reading %s: %w", key, err)
	}
	if resp.Header.Get("Metadata-Flavor") != "Google" {
		return "", "", fmt.Errorf("reading %s: the answer (%s) lacks Metadata-Flavor: Google, so it is not the metadata server's", key, resp.Status)
	}
	if resp.StatusCode != http.StatusOK {
		return "", "", fmt.Errorf("reading %s: %s", key, resp.Status)
	}
	tag := resp.Header.Get("ETag")
	if tag == "" {
		return "", "", fmt.Errorf("reading %s: the answer has no ETag", key)
	}
	return strings.TrimSpace(string(body)), tag, nil
}

// watched is what is known of one key.
type watched struct {
	known   bool // it answered at least once
	value   string
	changed time.Time // when the source read the value first
	err     error     // the last request's, nil once it answers again
	notice  *agent.Notice
	problem *agent.Problem // a value the source does not know
}

// state is what Run reports from: each key's last answer, and what it
// reported last.
type state struct {
	endpoint string
	log      logr.Logger
	keys     map[string]*watched
	// machine is instance/machine-type's: its value, once read, or the
	// error of the last attempt, and a problem when the value is not of
	// the documented form.
	machine watched

	reportedNotices, reportedProblems bool
	notices                           []agent.Notice
	problems                          []agent.Problem
}

func newState(endpoint string, log logr.Logger) *state {
	st := &state{endpoint: endpoint, log: log, keys: map[string]*watched{}}
	for _, k := range keys {
		st.keys[k] = &watched{}
	}
	return st
}

// apply records an answer. A failure keeps the key's value and notice; a
// value that changed gets its notice anew, its deadline counted from now;
// the machine type, once read, sets the notice of a host maintenance
// already under way anew, its deadline counted from when it was read.
func (st *state) apply(a answer, now func() time.Time) {
	w := st.keys[a.key]
	if a.key == keyMachineType {
		w = &st.machine
	}
	if a.err != nil {
		if w.err == nil {
			st.log.Error(a.err, "metadata server does not answer; retrying", "key", a.key)
		}
		w.err = a.err
		return
	}
	if w.err != nil {
		st.log.Info("metadata server answers again", "key", a.key)
	}
	w.err = nil
	if w.known && w.value == a.value {
		return
	}
	st.log.Info("metadata value", "key", a.key, "value", a.value)
	w.known, w.value = true, a.value
	if a.key == keyMachineType {
		if _, ok := machineTypeName(a.value); !ok {
			w.problem = &agent.Problem{
				Source: Name,
				Reason: ReasonUnexpectedValue,
				Message: fmt.Sprintf("metadata key %s is %q, not projects/PROJECT_NUM/machineTypes/NAME: a host maintenance notice gets the %s of a VM without GPUs",
					a.key, a.value, MaintenanceNotice),
			}
		}
		for _, k := range keys {
			if kw := st.keys[k]; kw.known {
				kw.notice, kw.problem = interpret(k, kw.value, kw.changed, st.machineType())
			}
		}
		return
	}
	w.changed = now()
	w.notice, w.problem = interpret(a.key, a.value, w.changed, st.machineType())
}

// machineType is the VM's machine type name, "" while unknown.
func (st *state) machineType() string {
	name, _ := machineTypeName(st.machine.value)
	return name
}

// machineTypeName is the name in a value of instance/machine-type.
func machineTypeName(value string) (string, bool) {
	parts := strings.Split(value, "/")
	if len(parts) != 4 || parts[0] != "projects" || parts[1] == "" || parts[2] != "machineTypes" || parts[3] == "" {
		return "", false
	}
	return parts[3], true
}

// hasGPUs reports whether every VM of the machine type has GPUs: it is of
// an accelerator-optimized series ("a3" of "a3-highgpu-8g").
func hasGPUs(machineType string) bool {
	series, _, _ := strings.Cut(machineType, "-")
	return slices.Contains(gpuSeries, series)
}

// interpret turns a key's value, read first at at on a VM of machineType
// ("" when unknown), into its notice, or a problem when the value is not
// one the documentation gives.
func interpret(key, value string, at time.Time, machineType string) (*agent.Notice, *agent.Problem) {
	switch {
	case key == keyPreempted && value == "TRUE":
		d := at.Add(PreemptionNotice)
		return &agent.Notice{
			Source:   SourcePreempted,
			Mode:     v1alpha1.ModeDecommission,
			Deadline: d,
			Reason:   fmt.Sprintf("GCP preemption: Compute Engine stops the VM by %s", d.UTC().Format(time.RFC3339)),
		}, nil
	case key == keyPreempted && value == "FALSE":
		return nil, nil
	case key == keyMaintenance && value == MaintenanceTerminate:
		d := at.Add(MaintenanceNotice)
		reason := fmt.Sprintf("GCP host maintenance: Compute Engine stops the VM for maintenance (%s) from %s", value, d.UTC().Format(time.RFC3339))
		if hasGPUs(machineType) {
			d = at.Add(GPUMaintenanceNotice)
			reason = fmt.Sprintf("GCP host maintenance: Compute Engine stops the VM for maintenance (%s) from %s: a VM with GPUs (machine type %s) is told an hour before",
				value, d.UTC().Format(time.RFC3339), machineType)
		}
		return &agent.Notice{
			Source:   SourceMaintenance,
			Mode:     v1alpha1.ModeMaintenance,
			Deadline: d,
			Reason:   reason,
		}, nil
	case key == keyMaintenance && (value == MaintenanceNone || value == MaintenanceMigrate):
		// A live migration pauses the VM at most briefly: nothing to drain.
		return nil, nil
	}
	return nil, &agent.Problem{
		Source:  Name,
		Reason:  ReasonUnexpectedValue,
		Message: fmt.Sprintf("metadata key %s is %q, a value vacate does not know: it requests no drain for it; check the agent's version", key, value),
	}
}

// report tells r the notices and problems that changed since it was last
// told. Notices wait until both keys answered once (a failure is not an
// answer: an agent restarted while the server is down must not report "no
// notice" and withdraw a drain it asked for), unless one holds a notice
// already.
func (st *state) report(r agent.Reporter) {
	var ns []agent.Notice
	var ps []agent.Problem
	var down []string
	ready := true
	for _, k := range keys {
		w := st.keys[k]
		ready = ready && w.known
		if w.notice != nil {
			ns = append(ns, *w.notice)
		}
		if w.err != nil {
			down = append(down, w.err.Error())
		}
	}
	if len(down) > 0 {
		ps = append(ps, agent.Problem{
			Source: Name,
			Reason: ReasonMetadataUnavailable,
			Message: fmt.Sprintf("the metadata server at %s does not answer (%s): a preemption or host maintenance is not seen until it does; retrying",
				st.endpoint, strings.Join(down, "; ")),
		})
	} else if err := st.machine.err; err != nil {
		ps = append(ps, agent.Problem{
			Source: Name,
			Reason: ReasonMetadataUnavailable,
			Message: fmt.Sprintf("the metadata server at %s does not answer (%s): until it does, a host maintenance notice gets the %s of a VM without GPUs; retrying",
				st.endpoint, err, MaintenanceNotice),
		})
	}
	for _, k := range keys {
		if p := st.keys[k].problem; p != nil {
			ps = append(ps, *p)
		}
	}
	if p := st.machine.problem; p != nil {
		ps = append(ps, *p)
	}
	if ns == nil {
		ns = []agent.Notice{}
	}
	if ps == nil {
		ps = []agent.Problem{}
	}
	if (ready || len(ns) > 0) && (!st.reportedNotices || !agent.SameNotices(ns, st.notices)) {
		st.reportedNotices, st.notices = true, ns
		r.Notices(ns)
	}
	if (ready || len(ps) > 0) && (!st.reportedProblems || !slices.Equal(ps, st.problems)) {
		st.reportedProblems, st.problems = true, ps
		r.Problems(ps)
	}
}

// NoticeSources are the notices the GCP source reports.
func (s *Source) NoticeSources() []string { return []string{SourcePreempted, SourceMaintenance} }
