// Package monitoring tests config/monitoring: the Grafana dashboard and the
// PrometheusRule are well formed, every PromQL expression in them parses
// with Prometheus's own parser, and every metric they name is served by a
// real vacate-controller (or, for the agent's, a real vacate-agent) on the
// dev cluster, so that a renamed metric cannot silently empty a panel or
// silence an alert.
package monitoring

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"github.com/vacate-dev/vacate/internal/dev/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// The files under test, from this package's directory.
const (
	dashboardPath = "../../config/monitoring/dashboard.json"
	rulesPath     = "../../config/monitoring/prometheusrule.yaml"
	alertsDocPath = "../../docs/alerts.md"
)

// runbookBase is where every alert's runbook_url points, before the anchor.
const runbookBase = "https://github.com/vacate-dev/vacate/blob/main/docs/alerts.md#"

// datasourceUID is what every panel and target names as its data source:
// the dashboard's datasource variable.
const datasourceUID = "${datasource}"

// agentPrefix starts the names of vacate-agent's metrics, checked against
// an agent's /metrics; every other name against the controller's.
const agentPrefix = "vacate_agent_"

// dashboard is the part of Grafana's dashboard model the tests read.
type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	GridPos    struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID      string          `json:"refId"`
		Expr       string          `json:"expr"`
		Datasource json.RawMessage `json:"datasource"`
	} `json:"targets"`
	// Panels are a collapsed row's panels.
	Panels []panel `json:"panels"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Multi      bool            `json:"multi"`
	IncludeAll bool            `json:"includeAll"`
}

// allPanels are the dashboard's panels, those of collapsed rows included.
func (d dashboard) allPanels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	return d
}

// ruleFile is a PrometheusRule, decoded strictly: a field the operator
// does not know (a typo such as "annotation") fails the test.
type ruleFile struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Groups []struct {
			Name     string `json:"name"`
			Interval string `json:"interval,omitempty"`
			Rules    []rule `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

type rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

func (r rule) name() string { return r.Alert + r.Record }

func loadRules(t *testing.T) ruleFile {
	t.Helper()
	b, err := os.ReadFile(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		t.Fatalf("%s: %v", rulesPath, err)
	}
	return f
}

// expression is one PromQL expression and where it comes from, for
// messages.
type expression struct {
	where string
	expr  string
}

// expressions are every PromQL expression of the dashboard (panel targets,
// query variables) and of the rules.
func expressions(t *testing.T) []expression {
	t.Helper()
	d := loadDashboard(t)
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	var out []expression
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue // datasource, interval, custom, constant, textbox: no PromQL
		}
		q, err := variableQuery(v.Query)
		if err != nil {
			t.Errorf("dashboard variable %s: %v", v.Name, err)
			continue
		}
		where := fmt.Sprintf("dashboard variable %s", v.Name)
		e, err := grafanaQuery(q, vars)
		if err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		if e != "" {
			out = append(out, expression{where, e})
		}
	}
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				continue
			}
			where := fmt.Sprintf("dashboard panel %q (id %d) target %s", p.Title, p.ID, tg.RefID)
			e, err := substitute(tg.Expr, vars)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			out = append(out, expression{where, e})
		}
	}
	for _, g := range loadRules(t).Spec.Groups {
		for _, r := range g.Rules {
			out = append(out, expression{fmt.Sprintf("rule %s (group %s)", r.name(), g.Name), r.Expr})
		}
	}
	return out
}

// variableQuery is a query variable's query: a string, or an object with
// a query field (newer Grafana).
func variableQuery(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var o struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return "", fmt.Errorf("query is neither a string nor an object with a query: %s", raw)
	}
	return o.Query, nil
}

