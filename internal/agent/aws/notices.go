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

// OverdueMargin is the deadline of a scheduled event that is due: one that
// may happen at any moment, with no documented time left. It is counted
// from when the source first saw the event due, and is the shortest notice
// EC2 documents for taking an instance away (a spot interruption's two
// minutes): the drain runs as for a spot interruption that came now.
const OverdueMargin = 2 * time.Minute

// scheduledEvent is one event of events/maintenance/scheduled.
type scheduledEvent struct {
	Code        string
	Description string
	State       string
	EventID     string `json:"EventId"`
	NotBefore   string
	NotAfter    string
}

// scheduledEvents maps events/maintenance/scheduled. It remembers, per
// event, the deadline it gave the event when it first saw it due, so that
// polls do not move it.
type scheduledEvents struct {
	due map[string]time.Time // by EventId
}

// notices maps the list of events to one notice, for the active event with
// the earliest deadline (the agent has one requester per source), or none
// when no event is active. AWS documents NotBefore as the event's earliest
// start and NotAfter as its latest end; a stop or a retirement happens at
// the scheduled time (NotBefore), a reboot or maintenance within its window.
// So an event's deadline is:
//   - NotBefore, while it is ahead on the agent's clock;
//   - NotAfter, once NotBefore has passed, for a reboot or maintenance whose
//     NotAfter is ahead: it may happen at any moment until then;
//   - otherwise (a stop or retirement past NotBefore, an event without
//     NotAfter or past it) the event is due: OverdueMargin from when the
//     source first saw it so, kept while the event stays active.
func (s *scheduledEvents) notices(body []byte, now time.Time) ([]agent.Notice, error) {
	var events []scheduledEvent
	if err := json.Unmarshal(body, &events); err != nil {
		return nil, fmt.Errorf("decoding scheduled events: %w", err)
	}
	type active struct {
		e        *scheduledEvent
		deadline time.Time
		reason   string
	}
	var found []active
	for i, e := range events {
		if e.State != "active" {
			continue
		}
		notBefore, err := time.Parse(eventTimeLayout, e.NotBefore)
		if err != nil {
			return nil, fmt.Errorf("scheduled event %s NotBefore: %w", e.EventID, err)
		}
		var notAfter time.Time
		if e.NotAfter != "" {
			if notAfter, err = time.Parse(eventTimeLayout, e.NotAfter); err != nil {
				return nil, fmt.Errorf("scheduled event %s NotAfter: %w", e.EventID, err)
			}
		}
		a := active{e: &events[i]}
		switch {
		case now.Before(notBefore):
			a.deadline = notBefore
			a.reason = fmt.Sprintf("AWS scheduled event %s (%s) not before %s: %s",
				e.Code, e.EventID, notBefore.Format(time.RFC3339), e.Description)
		case inWindow(e.Code) && now.Before(notAfter):
			a.deadline = notAfter
			a.reason = fmt.Sprintf("AWS scheduled event %s (%s) may start at any moment: its window opened at %s and ends by %s: %s",
				e.Code, e.EventID, notBefore.Format(time.RFC3339), notAfter.Format(time.RFC3339), e.Description)
		default:
			a.reason = fmt.Sprintf("AWS scheduled event %s (%s) was due at %s and may happen at any moment: %s",
				e.Code, e.EventID, notBefore.Format(time.RFC3339), e.Description)
		}
		found = append(found, a)
	}
	due := map[string]time.Time{}
	var first *active
	for i := range found {
		a := &found[i]
		if a.deadline.IsZero() {
			d, ok := s.due[a.e.EventID]
			if !ok {
				d = now.Add(OverdueMargin)
			}
			a.deadline, due[a.e.EventID] = d, d
		}
		if first == nil || a.deadline.Before(first.deadline) || (a.deadline.Equal(first.deadline) && a.e.EventID < first.e.EventID) {
			first = a
		}
	}
	s.due = due
	if first == nil {
		return nil, nil
	}
	return []agent.Notice{{
		Source:   SourceMaintenance,
		ID:       first.e.EventID,
		Mode:     eventMode(first.e.Code),
		Deadline: first.deadline,
		Reason:   first.reason,
	}}, nil
}

// inWindow reports whether events of code happen within their window
// (NotBefore to NotAfter) rather than at NotBefore: reboots and
// maintenance, by AWS's documentation.
func inWindow(code string) bool {
	switch code {
	case "instance-reboot", "system-reboot", "system-maintenance":
		return true
	default:
		return false
	}
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
