// Package devcluster runs a real, local Kubernetes control plane for vacate's
// tests, demo and benchmarks: etcd, kube-apiserver, kube-controller-manager
// and kube-scheduler built from source at pinned versions, and kwok to
// simulate nodes and their pods. Everything listens on loopback, on free
// ports, with TLS and RBAC, and every process it starts is stopped by pid.
package devcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// DefaultName is the name of the cluster when none is given.
const DefaultName = "vacate"

// KwokNodeAnnotation marks the nodes that the dev cluster's kwok simulates.
const KwokNodeAnnotation = "kwok.x-k8s.io/node"

// Options configure a dev cluster.
type Options struct {
	// Name tells clusters apart; several can run side by side. Default "vacate".
	Name string
	// Dir holds the cluster's certificates, kubeconfig, data and logs.
	// Default: <cache dir>/clusters/<Name>.
	Dir string
	// Ports fixes the port of a component by name (Etcd, KubeAPIServer, ...);
	// the others get free loopback ports.
	Ports map[string]int
	// PodCIDR is the range kwok gives pod IPs from; it must be inside
	// 127.0.0.0/8. Default: a /16 derived from the cluster's directory.
	PodCIDR string
	// Detach leaves the processes running after this program exits (for
	// `vacate dev up`). Otherwise the kernel kills them if this program dies.
	Detach bool
	// StartTimeout bounds how long each component may take to become healthy.
	// Default 2 minutes.
	StartTimeout time.Duration
	// Out receives progress messages. Default: discarded.
	Out io.Writer
	// AuditReadsOf names users whose every request, reads and watches
	// included, the audit log records (it records only writes otherwise),
	// so a benchmark can count a client's requests.
	AuditReadsOf []string
	// KwokParallelism is how many pods and nodes kwok moves through their
	// stages (scheduled to Running, deleted), and how many node leases it
	// renews, at once; 0 keeps kwok's default, 4 of each, which makes
	// thousands of pods Running at a few a second and lets leases of
	// hundreds of nodes lapse on a loaded machine.
	KwokParallelism int
	// ExtraArgs appends flags to a component's command line, by component
	// name (KubeControllerManager, KubeScheduler, ...); a later flag wins.
	ExtraArgs map[string][]string
	// EvictionRequestAPI serves Kubernetes 1.37's EvictionRequest API
	// (KEP-4563: lifecycle.k8s.io/v1alpha1, and pods'
	// spec.evictionResponders), alpha and off by default: the API server
	// runs with the feature gate EvictionRequestAPI and the group version
	// enabled. Kubernetes 1.37 has no controller for it.
	EvictionRequestAPI bool

	kubernetes string // the version Up runs, for State
}

// Cluster is a running dev cluster.
type Cluster struct {
	State
	// RESTConfig reaches the API server as a cluster admin.
	RESTConfig *rest.Config
	// Client is a typed client for RESTConfig.
	Client kubernetes.Interface

	procs  []*process            // started by this program, in start order
	comps  map[string]*component // the same, by component name (for Restart)
	detach bool                  // Options.Detach, for processes started again
}

// State is what a cluster records in its directory so that later commands
// (`vacate dev down|status|env`) can find it.
type State struct {
	Name       string   `json:"name"`
	Dir        string   `json:"dir"`
	Kubeconfig string   `json:"kubeconfig"`
	Server     string   `json:"server"`
	PodCIDR    string   `json:"podCIDR"`
	Binaries   Binaries `json:"binaries"`
	// AuditLog is the API server's audit log of mutating requests.
	AuditLog   string           `json:"auditLog"`
	Started    time.Time        `json:"started"`
	Components []ComponentState `json:"components"`
	// EvictionRequestAPI says the API server serves the EvictionRequest
	// API (Options.EvictionRequestAPI).
	EvictionRequestAPI bool `json:"evictionRequestAPI,omitempty"`
	// Kubernetes is the version of the control plane ($VACATE_K8S_VERSION).
	Kubernetes string `json:"kubernetes,omitempty"`
}

// ComponentState describes one running component.
type ComponentState struct {
	Name   string `json:"name"`
	PID    int    `json:"pid"`
	Binary string `json:"binary"`
	Port   int    `json:"port"`
	Health string `json:"health"` // URL of its health endpoint
	Log    string `json:"log"`
	// Extra marks a process attached to the cluster after it started (see
	// Attach): stopped with it, but not part of whether it runs.
	Extra bool `json:"extra,omitempty"`
}

