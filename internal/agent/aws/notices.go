package aws

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/agent"
)

// Notice sources, and requester names after "agent:".
const (
	SourceSpot        = "aws-spot"
	SourceRebalance   = "aws-rebalance"
	SourceMaintenance = "aws-maintenance"
	SourceASG         = "aws-asg"
)

// eventTimeLayout is how scheduled events write their times
// ("21 Jan 2019 09:00:43 GMT").
const eventTimeLayout = "2 Jan 2006 15:04:05 GMT"

// spotNotices maps spot/instance-action, {"action": "terminate", "time":
// "2026-11-23T12:00:00Z"}. An action other than stop or hibernate is taken
// as the instance going away.
func spotNotices(body []byte) ([]agent.Notice, error) {
	var a struct {
		Action string `json:"action"`
		Time   string `json:"time"`
	}
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, fmt.Errorf("decoding spot instance action: %w", err)
	}
	if a.Action == "" {
		return nil, fmt.Errorf("spot instance action %q has no action", body)
	}
	at, err := time.Parse(time.RFC3339, a.Time)
	if err != nil {
		return nil, fmt.Errorf("spot instance action time: %w", err)
	}
	mode := v1alpha1.ModeDecommission
	if a.Action == "stop" || a.Action == "hibernate" {
		mode = v1alpha1.ModeMaintenance
	}
	return []agent.Notice{{
		Source:   SourceSpot,
		Mode:     mode,
		Deadline: at,
		Reason:   fmt.Sprintf("AWS spot interruption: %s at %s", a.Action, at.UTC().Format(time.RFC3339)),
	}}, nil
}

// rebalanceNotices maps events/recommendations/rebalance, {"noticeTime":
// "2026-11-23T12:00:00Z"}: the node is cordoned, and drained too when drain
// is set.
func rebalanceNotices(body []byte, drain bool) ([]agent.Notice, error) {
	var r struct {
		NoticeTime string `json:"noticeTime"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("decoding rebalance recommendation: %w", err)
	}
	at, err := time.Parse(time.RFC3339, r.NoticeTime)
	if err != nil {
		return nil, fmt.Errorf("rebalance recommendation notice time: %w", err)
	}
	return []agent.Notice{{
		Source:     SourceRebalance,
		CordonOnly: !drain,
		Mode:       v1alpha1.ModeDecommission,
		Reason: fmt.Sprintf("AWS rebalance recommendation at %s: the spot instance is at elevated risk of interruption",
			at.UTC().Format(time.RFC3339)),
	}}, nil
}

// scheduledEvent is one event of events/maintenance/scheduled.
type scheduledEvent struct {
	Code        string
	Description string
	State       string
	EventID     string `json:"EventId"`
	NotBefore   string
	NotAfter    string
}

// maintenanceNotices maps events/maintenance/scheduled, a list of events,
// to one notice for the active event that starts first (the agent has one
// requester per source), or none when no event is active.
func maintenanceNotices(body []byte) ([]agent.Notice, error) {
	var events []scheduledEvent
	if err := json.Unmarshal(body, &events); err != nil {
		return nil, fmt.Errorf("decoding scheduled events: %w", err)
	}
	var first *scheduledEvent
	var firstAt time.Time
	for i, e := range events {
		if e.State != "active" {
			continue
		}
		at, err := time.Parse(eventTimeLayout, e.NotBefore)
		if err != nil {
			return nil, fmt.Errorf("scheduled event %s NotBefore: %w", e.EventID, err)
		}
		if first == nil || at.Before(firstAt) || (at.Equal(firstAt) && e.EventID < first.EventID) {
			first, firstAt = &events[i], at
		}
	}
	if first == nil {
		return nil, nil
	}
	return []agent.Notice{{
		Source:   SourceMaintenance,
		ID:       first.EventID,
		Mode:     eventMode(first.Code),
		Deadline: firstAt,
		Reason: fmt.Sprintf("AWS scheduled event %s (%s) not before %s: %s",
			first.Code, first.EventID, firstAt.Format(time.RFC3339), first.Description),
	}}, nil
}

// eventMode is Maintenance for the event codes after which the instance
// comes back (reboots and maintenance), and Decommission for the others
// (instance-retirement, instance-stop, codes not known yet).
func eventMode(code string) v1alpha1.DrainMode {
	switch code {
	case "instance-reboot", "system-reboot", "system-maintenance":
		return v1alpha1.ModeMaintenance
	default:
		return v1alpha1.ModeDecommission
	}
}

// asgNotices maps autoscaling/target-lifecycle-state, plain text such as
// "InService" or "Warmed:Running": Terminated (in service or in a warm
// pool) means Auto Scaling is terminating the instance.
func asgNotices(body []byte) ([]agent.Notice, error) {
	switch state := strings.TrimSpace(string(body)); state {
	case "Terminated", "Warmed:Terminated":
		return []agent.Notice{{
			Source: SourceASG,
			Mode:   v1alpha1.ModeDecommission,
			Reason: "Auto Scaling is terminating the instance",
		}}, nil
	default:
		return nil, nil
	}
}
