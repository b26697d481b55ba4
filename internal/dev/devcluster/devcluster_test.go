package devcluster

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestOptionsDefaults(t *testing.T) {
	o := Options{Dir: t.TempDir()}
	if err := o.defaults(); err != nil {
		t.Fatal(err)
	}
	if o.Name != DefaultName {
		t.Errorf("name = %q, want %q", o.Name, DefaultName)
	}
	_, ipnet, err := net.ParseCIDR(o.PodCIDR)
	if err != nil || !ipnet.IP.IsLoopback() {
		t.Errorf("default pod CIDR %q is not inside 127.0.0.0/8", o.PodCIDR)
	}
}

func TestOptionsRejectBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"upper-case name", Options{Name: "Dev"}, "lower-case"},
		{"name with slash", Options{Name: "a/b"}, "lower-case"},
		{"long name", Options{Name: strings.Repeat("a", 41)}, "longer than 40"},
		{"routable pod CIDR", Options{Name: "x", Dir: "/tmp/x", PodCIDR: "10.0.0.0/16"}, "127.0.0.0/8"},
		{"malformed pod CIDR", Options{Name: "x", Dir: "/tmp/x", PodCIDR: "127.1.0.0"}, "127.0.0.0/8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.defaults()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("defaults() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestPinnedVersionsMatchHackModules keeps the version constants, which key
// the binary cache, in step with the modules that build the binaries.
func TestPinnedVersionsMatchHackModules(t *testing.T) {
	root := findSourceDir()
	if root == "" {
		t.Fatal("not inside a vacate checkout")
	}
	cases := []struct{ module, require string }{
		{"kwok", "sigs.k8s.io/kwok " + KwokVersion},
		{"ec2-metadata-mock", "github.com/aws/amazon-ec2-metadata-mock " + EC2MetadataMockVersion},
	}
	for _, cp := range ControlPlanes {
		_, patch, _ := strings.Cut(strings.TrimPrefix(cp.Kubernetes, "v1."), ".")
		staging := "v0." + strings.TrimPrefix(cp.Minor(), "1.") + "." + patch
		cases = append(cases,
			struct{ module, require string }{cp.Module, "k8s.io/kubernetes " + cp.Kubernetes},
			struct{ module, require string }{cp.Module, "go.etcd.io/etcd/server/v3 " + cp.Etcd},
			// The staging modules must be Kubernetes' own version's.
			struct{ module, require string }{cp.Module, "k8s.io/apiserver => k8s.io/apiserver " + staging},
			struct{ module, require string }{cp.Module, "k8s.io/kubectl => k8s.io/kubectl " + staging})
	}
	for _, tc := range cases {
		b, err := os.ReadFile(filepath.Join(root, "hack", tc.module, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), tc.require+"\n") {
			t.Errorf("hack/%s/go.mod does not require %q", tc.module, tc.require)
		}
	}
}

// TestEveryBinaryHasAMainPackage checks that the module building each
// binary or tool has a main package named after it, since `go build ./...`
// names the binaries after their directories, and that dev clusters do not
// build the test tools.
func TestEveryBinaryHasAMainPackage(t *testing.T) {
	root := findSourceDir()
	if root == "" {
		t.Fatal("not inside a vacate checkout")
	}
	var sources []binarySource
	for _, cp := range ControlPlanes {
		sources = append(sources, binarySources(cp)...)
	}
	for _, s := range append(slices.Clone(sources), toolSources...) {
		for _, n := range s.names {
			main := filepath.Join(root, "hack", s.module, n, "main.go")
			b, err := os.ReadFile(main)
			if err != nil {
				t.Errorf("%s is built by hack/%s: %v", n, s.module, err)
				continue
			}
			if !strings.Contains(string(b), "\npackage main\n") {
				t.Errorf("%s is not a main package", main)
			}
		}
	}
	for _, tool := range toolSources {
		for _, s := range sources {
			if s.module == tool.module || s.version == tool.version {
				t.Errorf("test tool module hack/%s is built with every dev cluster", tool.module)
			}
		}
	}
}

func TestEnsureToolRejectsUnknownName(t *testing.T) {
	t.Setenv(EnvCacheDir, t.TempDir())
	for _, name := range []string{Kwok, "no-such-tool"} {
		if _, err := EnsureTool(t.Context(), name, io.Discard); err == nil || !strings.Contains(err.Error(), "no test tool named") {
			t.Errorf("EnsureTool(%q) = %v, want an error naming no test tool", name, err)
		}
	}
}

func TestHashModuleChangesWithSources(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module x\n")
	write("main.go", "package main\n")
	write("README.md", "ignored\n")
	h1, err := hashModule(dir)
	if err != nil {
		t.Fatal(err)
	}
	write("README.md", "still ignored\n")
	if h2, _ := hashModule(dir); h2 != h1 {
		t.Errorf("hash changed when only a non-source file changed")
	}
	write("main.go", "package main\n\nfunc main() {}\n")
	if h3, _ := hashModule(dir); h3 == h1 {
		t.Errorf("hash did not change when main.go changed")
	}
}

func TestUpToDateNeedsEveryBinaryAndMatchingStamp(t *testing.T) {
	dir := t.TempDir()
	if upToDate(dir, []string{"a", "b"}, "") {
		t.Fatal("empty directory reported up to date")
	}
	for _, n := range []string{"a", "b"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if !upToDate(dir, []string{"a", "b"}, "") {
		t.Error("all binaries present and no hash to compare: want up to date")
	}
	if upToDate(dir, []string{"a", "b"}, "abc") {
		t.Error("missing stamp with a known hash: want stale")
	}
	if err := os.WriteFile(filepath.Join(dir, stampFile), []byte("abc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if !upToDate(dir, []string{"a", "b"}, "abc") {
		t.Error("matching stamp: want up to date")
	}
	if upToDate(dir, []string{"a", "b", "c"}, "abc") {
		t.Error("binary c missing: want stale")
	}
}

func TestTail(t *testing.T) {
	got := tail([]byte("1\n2\n3\n4\n"), 2)
	if got != "3\n4" {
		t.Errorf("tail = %q, want %q", got, "3\n4")
	}
	if got := tail([]byte("only"), 5); got != "only" {
		t.Errorf("tail = %q, want %q", got, "only")
	}
}

func TestProcessAliveRejectsOtherBinaries(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if !ProcessAlive(os.Getpid(), self) {
		t.Errorf("this test process is not alive running %s", self)
	}
	if ProcessAlive(os.Getpid(), "/usr/bin/not-this-one") {
		t.Error("a pid running another binary was taken as ours")
	}
	if ProcessAlive(0, self) || ProcessAlive(-1, self) {
		t.Error("pid <= 0 reported alive")
	}
}

func TestLostPortRace(t *testing.T) {
	clash := &ComponentError{Component: KubeScheduler, LogTail: "bind: address already in use", Err: errors.New("exited")}
	other := &ComponentError{Component: KubeScheduler, LogTail: "invalid flag", Err: errors.New("exited")}
	for _, tc := range []struct {
		name string
		err  error
		opts Options
		want bool
	}{
		{"chosen port taken", clash, Options{}, true},
		{"wrapped", fmt.Errorf("x: %w", clash), Options{}, true},
		{"port fixed by the caller", clash, Options{Ports: map[string]int{KubeScheduler: 1}}, false},
		{"another failure", other, Options{}, false},
		{"not a component error", errors.New("address already in use"), Options{}, false},
	} {
		if got := lostPortRace(tc.err, tc.opts); got != tc.want {
			t.Errorf("%s: lostPortRace = %t, want %t", tc.name, got, tc.want)
		}
	}
}

func TestAuditPolicyYAML(t *testing.T) {
	writes := "- level: Metadata\n  verbs: [\"create\", \"update\", \"patch\", \"delete\", \"deletecollection\"]\n- level: None\n"
	if got := auditPolicyYAML(nil); !strings.HasSuffix(got, "rules:\n"+writes) {
		t.Errorf("without users: want only the writes rule, got\n%s", got)
	}
	got := auditPolicyYAML([]string{"vacate:controller", "bench:kubectl"})
	want := "rules:\n- level: Metadata\n  users: [\"vacate:controller\", \"bench:kubectl\"]\n" + writes
	if !strings.HasSuffix(got, want) {
		t.Errorf("with users: want their every request recorded first, got\n%s", got)
	}
}

func TestKwokConfigYAML(t *testing.T) {
	if got := kwokConfigYAML(0); !strings.Contains(got, "options: {}\n---\n") {
		t.Errorf("default: want empty options, got\n%s", got)
	}
	if got := kwokConfigYAML(32); !strings.Contains(got, "options:\n  podPlayStageParallelism: 32\n  nodePlayStageParallelism: 32\n  nodeLeaseParallelism: 32\n---\n") {
		t.Errorf("32: got\n%s", got)
	}
	// The node stages of a kubelet that renews its lease: a status
	// heartbeat every 10 minutes, not kwok v0.7.0's pick of every 20 s.
	heartbeat := kwokConfigYAML(0)[strings.Index(kwokConfigYAML(0), "  name: node-heartbeat-with-lease\n"):]
	if !strings.Contains(heartbeat, "durationMilliseconds: 600000\n") || strings.Contains(kwokConfigYAML(0), "name: node-heartbeat\n") {
		t.Errorf("kwok's configuration lacks the heartbeat with lease, or has the one without:\n%s", kwokConfigYAML(0))
	}
	// Any pod stage replaces all of kwok's: the three it has must be there.
	for _, stage := range []string{"node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-gates-ready", "pod-gates-unready", "pod-complete", "pod-delete"} {
		if !strings.Contains(kwokConfigYAML(0), "  name: "+stage+"\n") {
			t.Errorf("kwok's configuration lacks the stage %s", stage)
		}
	}
}
