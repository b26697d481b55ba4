// Package aws is vacate-agent's source for the notices of the EC2 instance
// metadata service: spot interruptions, rebalance recommendations, scheduled
// maintenance events and Auto Scaling terminations. It speaks IMDSv2 only.
package aws

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
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/vacate-dev/vacate/internal/agent"
)

// Name is the source's name.
const Name = "aws"

// Defaults of Options.
const (
	DefaultEndpoint = "http://169.254.169.254"
	DefaultInterval = 5 * time.Second
	DefaultTokenTTL = 6 * time.Hour
	// DefaultTimeout bounds each request of the default HTTP client.
	DefaultTimeout = 2 * time.Second
)

// maxTokenTTL is the longest session token IMDSv2 hands out.
const maxTokenTTL = 6 * time.Hour

// ReasonMetadataUnavailable is the Problem reported while the metadata
// service does not answer, or answers with errors or malformed data.
const ReasonMetadataUnavailable = "MetadataUnavailable"

// IMDSv2 token headers and path.
const (
	tokenPath      = "/latest/api/token"
	tokenHeader    = "X-aws-ec2-metadata-token"
	tokenTTLHeader = "X-aws-ec2-metadata-token-ttl-seconds"
)

// maxBody bounds what the source reads of one answer.
const maxBody = 1 << 20

// Options configure a Source. The zero value of each field is its default.
type Options struct {
	// Endpoint is the metadata service's base URL (DefaultEndpoint).
	Endpoint string
	// Interval is how often the source polls (DefaultInterval).
	Interval time.Duration
	// TokenTTL is the life of an IMDSv2 session token, whole seconds from
	// 1s to 6h (DefaultTokenTTL). The source gets a new token after four
	// fifths of it, and at once when the service refuses a token.
	TokenTTL time.Duration
	// RebalanceDrain drains the node on a rebalance recommendation; by
	// default the recommendation only cordons it.
	RebalanceDrain bool
	// Client makes the requests. The default has DefaultTimeout and never
	// goes through a proxy.
	Client *http.Client
	// Clock times the polls and the token's refresh (the real clock).
	Clock clock.Clock
	// Log receives the source's transitions (none by default).
	Log logr.Logger
}

// Source reports the notices of the EC2 instance metadata service. It polls
// four paths, each on every Interval, and maps each to at most one notice:
//
//   - spot/instance-action: "aws-spot", Decommission for terminate,
//     Maintenance for stop and hibernate (the instance comes back), with the
//     action's time as the deadline;
//   - events/recommendations/rebalance: "aws-rebalance", CordonOnly unless
//     RebalanceDrain, Decommission, no deadline;
//   - events/maintenance/scheduled: "aws-maintenance" for the active event
//     with the earliest deadline (one requester per source), its EventId as
//     the ID; the deadline is NotBefore while it is ahead, then NotAfter for
//     a reboot or maintenance whose window is open, else OverdueMargin from
//     when the source saw the event due (see scheduledEvents.notices);
//     Maintenance for reboot and maintenance codes, Decommission for the
//     others (retirement, stop);
//   - autoscaling/target-lifecycle-state: "aws-asg", Decommission, when the
//     state is Terminated (or Warmed:Terminated).
//
// A 404 means no notice. When a path cannot be read (no answer, an HTTP
// error, malformed data) the source keeps what it last read there and
// reports a MetadataUnavailable Problem until it reads it again; it reports
// notices the first time only once every path has been read.
type Source struct {
	opts     Options
	endpoint string
}

var _ agent.Source = (*Source)(nil)

