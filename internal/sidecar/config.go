// Package sidecar is vacate-hook: a program run beside an app (a native
// sidecar) that serves vacate's HTTP evacuation protocol v1 on the pod's IP
// and carries a drain out by running the commands its configuration names:
// evacuate (start moving data off), status (how far it is), cancel (undo).
// docs/recipes/README.md is the user's guide; examples/ holds recipes for
// real systems.
//
// Its guarantees are the protocol's: a drain started twice runs evacuate
// once; each drain's state lives in a file under stateDir and is resumed
// after a restart; an answer that cannot be read is never Completed; a
// cancel undoes what was started, a completed Maintenance evacuation
// included.
package sidecar

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Defaults of the configuration's optional fields.
const (
	DefaultListen         = ":7070"
	DefaultPath           = "/evacuate"
	DefaultStatusInterval = 5 * time.Second
	DefaultRetryInterval  = 10 * time.Second
	// DefaultTimeout bounds an evacuate or cancel command without a timeout.
	DefaultTimeout = 5 * time.Minute
	// DefaultStatusTimeout bounds a status command without a timeout.
	DefaultStatusTimeout = time.Minute
	// MaxTimeout is the longest timeout a command may have.
	MaxTimeout = 24 * time.Hour
)

// Config is vacate-hook's configuration file (YAML or JSON). Unknown fields
// are refused.
type Config struct {
	// Listen is the address the protocol is served on, ":7070" by default.
	Listen string `json:"listen,omitempty"`
	// MetricsListen, when set, is the address /metrics is served on: the
	// commands run and the protocol's requests, counted (nothing names a
	// drain, a node or a command). Off by default. It must be another port
	// than Listen's, so that a NetworkPolicy can admit Prometheus to the
	// metrics alone.
	MetricsListen string `json:"metricsListen,omitempty"`
	// Path is the protocol's path, "/evacuate" by default; it must match the
	// pod's vacate.dev/evacuate-path annotation.
	Path string `json:"path,omitempty"`
	// StateDir holds one file per drain, so that a restarted sidecar resumes
	// it: a writable volume (an emptyDir lives as long as the pod).
	StateDir string `json:"stateDir"`
	// StatusInterval is how often status runs while a drain is in progress.
	StatusInterval string `json:"statusInterval,omitempty"`
	// RetryInterval is the pause before evacuate or cancel runs again after
	// one of its commands failed.
	RetryInterval string `json:"retryInterval,omitempty"`
	// Maintenance are the steps of a Maintenance drain: hand over, and come
	// back when the node returns.
	Maintenance *Steps `json:"maintenance"`
	// Decommission are the steps of a Decommission drain: move everything
	// away for good. When absent, a Decommission runs Maintenance's.
	Decommission *Steps `json:"decommission,omitempty"`
	// Auth is how callers are checked: by default only
	// vacate-system/vacate-controller's tokens addressed to this pod.
	Auth Auth `json:"auth,omitempty"`

	statusInterval, retryInterval time.Duration
}

// Steps are what the sidecar runs for one mode.
type Steps struct {
	// Evacuate are run in order when a drain starts; each must exit 0. The
	// first that fails stops them, and they all run again, from the first,
	// after RetryInterval: each must be safe to run again.
	Evacuate []Command `json:"evacuate"`
	// Status runs every StatusInterval after Evacuate succeeded until it
	// says Completed. It prints one JSON object {"state", "message",
	// "remaining"} or a first line InProgress, Completed or Failed followed
	// by the message, and exits 0. Without it, Evacuate succeeding means
	// Completed.
	Status *Command `json:"status,omitempty"`
	// Cancel are run in order when the drain is cancelled, if Evacuate was
	// started, until they all exit 0.
	Cancel []Command `json:"cancel,omitempty"`
}

// Command is a program and its arguments, run directly (never through a
// shell), with the drain in its environment.
type Command struct {
	// Command is the argv; a name without a slash is looked up in PATH.
	Command []string `json:"command"`
	// Timeout bounds the command: it is killed (its process group, SIGTERM
	// and then SIGKILL) when it runs longer.
	Timeout string `json:"timeout,omitempty"`

	timeout time.Duration
	path    string
}

// Name is the command for people: its argv, quoted where needed.
func (c *Command) Name() string {
	var b strings.Builder
	for i, a := range c.Command {
		if i > 0 {
			b.WriteByte(' ')
		}
		if a == "" || strings.ContainsAny(a, " \t\"'\\") {
			a = strconv.Quote(a)
		}
		b.WriteString(a)
	}
	return b.String()
}

// The two modes of the protocol.
const (
	Maintenance  = "Maintenance"
	Decommission = "Decommission"
)

// stepSet names the steps a mode runs: "maintenance", or "decommission"
// when the configuration has its own.
func (c *Config) stepSet(mode string) (string, *Steps) {
	if mode == Decommission && c.Decommission != nil {
		return "decommission", c.Decommission
	}
	return "maintenance", c.Maintenance
}

// steps are the steps of a step set's name.
func (c *Config) steps(set string) *Steps {
	if set == "decommission" && c.Decommission != nil {
		return c.Decommission
	}
	return c.Maintenance
}

