package monitoring

import (
	"context"
	"log/slog"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
)

// expectation is whether an alert, with these labels (besides alertname
// and the rule's own), fires at a minute of a scenario.
type expectation struct {
	minute int
	alert  string
	labels map[string]string
	firing bool
}

// alertScenario is sample series (promqltest's load syntax; the first
// sample is at Unix time 0, so a timestamp-valued series' value is a
// minute times 60) and what the rules do with them.
type alertScenario struct {
	name   string
	series string
	expect []expectation
}

// minutes is how long each scenario is evaluated, once a minute.
const minutes = 90

var alertScenarios = []alertScenario{
	{
		name: "drains blocked past a deadline, or an hour without one",
		series: `
			vacate_drain_blocked_since_timestamp_seconds{node="past-deadline",reason="PodDisruptionBudget"} 60x90
			vacate_drain_deadline_timestamp_seconds{node="past-deadline"} 600x90
			vacate_drain_blocked_since_timestamp_seconds{node="no-deadline",reason="Evacuation"} 60x90
			vacate_drain_blocked_since_timestamp_seconds{node="far-deadline",reason="PodDisruptionBudget"} 60x90
			vacate_drain_deadline_timestamp_seconds{node="far-deadline"} 7200x90
			vacate_drain_blocked_since_timestamp_seconds{node="recent",reason="PodDisruptionBudget"} 3000x90
			vacate_drain_deadline_timestamp_seconds{node="done-in-time"} 600x90`,
		expect: []expectation{
			// Past its deadline from minute 11, pending 5m.
			{14, "VacateDrainBlockedTooLong", map[string]string{"node": "past-deadline", "reason": "PodDisruptionBudget"}, false},
			{17, "VacateDrainBlockedTooLong", map[string]string{"node": "past-deadline", "reason": "PodDisruptionBudget"}, true},
			// No deadline: blocked for over an hour from minute 62.
			{65, "VacateDrainBlockedTooLong", map[string]string{"node": "no-deadline", "reason": "Evacuation"}, false},
			{68, "VacateDrainBlockedTooLong", map[string]string{"node": "no-deadline", "reason": "Evacuation"}, true},
			// A deadline two hours off: the hour rule does not apply.
			{89, "VacateDrainBlockedTooLong", map[string]string{"node": "far-deadline", "reason": "PodDisruptionBudget"}, false},
			{89, "VacateDrainBlockedTooLong", map[string]string{"node": "recent", "reason": "PodDisruptionBudget"}, false},
		},
	},
	{
		name: "a provider that stopped beating, and one that beats",
		series: `
			vacate_evacuation_heartbeat_timestamp_seconds{evacuation="n1.volumes",node="n1",provider="silent"} 60x90
			vacate_evacuation_provider_timeout_seconds{provider="silent"} 300x90
			vacate_evacuation_heartbeat_timestamp_seconds{evacuation="n2.volumes",node="n2",provider="alive"} 0+60x90
			vacate_evacuation_provider_timeout_seconds{provider="alive"} 300x90`,
		expect: []expectation{
			// Silent for more than 300s from minute 7, pending 5m.
			{10, "VacateEvacuationStale", map[string]string{"evacuation": "n1.volumes", "node": "n1", "provider": "silent"}, false},
			{12, "VacateEvacuationStale", map[string]string{"evacuation": "n1.volumes", "node": "n1", "provider": "silent"}, true},
			{89, "VacateEvacuationStale", map[string]string{"evacuation": "n2.volumes", "node": "n2", "provider": "alive"}, false},
		},
	},
	{
		name: "deleted nodes held past half their timeout, and not yet",
		series: `
			vacate_node_deletion_timestamp_seconds{node="held"} 60x90
			vacate_node_deletion_release_timestamp_seconds{node="held"} 1860x90
			vacate_node_deletion_timestamp_seconds{node="young"} 3000x90
			vacate_node_deletion_release_timestamp_seconds{node="young"} 10200x90`,
		expect: []expectation{
			// Past half of 30m from minute 17, pending 1m.
			{16, "VacateNodeDeletionHeld", map[string]string{"node": "held"}, false},
			{18, "VacateNodeDeletionHeld", map[string]string{"node": "held"}, true},
			{89, "VacateNodeDeletionHeld", map[string]string{"node": "young"}, false},
		},
	},
	{
		name: "a namespace whose replicas all stand by, and one that leads",
		series: `
			vacate_controller_leader{namespace="leaderless",pod="a"} 0x90
			vacate_controller_leader{namespace="leaderless",pod="b"} 0x90
			vacate_controller_leader{namespace="led",pod="a"} 1x90
			vacate_controller_leader{namespace="led",pod="b"} 0x90`,
		expect: []expectation{
			{3, "VacateControllerNoLeader", map[string]string{"namespace": "leaderless"}, false},
			{6, "VacateControllerNoLeader", map[string]string{"namespace": "leaderless"}, true},
			{89, "VacateControllerNoLeader", map[string]string{"namespace": "led"}, false},
		},
	},
	{
		name: "no controller scraped at all",
		series: `
			vacate_drains_total{result="Drained"} 0x90`,
		expect: []expectation{
			{6, "VacateControllerNoLeader", map[string]string{}, true},
		},
	},
	{
		name: "evictions failing, and refusals that are not errors",
		series: `
			vacate_evictions_total{result="Failed"} 0+10x90
			vacate_evictions_total{result="PDBBlocked"} 0+10x90
			vacate_evictions_total{result="Forbidden"} 5x90`,
		expect: []expectation{
			{10, "VacateEvictionErrors", map[string]string{"result": "Failed"}, false},
			{17, "VacateEvictionErrors", map[string]string{"result": "Failed"}, true},
			{89, "VacateEvictionErrors", map[string]string{"result": "PDBBlocked"}, false},
			{89, "VacateEvictionErrors", map[string]string{"result": "Forbidden"}, false},
		},
	},
	{
		name: "agents with problems, each alert on its own reason only",
		series: `
			vacate_agent_problems{node="short",source="logind",reason="InhibitDelayTooShort"} 1x90
			vacate_agent_problems{node="imds-down",source="gcp",reason="MetadataUnavailable"} 1x90
			vacate_agent_problems{node="blip",source="azure",reason="MetadataUnavailable"} 1 1 1 stale
			vacate_agent_problems{node="no-bus",source="logind",reason="BusUnavailable"} 1x90
			vacate_agent_problems{node="fixed",source="logind",reason="InhibitDelayTooShort"} 1x9 stale`,
		expect: []expectation{
			// Pending 15m from minute 0.
			{14, "VacateAgentInhibitDelayTooShort", map[string]string{"node": "short", "source": "logind"}, false},
			{16, "VacateAgentInhibitDelayTooShort", map[string]string{"node": "short", "source": "logind"}, true},
			// Raised in time: the problem went after 10 minutes.
			{30, "VacateAgentInhibitDelayTooShort", map[string]string{"node": "fixed", "source": "logind"}, false},
			// Pending 5m from minute 0.
			{4, "VacateAgentMetadataUnavailable", map[string]string{"node": "imds-down", "source": "gcp"}, false},
			{6, "VacateAgentMetadataUnavailable", map[string]string{"node": "imds-down", "source": "gcp"}, true},
			// Three minutes without an answer: shorter than the alert's 5m.
			{10, "VacateAgentMetadataUnavailable", map[string]string{"node": "blip", "source": "azure"}, false},
			// Each reason fires its own alert, not the others'.
			{89, "VacateAgentMetadataUnavailable", map[string]string{"node": "short", "source": "logind"}, false},
			{89, "VacateAgentInhibitDelayTooShort", map[string]string{"node": "imds-down", "source": "gcp"}, false},
			{89, "VacateAgentInhibitDelayTooShort", map[string]string{"node": "no-bus", "source": "logind"}, false},
			{14, "VacateAgentProblem", map[string]string{"node": "no-bus", "source": "logind", "reason": "BusUnavailable"}, false},
			{16, "VacateAgentProblem", map[string]string{"node": "no-bus", "source": "logind", "reason": "BusUnavailable"}, true},
			{89, "VacateAgentProblem", map[string]string{"node": "short", "source": "logind", "reason": "InhibitDelayTooShort"}, false},
			{89, "VacateAgentProblem", map[string]string{"node": "imds-down", "source": "gcp", "reason": "MetadataUnavailable"}, false},
		},
	},
}