// New returns a Source with opts, or an error when they are not valid.
func New(opts Options) (*Source, error) {
	if opts.Endpoint == "" {
		opts.Endpoint = DefaultEndpoint
	}
	u, err := url.Parse(opts.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("aws metadata endpoint %q is not an http(s) URL with a host", opts.Endpoint)
	}
	switch {
	case opts.Interval == 0:
		opts.Interval = DefaultInterval
	case opts.Interval < 0:
		return nil, fmt.Errorf("aws poll interval %s is negative", opts.Interval)
	}
	if opts.TokenTTL == 0 {
		opts.TokenTTL = DefaultTokenTTL
	}
	if opts.TokenTTL < time.Second || opts.TokenTTL > maxTokenTTL || opts.TokenTTL%time.Second != 0 {
		return nil, fmt.Errorf("aws token TTL %s is not a whole number of seconds from 1s to %s", opts.TokenTTL, maxTokenTTL)
	}
	if opts.Client == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.Proxy = nil // the metadata service is link-local
		opts.Client = &http.Client{Timeout: DefaultTimeout, Transport: t}
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Source{opts: opts, endpoint: strings.TrimRight(opts.Endpoint, "/")}, nil
}

// Name is "aws".
func (s *Source) Name() string { return Name }

// Run polls the metadata service every Interval and reports to r until ctx
// ends, then returns nil. Each call of Run has its own session token.
func (s *Source) Run(ctx context.Context, r agent.Reporter) error {
	p := &poller{src: s}
	p.paths = p.metadataPaths()
	p.state = make([]pathState, len(p.paths))
	for {
		p.poll(ctx)
		if ctx.Err() != nil {
			return nil
		}
		p.report(r)
		select {
		case <-ctx.Done():
			return nil
		case <-s.opts.Clock.After(s.opts.Interval):
		}
	}
}

// metadataPath is one polled path and how its answer maps to notices.
type metadataPath struct {
	path string
	// parse maps a 200 answer to its notices; a 404 means none.
	parse func(body []byte) ([]agent.Notice, error)
}

func (p *poller) metadataPaths() []metadataPath {
	s := p.src
	scheduled := &scheduledEvents{}
	return []metadataPath{
		{path: "/latest/meta-data/spot/instance-action", parse: spotNotices},
		{path: "/latest/meta-data/events/recommendations/rebalance", parse: func(b []byte) ([]agent.Notice, error) {
			return rebalanceNotices(b, s.opts.RebalanceDrain)
		}},
		{path: "/latest/meta-data/events/maintenance/scheduled", parse: func(b []byte) ([]agent.Notice, error) {
			return scheduled.notices(b, s.opts.Clock.Now())
		}},
		{path: "/latest/meta-data/autoscaling/target-lifecycle-state", parse: asgNotices},
	}
}

// pathState is what the source last read at one path.
type pathState struct {
	read    bool // answered at least once
	notices []agent.Notice
	err     error // of the last attempt; nil when it was read
}

// poller is one Run's state: its token and what each path last said.
type poller struct {
	src   *Source
	paths []metadataPath
	state []pathState

	token     string
	refreshAt time.Time

	reported         bool
	lastNotices      []agent.Notice
	problemsReported bool
	lastProblems     []agent.Problem
}

// errNoAnswer marks failures to reach the service at all, after which the
// rest of a poll is not tried.
var errNoAnswer = errors.New("no answer")

// poll reads every path once.
func (p *poller) poll(ctx context.Context) {
	log := p.src.opts.Log
	for i, mp := range p.paths {
		notices, err := p.read(ctx, mp)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			err = fmt.Errorf("reading %s: %w", mp.path, err)
			if p.state[i].err == nil {
				log.Info("EC2 instance metadata cannot be read; keeping what was read before", "path", mp.path, "err", err.Error())
			}
			p.state[i].err = err
			if errors.Is(err, errNoAnswer) {
				for j := i + 1; j < len(p.paths); j++ {
					p.state[j].err = err
				}
				return
			}
			continue
		}
		if p.state[i].err != nil {
			log.Info("EC2 instance metadata can be read again", "path", mp.path)
		}
		p.state[i] = pathState{read: true, notices: notices}
	}
}

// read reads one path and maps its answer.
func (p *poller) read(ctx context.Context, mp metadataPath) ([]agent.Notice, error) {
	body, found, err := p.get(ctx, mp.path)
	if err != nil || !found {
		return nil, err
	}
	return mp.parse(body)
}