// LoadConfig reads and checks a configuration file.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the configuration: %w", err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseConfig decodes and checks a configuration. Its errors name the field.
func ParseConfig(data []byte) (*Config, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("the configuration is empty")
	}
	var c Config
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("the configuration does not decode: %w", err)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// validate checks every field, fills in the defaults and resolves each
// command's program.
func (c *Config) validate() error {
	var errs []error
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if err := checkListen(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("listen: %w", err))
	}
	if err := checkMetricsListen(c.MetricsListen, c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("metricsListen: %w", err))
	}
	if c.Path == "" {
		c.Path = DefaultPath
	}
	if err := checkPath(c.Path); err != nil {
		errs = append(errs, fmt.Errorf("path: %w", err))
	}
	switch {
	case c.StateDir == "":
		errs = append(errs, errors.New("stateDir: required: a writable directory (a volume) where each drain's state survives a restart"))
	case !filepath.IsAbs(c.StateDir):
		errs = append(errs, fmt.Errorf("stateDir: %q is not an absolute path", c.StateDir))
	}
	var err error
	if c.statusInterval, err = duration(c.StatusInterval, DefaultStatusInterval, 10*time.Minute); err != nil {
		errs = append(errs, fmt.Errorf("statusInterval: %w", err))
	}
	if c.retryInterval, err = duration(c.RetryInterval, DefaultRetryInterval, 10*time.Minute); err != nil {
		errs = append(errs, fmt.Errorf("retryInterval: %w", err))
	}
	if c.Maintenance == nil {
		errs = append(errs, errors.New("maintenance: required: the steps of a Maintenance drain (at least evacuate)"))
	} else {
		errs = append(errs, c.Maintenance.validate("maintenance")...)
	}
	if c.Decommission != nil {
		errs = append(errs, c.Decommission.validate("decommission")...)
	}
	errs = append(errs, c.Auth.validate()...)
	return errors.Join(errs...)
}

func (s *Steps) validate(field string) []error {
	var errs []error
	if len(s.Evacuate) == 0 {
		errs = append(errs, fmt.Errorf("%s.evacuate: required: at least one command", field))
	}
	for i := range s.Evacuate {
		errs = append(errs, s.Evacuate[i].validate(fmt.Sprintf("%s.evacuate[%d]", field, i), DefaultTimeout)...)
	}
	if s.Status != nil {
		errs = append(errs, s.Status.validate(field+".status", DefaultStatusTimeout)...)
	}
	for i := range s.Cancel {
		errs = append(errs, s.Cancel[i].validate(fmt.Sprintf("%s.cancel[%d]", field, i), DefaultTimeout)...)
	}
	return errs
}

func (c *Command) validate(field string, def time.Duration) []error {
	var errs []error
	var err error
	if c.timeout, err = duration(c.Timeout, def, MaxTimeout); err != nil {
		errs = append(errs, fmt.Errorf("%s.timeout: %w", field, err))
	}
	if len(c.Command) == 0 {
		return append(errs, fmt.Errorf("%s.command: required: the program and its arguments, as a list", field))
	}
	for i, a := range c.Command {
		if strings.ContainsRune(a, 0) {
			errs = append(errs, fmt.Errorf("%s.command[%d]: contains a NUL byte", field, i))
		}
	}
	prog := c.Command[0]
	switch {
	case prog == "":
		errs = append(errs, fmt.Errorf("%s.command[0]: empty program name", field))
	case strings.Contains(prog, "/"):
		if !filepath.IsAbs(prog) {
			errs = append(errs, fmt.Errorf("%s.command[0]: %q: a program with a slash must be an absolute path", field, prog))
		} else if info, err := os.Stat(prog); err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
			errs = append(errs, fmt.Errorf("%s.command[0]: %q is not an executable file", field, prog))
		} else {
			c.path = prog
		}
	default:
		if c.path, err = lookPath(prog); err != nil {
			errs = append(errs, fmt.Errorf("%s.command[0]: %q is not in PATH (%s)", field, prog, os.Getenv("PATH")))
		}
	}
	return errs
}

// duration parses an optional duration with a default, more than zero and at
// most max.
func duration(s string, def, max time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%q is not a duration such as 30s or 5m", s)
	case d <= 0:
		return 0, fmt.Errorf("%q: must be more than zero", s)
	case d > max:
		return 0, fmt.Errorf("%q: must be at most %s", s, max)
	}
	return d, nil
}

func checkListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port (such as :7070): %v", addr, err)
	}
	if host != "" && net.ParseIP(host) == nil {
		return fmt.Errorf("%q: the host must be an IP address or empty", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q: the port must be a number from 1 to 65535", addr)
	}
	return nil
}

// checkMetricsListen checks the metrics address, if any: a listen address
// on another port than the protocol's.
func checkMetricsListen(addr, protocol string) error {
	if addr == "" {
		return nil
	}
	if err := checkListen(addr); err != nil {
		return err
	}
	_, port, _ := net.SplitHostPort(addr)
	if _, p, err := net.SplitHostPort(protocol); err == nil && p == port {
		return fmt.Errorf("%q: the protocol's port (listen %q); give the metrics a port of their own, so that a NetworkPolicy can admit Prometheus to them and not to the protocol", addr, protocol)
	}
	return nil
}

func checkPath(p string) error {
	switch {
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("%q must start with /", p)
	case strings.ContainsAny(p, "?#% \t\r\n"):
		return fmt.Errorf("%q: only a path, without a query, fragment, escapes or spaces", p)
	case strings.Contains(p, "/../") || strings.HasSuffix(p, "/.."):
		return fmt.Errorf("%q: a path with a .. segment", p)
	}
	return nil
}