func (o *Options) defaults() error {
	if o.Name == "" {
		o.Name = DefaultName
	}
	if err := validateName(o.Name); err != nil {
		return err
	}
	if o.Dir == "" {
		d, err := ClusterDir(o.Name)
		if err != nil {
			return err
		}
		o.Dir = d
	}
	abs, err := filepath.Abs(o.Dir)
	if err != nil {
		return fmt.Errorf("resolving cluster directory: %w", err)
	}
	o.Dir = abs
	if o.PodCIDR == "" {
		h := fnv.New32a()
		_, _ = h.Write([]byte(o.Dir))
		o.PodCIDR = fmt.Sprintf("127.%d.0.0/16", 64+h.Sum32()%128)
	}
	_, ipnet, err := net.ParseCIDR(o.PodCIDR)
	if err != nil || !ipnet.IP.IsLoopback() {
		return fmt.Errorf("pod CIDR %q must be a range inside 127.0.0.0/8", o.PodCIDR)
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 2 * time.Minute
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	return nil
}

func validateName(name string) error {
	if len(name) > 40 {
		return fmt.Errorf("cluster name %q is longer than 40 characters", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return fmt.Errorf("cluster name %q may only hold lower-case letters, digits and '-'", name)
		}
	}
	return nil
}

// ClusterDir is the default directory of the cluster called name.
func ClusterDir(name string) (string, error) {
	if dir := os.Getenv(EnvClustersDir); dir != "" {
		abs, err := filepath.Abs(dir)
		return filepath.Join(abs, name), err
	}
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(cache, "clusters", name), nil
}

// Up builds (if needed) and starts a dev cluster and waits until every
// component is healthy. On failure it stops whatever it had started and
// returns a *ComponentError naming the component, with its log tail.
func Up(ctx context.Context, opts Options) (*Cluster, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	if st, err := ReadState(opts.Dir); err == nil && st.Running() {
		return nil, fmt.Errorf("cluster %q is already running (kubeconfig %s); stop it with `vacate dev down --name %s`",
			st.Name, st.Kubeconfig, st.Name)
	}
	cp, err := SelectedControlPlane()
	if err != nil {
		return nil, err
	}
	if opts.EvictionRequestAPI && !cp.EvictionRequestAPI {
		return nil, fmt.Errorf("the EvictionRequest API needs Kubernetes %s; this dev cluster runs %s ($%s)",
			KubernetesVersion, cp.Kubernetes, EnvKubernetesVersion)
	}
	bins, err := EnsureControlPlane(ctx, cp, opts.Out)
	if err != nil {
		return nil, err
	}
	opts.kubernetes = cp.Kubernetes
	// A free port can be taken by another program between the moment it is
	// chosen and the moment a component binds it; start again, with new
	// ports, when that happens to a port we chose.
	for attempt := 1; ; attempt++ {
		c, err := up(ctx, opts, bins)
		if err == nil || attempt == 3 || !lostPortRace(err, opts) {
			return c, err
		}
		fmt.Fprintf(opts.Out, "a port was taken while starting (%v); trying again\n", err.(*ComponentError).Err)
	}
}

// lostPortRace reports whether a component failed because a port that Up
// chose itself was already in use.
func lostPortRace(err error, opts Options) bool {
	ce, ok := IsComponentError(err)
	if !ok {
		return false
	}
	if _, fixed := opts.Ports[ce.Component]; fixed {
		return false
	}
	return strings.Contains(ce.LogTail, "address already in use")
}

func up(ctx context.Context, opts Options, bins Binaries) (_ *Cluster, err error) {
	c := &Cluster{State: State{Name: opts.Name, Dir: opts.Dir, PodCIDR: opts.PodCIDR, Binaries: bins, EvictionRequestAPI: opts.EvictionRequestAPI,
		Kubernetes: opts.kubernetes},
		comps: map[string]*component{}, detach: opts.Detach}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if err := c.prepareDir(); err != nil {
		return nil, err
	}
	plan, err := c.plan(bins, opts)
	if err != nil {
		return nil, err
	}
	for _, stage := range plan {
		if err := c.startAll(ctx, stage, opts); err != nil {
			return nil, err
		}
	}
	c.Started = time.Now()
	if err := writeState(c.State); err != nil {
		return nil, err
	}
	if err := c.connect(); err != nil {
		return nil, err
	}
	if err := c.waitSettled(ctx, opts.StartTimeout); err != nil {
		return nil, err
	}
	return c, nil
}

// prepareDir gives the cluster a fresh data directory, keeping old logs.
func (c *Cluster) prepareDir() error {
	for _, d := range []string{"pki", "data"} {
		if err := os.RemoveAll(filepath.Join(c.Dir, d)); err != nil {
			return fmt.Errorf("cleaning %s: %w", c.Dir, err)
		}
	}
	for _, d := range []string{"pki", "data", "logs"} {
		if err := os.MkdirAll(filepath.Join(c.Dir, d), 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", c.Dir, err)
		}
	}
	// Logs of an earlier run of this cluster would mislead: rotate them.
	logs, _ := filepath.Glob(filepath.Join(c.Dir, "logs", "*.log"))
	for _, l := range logs {
		_ = os.Rename(l, l+".old")
	}
	return nil
}

// startAll starts a group of components that may start together, then waits
// until each is healthy or one fails.
func (c *Cluster) startAll(ctx context.Context, group []*component, opts Options) error {
	for _, comp := range group {
		if err := comp.proc.start(opts.Detach); err != nil {
			return &ComponentError{Component: comp.proc.name, LogPath: comp.proc.logPath, LogTail: comp.proc.logTail(), Err: err}
		}
		c.procs = append(c.procs, comp.proc)
		c.comps[comp.proc.name] = comp
		c.Components = append(c.Components, ComponentState{
			Name: comp.proc.name, PID: comp.proc.pid(), Binary: comp.proc.bin,
			Port: comp.port, Health: comp.health.url, Log: comp.proc.logPath,
		})
		fmt.Fprintf(opts.Out, "started %s (pid %d, port %d)\n", comp.proc.name, comp.proc.pid(), comp.port)
	}
	// Record pids as soon as they exist so `down` can find them even if this
	// program is killed while waiting.
	if err := writeState(c.State); err != nil {
		return err
	}
	for _, comp := range group {
		if err := comp.waitHealthy(ctx, opts.StartTimeout); err != nil {
			return err
		}
		fmt.Fprintf(opts.Out, "%s is healthy\n", comp.proc.name)
	}
	return nil
}

// connect builds the admin clients from the kubeconfig.
func (c *Cluster) connect() error {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return fmt.Errorf("loading kubeconfig %s: %w", c.Kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	c.RESTConfig, c.Client = cfg, cs
	return nil
}

// Stop stops every process this program started, newest first, and marks
// the cluster stopped. It is safe to call more than once.
func (c *Cluster) Stop() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].stop()
	}
	c.procs = nil
	if c.Dir != "" {
		_ = os.Remove(statePath(c.Dir))
	}
}

