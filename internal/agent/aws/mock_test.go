package aws

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vacate-dev/vacate/internal/dev/doubles/awstest"
	"github.com/vacate-dev/vacate/internal/dev/doubles/reports"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// waitTimeout bounds every wait for the source.
const waitTimeout = 30 * time.Second

// startMock runs the real mock with args until the test ends.
func startMock(t *testing.T, args ...string) *awstest.Mock { return awstest.StartMock(t, args...) }

// mockToken gets an IMDSv2 token from endpoint.
func mockToken(endpoint, ttl string) (string, error) { return awstest.Token(endpoint, ttl) }

func send(req *http.Request) (int, string, error) {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", err
	}
	return resp.StatusCode, strings.TrimSpace(string(b)), nil
}

// recorder keeps what the source reports.
type recorder = reports.Recorder

// countingTransport counts the source's requests, so a test can wait for
// more polls without sleeping a guessed time.
type countingTransport struct {
	n atomic.Int64
}

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(req)
}

// waitRequests waits until the source has made n more requests.
func (c *countingTransport) waitRequests(t *testing.T, n int64) {
	t.Helper()
	target := c.n.Load() + n
	testutil.Eventually(t, waitTimeout, fmt.Sprintf("%d more requests from the source", n), func() error {
		if got := c.n.Load(); got < target {
			return fmt.Errorf("the source made %d of them", n-(target-got))
		}
		return nil
	})
}

// runSource runs a Source with opts against endpoint until the test ends.
// Unless opts set them, it polls every 50ms with a counted client.
func runSource(t *testing.T, endpoint string, opts Options) (*recorder, *countingTransport) {
	t.Helper()
	ct := &countingTransport{}
	opts.Endpoint = endpoint
	if opts.Interval == 0 {
		opts.Interval = 50 * time.Millisecond
	}
	if opts.Client == nil {
		opts.Client = &http.Client{Transport: ct, Timeout: 5 * time.Second}
	}
	src, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	rec := reports.Run(t, src)
	return rec, ct
}