// TestAlertsFireOnTheirSeries runs config/monitoring's alerting rules with
// Prometheus's own rules engine (rules.AlertingRule, their `for` included)
// over sample series, once a minute, and checks that each alert fires on
// the series that should fire it, not before its `for` is over, and stays
// silent on the others. Every alert of the file has a scenario where it
// fires and one where it stays silent.
func TestAlertsFireOnTheirSeries(t *testing.T) {
	alerts := alertingRules(t)
	covered := map[string][2]bool{} // alert: [fires somewhere, silent somewhere]
	for _, sc := range alertScenarios {
		t.Run(sc.name, func(t *testing.T) {
			firing := evaluate(t, alerts, loadCommand(sc.series))
			for _, e := range sc.expect {
				if _, ok := alerts[e.alert]; !ok {
					t.Fatalf("no alert %s in the rules", e.alert)
				}
				c := covered[e.alert]
				if e.firing {
					c[0] = true
				} else {
					c[1] = true
				}
				covered[e.alert] = c
				key := alertKey(e.alert, e.labels)
				if got := slices.Contains(firing[e.minute], key); got != e.firing {
					t.Errorf("minute %d: %s firing %t, want %t (firing then: %v)", e.minute, key, got, e.firing, firing[e.minute])
				}
			}
		})
	}
	for name := range alerts {
		if c := covered[name]; !c[0] || !c[1] {
			t.Errorf("alert %s: a scenario where it fires %t, one where it stays silent %t; want both", name, c[0], c[1])
		}
	}
}