// Running reports whether any of the cluster's recorded processes is alive.
func (s State) Running() bool {
	for _, comp := range s.Components {
		if !comp.Extra && ProcessAlive(comp.PID, comp.Binary) {
			return true
		}
	}
	return false
}

func statePath(dir string) string { return filepath.Join(dir, "cluster.json") }

func writeState(s State) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding cluster state: %w", err)
	}
	tmp := statePath(s.Dir) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("writing cluster state: %w", err)
	}
	return os.Rename(tmp, statePath(s.Dir))
}

// Attach records a process started for the running cluster in dir (such as
// a vacate controller), so that Down stops it with the cluster's own.
func Attach(dir string, comp ComponentState) error {
	s, err := ReadState(dir)
	if err != nil {
		return err
	}
	comp.Extra = true
	s.Components = append(s.Components, comp)
	return writeState(s)
}

// ErrNotRunning means no cluster of that name was started.
var ErrNotRunning = errors.New("no such dev cluster is running")

// ReadState reads the state a cluster recorded in dir.
func ReadState(dir string) (State, error) {
	var s State
	b, err := os.ReadFile(statePath(dir))
	if errors.Is(err, os.ErrNotExist) {
		return s, ErrNotRunning
	}
	if err != nil {
		return s, fmt.Errorf("reading cluster state: %w", err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("decoding cluster state %s: %w", statePath(dir), err)
	}
	return s, nil
}

// Down stops every process that the cluster in dir recorded, by pid, after
// checking each pid still runs the recorded binary. It removes the cluster's
// data and keeps its logs.
func Down(dir string) (stopped []string, err error) {
	s, err := ReadState(dir)
	if err != nil {
		return nil, err
	}
	var errs []error
	for i := len(s.Components) - 1; i >= 0; i-- {
		comp := s.Components[i]
		if !ProcessAlive(comp.PID, comp.Binary) {
			continue
		}
		if err := stopPID(comp.PID, comp.Binary); err != nil {
			errs = append(errs, fmt.Errorf("stopping %s: %w", comp.Name, err))
			continue
		}
		stopped = append(stopped, comp.Name+" (pid "+strconv.Itoa(comp.PID)+")")
	}
	// Sweep: any process still naming the cluster's directory and running
	// one of its binaries (for example one started just before an earlier
	// `up` was killed, before its pid was recorded).
	for _, pid := range ProcessesUsing(dir) {
		for name, bin := range s.Binaries {
			if ProcessAlive(pid, bin) {
				if err := stopPID(pid, bin); err != nil {
					errs = append(errs, fmt.Errorf("stopping stray %s: %w", name, err))
					continue
				}
				stopped = append(stopped, name+" (pid "+strconv.Itoa(pid)+", not recorded)")
			}
		}
	}
	if len(errs) > 0 {
		return stopped, errors.Join(errs...)
	}
	_ = os.Remove(statePath(dir))
	_ = os.RemoveAll(filepath.Join(dir, "data"))
	return stopped, nil
}

// CPU is the processor time each running component has used so far, by
// component name (Linux only; empty elsewhere or when /proc is unreadable).
// Tests use it to say what a test cost (see testenv).
func (c *Cluster) CPU() map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, p := range c.procs {
		if p.cmd == nil || p.cmd.Process == nil {
			continue
		}
		if d, ok := processCPU(p.pid()); ok {
			out[p.name] = d
		}
	}
	return out
}