// get GETs path with the session token, getting a new token and trying
// once more when the service refuses it. found is false on a 404.
func (p *poller) get(ctx context.Context, path string) (body []byte, found bool, err error) {
	for attempt := 0; ; attempt++ {
		token, err := p.sessionToken(ctx)
		if err != nil {
			return nil, false, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.src.endpoint+path, nil)
		if err != nil {
			return nil, false, fmt.Errorf("building request: %w", err)
		}
		req.Header.Set(tokenHeader, token)
		status, body, err := p.do(req)
		if err != nil {
			return nil, false, err
		}
		switch {
		case status == http.StatusOK:
			return body, true, nil
		case status == http.StatusNotFound:
			return nil, false, nil
		case status == http.StatusUnauthorized && attempt == 0:
			p.src.opts.Log.V(1).Info("IMDSv2 token refused; getting a new one", "path", path)
			p.token = ""
		default:
			return nil, false, fmt.Errorf("unexpected status %d %s", status, http.StatusText(status))
		}
	}
}

// sessionToken returns the IMDSv2 token, getting a new one when there is
// none or it is due for refresh.
func (p *poller) sessionToken(ctx context.Context) (string, error) {
	now := p.src.opts.Clock.Now()
	if p.token != "" && now.Before(p.refreshAt) {
		return p.token, nil
	}
	ttl := p.src.opts.TokenTTL
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, p.src.endpoint+tokenPath, nil)
	if err != nil {
		return "", fmt.Errorf("building token request: %w", err)
	}
	req.Header.Set(tokenTTLHeader, strconv.Itoa(int(ttl/time.Second)))
	status, body, err := p.do(req)
	if err != nil {
		return "", fmt.Errorf("getting an IMDSv2 token: %w", err)
	}
	token := strings.TrimSpace(string(body))
	if status != http.StatusOK || token == "" {
		return "", fmt.Errorf("getting an IMDSv2 token: status %d %s", status, http.StatusText(status))
	}
	p.token, p.refreshAt = token, now.Add(ttl-ttl/5)
	return token, nil
}

// do sends req and reads the answer; an error wraps errNoAnswer.
func (p *poller) do(req *http.Request) (int, []byte, error) {
	resp, err := p.src.opts.Client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %w", errNoAnswer, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return 0, nil, fmt.Errorf("%w: reading the answer: %w", errNoAnswer, err)
	}
	return resp.StatusCode, body, nil
}

// report sends r the notices and problems that changed since the last
// report. Notices wait until every path has been read once.
func (p *poller) report(r agent.Reporter) {
	notices, known := []agent.Notice{}, true
	for _, st := range p.state {
		known = known && st.read
		notices = append(notices, st.notices...)
	}
	if known && (!p.reported || !agent.SameNotices(notices, p.lastNotices)) {
		p.reported, p.lastNotices = true, notices
		p.src.opts.Log.Info("reporting EC2 notices", "notices", len(notices))
		r.Notices(notices)
	}
	problems := p.problems()
	if !p.problemsReported || !slices.Equal(problems, p.lastProblems) {
		p.problemsReported, p.lastProblems = true, problems
		r.Problems(problems)
	}
}

// problems is one MetadataUnavailable problem while any path cannot be
// read, naming them and the first one's error.
func (p *poller) problems() []agent.Problem {
	var failing []string
	var first error
	for i, st := range p.state {
		if st.err == nil {
			continue
		}
		if first == nil {
			first = st.err
		}
		failing = append(failing, p.paths[i].path)
	}
	if first == nil {
		return []agent.Problem{}
	}
	return []agent.Problem{{
		Source: Name,
		Reason: ReasonMetadataUnavailable,
		Message: fmt.Sprintf("EC2 instance metadata at %s cannot be read at %s: %v. "+
			"Notices read before are kept until it can; check that the instance metadata service is enabled "+
			"and, when the agent is not on the host network, that its IMDSv2 hop limit is at least 2",
			p.src.endpoint, strings.Join(failing, ", "), first),
	}}
}

// NoticeSources are the notices the AWS source reports.
func (s *Source) NoticeSources() []string {
	return []string{SourceSpot, SourceRebalance, SourceMaintenance, SourceASG}
}