// alertingRules are the file's alerts, as Prometheus builds them.
func alertingRules(t *testing.T) map[string]*rules.AlertingRule {
	t.Helper()
	p := parser.NewParser(parser.Options{})
	out := map[string]*rules.AlertingRule{}
	for _, g := range loadRules(t).Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			expr, err := p.ParseExpr(r.Expr)
			if err != nil {
				t.Fatalf("%s: %v", r.Alert, err)
			}
			var hold model.Duration
			if r.For != "" {
				if hold, err = model.ParseDuration(r.For); err != nil {
					t.Fatalf("%s: for %q: %v", r.Alert, r.For, err)
				}
			}
			out[r.Alert] = rules.NewAlertingRule(r.Alert, expr, time.Duration(hold), 0, labels.FromMap(r.Labels),
				labels.FromMap(r.Annotations), labels.EmptyLabels(), "", false, slog.New(slog.DiscardHandler))
		}
	}
	if len(out) == 0 {
		t.Fatal("no alerting rule")
	}
	return out
}

// evaluate loads the series and evaluates every rule once a minute from
// Unix time 0, as a rule group does; it returns, per minute, the firing
// alerts (alertKey).
func evaluate(t *testing.T, alerts map[string]*rules.AlertingRule, load string) map[int][]string {
	t.Helper()
	storage := promqltest.LoadedStorage(t, load)
	t.Cleanup(func() { _ = storage.Close() })
	engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
	query := rules.EngineQueryFunc(engine, storage)
	out := map[int][]string{}
	for m := 0; m < minutes; m++ {
		ts := time.Unix(0, 0).Add(time.Duration(m) * time.Minute)
		for name, r := range alerts {
			if _, err := r.Eval(context.Background(), 0, ts, query, &url.URL{}, 0); err != nil {
				t.Fatalf("minute %d: %s: %v", m, name, err)
			}
			for _, a := range r.ActiveAlerts() {
				if a.State == rules.StateFiring {
					own := a.Labels.Map()
					for k := range r.Labels().Map() {
						delete(own, k)
					}
					delete(own, model.AlertNameLabel)
					out[m] = append(out[m], alertKey(name, own))
				}
			}
		}
		sort.Strings(out[m])
	}
	return out
}

// loadCommand is promqltest's load command of the series, one per line.
func loadCommand(series string) string {
	var b strings.Builder
	b.WriteString("load 1m\n")
	for _, line := range strings.Split(series, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			b.WriteString("  " + line + "\n")
		}
	}
	return b.String()
}

// alertKey names an alert with its labels, for comparisons and messages.
func alertKey(name string, ls map[string]string) string {
	var parts []string
	for k, v := range ls {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return name + "{" + strings.Join(parts, ",") + "}"
}
