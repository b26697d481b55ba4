package operator

import (
	"strings"
	"testing"
	"time"
)

func TestValidateLeaderElection(t *testing.T) {
	for _, tc := range []struct {
		name                string
		lease, renew, retry time.Duration
		leaderElect         bool
		want                string // "" valid, else part of the error
	}{
		{name: "defaults", lease: 15 * time.Second, renew: 10 * time.Second, retry: 2 * time.Second, leaderElect: true},
		{name: "tests' short settings", lease: 6 * time.Second, renew: 4 * time.Second, retry: time.Second, leaderElect: true},
		{name: "renew deadline equal to the lease", lease: 10 * time.Second, renew: 10 * time.Second, retry: 2 * time.Second, leaderElect: true,
			want: "--leader-election-renew-deadline (10s) must be shorter than --leader-election-lease-duration (10s)"},
		{name: "renew deadline longer than the lease", lease: 5 * time.Second, renew: 10 * time.Second, retry: 2 * time.Second, leaderElect: true,
			want: "must be shorter than --leader-election-lease-duration (5s)"},
		{name: "retry period too long", lease: 15 * time.Second, renew: 10 * time.Second, retry: 9 * time.Second, leaderElect: true,
			want: "must be longer than 1.2 times --leader-election-retry-period (9s)"},
		{name: "zero", lease: 15 * time.Second, renew: 10 * time.Second, leaderElect: true, want: "must be positive"},
		{name: "without leader election nothing is checked", lease: 1, renew: 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			o.LeaderElect, o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = tc.leaderElect, tc.lease, tc.renew, tc.retry
			err := o.ValidateLeaderElection()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one with %q", err, tc.want)
			}
		})
	}
}