var (
	labelValuesRe = regexp.MustCompile(`^\s*label_values\(\s*(.*?)\s*,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)
	labelNamesRe  = regexp.MustCompile(`^\s*label_names\(\s*\)\s*$`)
	queryResultRe = regexp.MustCompile(`^\s*query_result\((.*)\)\s*$`)
)

// grafanaQuery is the PromQL of a Prometheus query variable: the selector
// of label_values(selector, label), the expression of query_result(expr),
// or the query itself; "" for label_names() and label_values(label), which
// name no metric.
func grafanaQuery(q string, vars map[string]bool) (string, error) {
	switch {
	case labelNamesRe.MatchString(q):
		return "", nil
	case labelValuesRe.MatchString(q):
		q = labelValuesRe.FindStringSubmatch(q)[1]
	case strings.HasPrefix(strings.TrimSpace(q), "label_values("):
		return "", nil // label_values(label): every series
	case queryResultRe.MatchString(q):
		q = queryResultRe.FindStringSubmatch(q)[1]
	}
	return substitute(q, vars)
}

// builtins are Grafana's own variables, with a value the parser accepts
// where Grafana would put theirs.
var builtins = map[string]string{
	"__rate_interval": "5m", "__interval": "1m", "__range": "6h", "__auto": "1m",
	"__interval_ms": "60000", "__range_ms": "21600000", "__range_s": "21600",
}

var varRe = regexp.MustCompile(`\$\{([a-zA-Z_][a-zA-Z0-9_]*)(?::[a-z]+)?\}|\$([a-zA-Z_][a-zA-Z0-9_]*)|\[\[([a-zA-Z_][a-zA-Z0-9_]*)\]\]`)

// substitute replaces Grafana's variables: its built-ins by a duration or
// a number, the dashboard's by a placeholder label value. A variable the
// dashboard does not define is an error: Grafana would send it as it is.
func substitute(expr string, vars map[string]bool) (string, error) {
	var unknown []string
	out := varRe.ReplaceAllStringFunc(expr, func(m string) string {
		sub := varRe.FindStringSubmatch(m)
		name := sub[1] + sub[2] + sub[3]
		if v, ok := builtins[name]; ok {
			return v
		}
		if vars[name] {
			return "placeholder"
		}
		unknown = append(unknown, m)
		return m
	})
	if len(unknown) > 0 {
		return "", fmt.Errorf("variables %v are neither Grafana's nor the dashboard's", unknown)
	}
	return out, nil
}

// parsed is an expression's syntax tree.
type parsed struct {
	expression
	node parser.Expr
}

// parseAll parses every expression with Prometheus's parser; an expression
// that does not parse fails the test, naming its panel or rule.
func parseAll(t *testing.T) []parsed {
	t.Helper()
	p := parser.NewParser(parser.Options{})
	var out []parsed
	for _, e := range expressions(t) {
		node, err := p.ParseExpr(e.expr)
		if err != nil {
			t.Errorf("%s: PromQL does not parse: %v\n%s", e.where, err, e.expr)
			continue
		}
		out = append(out, parsed{e, node})
	}
	return out
}

// selector is a metric a vector selector reads: its name, or, for a
// selector on __name__ with a regular expression, that matcher.
type selector struct {
	name    string
	matcher *labels.Matcher
	// labels are the other label names the selector matches on.
	labels []string
}

func (s selector) String() string {
	if s.matcher != nil {
		return s.matcher.String()
	}
	return s.name
}

// selectors are the metrics an expression reads.
func selectors(node parser.Expr) []selector {
	var out []selector
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		s := selector{name: vs.Name}
		for _, m := range vs.LabelMatchers {
			switch {
			case m.Name != model.MetricNameLabel:
				s.labels = append(s.labels, m.Name)
			case m.Type == labels.MatchEqual:
				s.name = m.Value
			case s.name == "":
				s.matcher = m
			}
		}
		out = append(out, s)
		return nil
	})
	return out
}

// TestExpressionsParse: every expression of the dashboard and the rules
// parses, and every one reads at least one metric or is a constant on
// purpose (vector(0) fallbacks sit beside a selector).
func TestExpressionsParse(t *testing.T) {
	all := parseAll(t)
	if len(all) < 40 {
		t.Errorf("%d expressions, want the dashboard's and the rules' (at least 40)", len(all))
	}
	for _, p := range all {
		if len(selectors(p.node)) == 0 {
			t.Errorf("%s reads no metric: %s", p.where, p.expr)
		}
	}
	t.Logf("%d expressions parse", len(all))
}

// TestDashboardStructure: the dashboard has uid vacate and a data source
// variable; every panel and target uses that variable; ids are unique and
// panels fit the 24-column grid without overlapping; every panel but a row
// has a query.
func TestDashboardStructure(t *testing.T) {
	d := loadDashboard(t)
	if d.UID != "vacate" || d.Title == "" {
		t.Errorf("uid %q, title %q: want uid vacate and a title", d.UID, d.Title)
	}
	found := false
	for _, v := range d.Templating.List {
		if v.Name == "datasource" {
			var q string
			_ = json.Unmarshal(v.Query, &q)
			found = v.Type == "datasource" && q == "prometheus"
			if !found {
				t.Errorf("variable datasource is of type %q with query %s, want type datasource, query prometheus", v.Type, v.Query)
			}
		}
	}
	if !found {
		t.Error("no template variable datasource")
	}
	ids := map[int]string{}
	type rect struct {
		title      string
		x, y, w, h int
	}
	var placed []rect
	for _, p := range d.allPanels() {
		if prev, dup := ids[p.ID]; dup || p.ID <= 0 {
			t.Errorf("panel %q has id %d, also of %q (ids must be unique and positive)", p.Title, p.ID, prev)
		}
		ids[p.ID] = p.Title
		if uid := datasourceOf(p.Datasource); uid != datasourceUID {
			t.Errorf("panel %q (id %d): datasource %s, want %s", p.Title, p.ID, p.Datasource, datasourceUID)
		}
		for _, tg := range p.Targets {
			if len(tg.Datasource) > 0 && datasourceOf(tg.Datasource) != datasourceUID {
				t.Errorf("panel %q target %s: datasource %s, want %s", p.Title, tg.RefID, tg.Datasource, datasourceUID)
			}
		}
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v does not fit the 24-column grid", p.Title, g)
		}
		for _, o := range placed {
			if g.X < o.x+o.w && o.x < g.X+g.W && g.Y < o.y+o.h && o.y < g.Y+g.H {
				t.Errorf("panel %q (gridPos %+v) overlaps %q", p.Title, g, o.title)
			}
		}
		placed = append(placed, rect{p.Title, g.X, g.Y, g.W, g.H})
		if p.Type == "row" {
			continue
		}
		if p.Title == "" {
			t.Errorf("panel id %d has no title", p.ID)
		}
		queries := 0
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) != "" {
				queries++
			}
		}
		if queries == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
	}
	t.Logf("%d panels", len(ids))
	checkScoped(t, d)
}

// scopes are the dashboard's variables every metric is read through, so
// that in a Prometheus shared by several operators a panel shows vacate's
// series, of the installations chosen, only: label name, variable.
var scopes = map[string]string{"job": "job", "namespace": "namespace"}

// checkScoped checks that the dashboard has the variables job and
// namespace (both from vacate_build_info, many values, "All" by default)
// and that every vector selector of every panel matches job=~"$job" and
// namespace=~"$namespace".
func checkScoped(t *testing.T, d dashboard) {
	t.Helper()
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if _, ok := scopes[v.Name]; !ok {
			continue
		}
		q, err := variableQuery(v.Query)
		if err != nil || v.Type != "query" || !strings.Contains(q, "label_values(vacate_build_info") || !v.Multi || !v.IncludeAll {
			t.Errorf("variable %s: type %s, query %q (%v), multi %t, includeAll %t; want label_values of vacate_build_info, multi, with All",
				v.Name, v.Type, q, err, v.Multi, v.IncludeAll)
		}
	}
	for _, name := range scopes {
		if !vars[name] {
			t.Errorf("no template variable %s", name)
		}
	}
	p := parser.NewParser(parser.Options{})
	for _, panel := range d.allPanels() {
		for _, tg := range panel.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				continue
			}
			// Each variable becomes the value "$<name>" to parse.
			text := varRe.ReplaceAllStringFunc(tg.Expr, func(m string) string {
				sub := varRe.FindStringSubmatch(m)
				if v, ok := builtins[sub[1]+sub[2]+sub[3]]; ok {
					return v
				}
				return "$" + sub[1] + sub[2] + sub[3]
			})
			node, err := p.ParseExpr(text)
			if err != nil {
				continue // TestExpressionsParse reports it
			}
			parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
				vs, ok := n.(*parser.VectorSelector)
				if !ok {
					return nil
				}
				for label, variable := range scopes {
					found := false
					for _, m := range vs.LabelMatchers {
						found = found || (m.Name == label && m.Type == labels.MatchRegexp && m.Value == "$"+variable)
					}
					if !found {
						t.Errorf("panel %q target %s: %s does not match %s=~\"$%s\": it would read every operator's series", panel.Title, tg.RefID, vs, label, variable)
					}
				}
				return nil
			})
		}
	}
}

// datasourceOf is a panel's or target's data source uid: the uid of the
// object form, or the string of the older form.
func datasourceOf(raw json.RawMessage) string {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s
	}
	var o struct {
		UID string `json:"uid"`
	}
	_ = json.Unmarshal(raw, &o)
	return o.UID
}

// TestRulesStructure: the PrometheusRule decodes strictly, is the one the
// manifests expect, and each alert has an expression, a for, a severity,
// a summary, a description and a runbook_url whose anchor is a heading of
// docs/alerts.md; the annotations' templates run.
func TestRulesStructure(t *testing.T) {
	f := loadRules(t)
	if f.APIVersion != "monitoring.coreos.com/v1" || f.Kind != "PrometheusRule" || f.Metadata.Name != "vacate" ||
		f.Metadata.Namespace != "vacate-system" || f.Metadata.Labels["app.kubernetes.io/name"] != "vacate-controller" {
		t.Errorf("%s %s %s/%s labels %v: want monitoring.coreos.com/v1 PrometheusRule vacate-system/vacate labelled app.kubernetes.io/name: vacate-controller",
			f.APIVersion, f.Kind, f.Metadata.Namespace, f.Metadata.Name, f.Metadata.Labels)
	}
	anchors := docAnchors(t)
	seen := map[string]bool{}
	alerts := 0
	for _, g := range f.Spec.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q: want a name and rules", g.Name)
		}
		for _, r := range g.Rules {
			if r.Record != "" {
				if r.Alert != "" || r.Expr == "" {
					t.Errorf("recording rule %s: want an expr and no alert", r.Record)
				}
				continue
			}
			alerts++
			if seen[r.Alert] || r.Alert == "" {
				t.Errorf("alert %q: empty or defined twice", r.Alert)
			}
			seen[r.Alert] = true
			checkAlert(t, r, anchors)
		}
	}
	for _, a := range []string{"VacateDrainBlockedTooLong", "VacateEvacuationStale", "VacateNodeDeletionHeld",
		"VacateControllerNoLeader", "VacateEvictionErrors", "VacateAgentInhibitDelayTooShort", "VacateAgentMetadataUnavailable",
		"VacateAgentProblem"} {
		if !seen[a] {
			t.Errorf("no alert %s (of %d: %v)", a, alerts, keys(seen))
		}
	}
}

func checkAlert(t *testing.T, r rule, anchors map[string]bool) {
	t.Helper()
	if strings.TrimSpace(r.Expr) == "" {
		t.Errorf("alert %s: no expr", r.Alert)
	}
	if _, err := model.ParseDuration(r.For); err != nil {
		t.Errorf("alert %s: for %q: %v", r.Alert, r.For, err)
	}
	if s := r.Labels["severity"]; !slices.Contains([]string{"critical", "warning", "info"}, s) {
		t.Errorf("alert %s: severity %q, want critical, warning or info", r.Alert, s)
	}
	for _, a := range []string{"summary", "description", "runbook_url"} {
		if strings.TrimSpace(r.Annotations[a]) == "" {
			t.Errorf("alert %s: no annotation %s", r.Alert, a)
		}
	}
	url := r.Annotations["runbook_url"]
	anchor, ok := strings.CutPrefix(url, runbookBase)
	switch {
	case !ok:
		t.Errorf("alert %s: runbook_url %q, want %s<anchor>", r.Alert, url, runbookBase)
	case !anchors[anchor]:
		t.Errorf("alert %s: runbook_url's anchor #%s is no heading of %s (anchors: %v)", r.Alert, anchor, alertsDocPath, keys(anchors))
	}
	for name, text := range r.Annotations {
		if err := expandAlertTemplate(text); err != nil {
			t.Errorf("alert %s: annotation %s: %v", r.Alert, name, err)
		}
	}
}

// expandAlertTemplate runs an annotation as Prometheus does (text/template
// with $labels and $value defined first), with stand-ins for Prometheus's
// template functions, on a sample alert.
func expandAlertTemplate(text string) error {
	funcs := template.FuncMap{}
	for _, f := range []string{"humanize", "humanize1024", "humanizeDuration", "humanizePercentage", "humanizeTimestamp", "toTime", "title", "toUpper", "toLower"} {
		funcs[f] = func(v any) string { return fmt.Sprint(v) }
	}
	tmpl, err := template.New("annotation").Option("missingkey=zero").Funcs(funcs).
		Parse("{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$value := .Value}}" + text)
	if err != nil {
		return err
	}
	data := struct {
		Labels, ExternalLabels map[string]string
		Value                  float64
	}{Labels: map[string]string{"node": "n1"}, Value: 1}
	return tmpl.Execute(&bytes.Buffer{}, data)
}

var headingRe = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*#*\s*$`)

// docAnchors are the anchors GitHub gives the headings of docs/alerts.md:
// lower case, punctuation but hyphens and underscores dropped, spaces as
// hyphens.
func docAnchors(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(alertsDocPath)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range headingRe.FindAllStringSubmatch(string(b), -1) {
		var a strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				a.WriteRune('-')
			case r == '-' || r == '_' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9'):
				a.WriteRune(r)
			}
		}
		out[a.String()] = true
	}
	return out
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// sinceStart formats how long a step took, for the test's log.
func sinceStart(start time.Time) string {
	return time.Since(start).Round(100 * time.Millisecond).String()
}
