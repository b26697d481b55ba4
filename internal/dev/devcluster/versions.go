package devcluster

import (
	"fmt"
	"os"
	"strings"
)

// Pinned versions of the dev cluster's components. They must agree with the
// go.mod files of the modules under hack/ that build them; a test checks it.
const (
	// KubernetesVersion is the version of kube-apiserver,
	// kube-controller-manager, kube-scheduler and kubectl that dev clusters
	// run unless $VACATE_K8S_VERSION names another supported minor.
	KubernetesVersion = "v1.37.2"
	// EtcdVersion is the etcd server that KubernetesVersion requires.
	EtcdVersion = "v3.7.0"
	// KwokVersion is the kwok controller that simulates nodes and pods.
	KwokVersion = "v0.7.0"
	// EC2MetadataMockVersion is amazon-ec2-metadata-mock, which stands in
	// for the EC2 instance metadata service in vacate-agent's tests.
	EC2MetadataMockVersion = "v1.13.0"
)

// EnvKubernetesVersion selects the Kubernetes minor a dev cluster runs
// ("1.30"; a "v" prefix or the exact patch of ControlPlanes is accepted
// too). Unset, dev clusters run KubernetesVersion. `make test-compat K8S=1.30`
// sets it.
const EnvKubernetesVersion = "VACATE_K8S_VERSION"

// ControlPlane is a Kubernetes version dev clusters can run, with the etcd it
// requires and the module under hack/ that builds both.
type ControlPlane struct {
	// Kubernetes is the exact version, "v1.30.14".
	Kubernetes string
	// Etcd is the etcd server this Kubernetes version requires.
	Etcd string
	// Module is the directory under hack/ that builds the binaries.
	Module string
	// EvictionRequestAPI says the version has Kubernetes' EvictionRequest
	// API (alpha, KEP-4563), which Options.EvictionRequestAPI turns on.
	EvictionRequestAPI bool
}

// ControlPlanes are the Kubernetes versions dev clusters can run, oldest
// first: the oldest minor vacate supports (docs/dev/compat.md says why it
// is the oldest) and the newest, KubernetesVersion.
var ControlPlanes = []ControlPlane{
	{Kubernetes: "v1.30.14", Etcd: "v3.5.10", Module: "controlplane-1.30"},
	{Kubernetes: KubernetesVersion, Etcd: EtcdVersion, Module: "controlplane", EvictionRequestAPI: true},
}

// Minor is the version's minor, "1.30".
func (cp ControlPlane) Minor() string {
	major, rest, _ := strings.Cut(strings.TrimPrefix(cp.Kubernetes, "v"), ".")
	minor, _, _ := strings.Cut(rest, ".")
	return major + "." + minor
}

// OldestKubernetesMinor is the oldest Kubernetes minor vacate supports.
func OldestKubernetesMinor() string { return ControlPlanes[0].Minor() }

// ControlPlaneFor returns the control plane of version: a minor ("1.30",
// "v1.30") or its exact pinned version ("v1.30.14"); empty is the default,
// KubernetesVersion.
func ControlPlaneFor(version string) (ControlPlane, error) {
	if version == "" {
		version = KubernetesVersion
	}
	want := strings.TrimPrefix(strings.TrimSpace(version), "v")
	var known []string
	for _, cp := range ControlPlanes {
		if want == cp.Minor() || want == strings.TrimPrefix(cp.Kubernetes, "v") {
			return cp, nil
		}
		known = append(known, cp.Minor())
	}
	return ControlPlane{}, fmt.Errorf("no dev cluster for Kubernetes %q: the supported minors are %s (hack/controlplane-<minor> builds the older ones)",
		version, strings.Join(known, ", "))
}

// SelectedControlPlane is the control plane $VACATE_K8S_VERSION names, or the
// default one when it is unset.
func SelectedControlPlane() (ControlPlane, error) {
	cp, err := ControlPlaneFor(os.Getenv(EnvKubernetesVersion))
	if err != nil {
		return ControlPlane{}, fmt.Errorf("$%s: %w", EnvKubernetesVersion, err)
	}
	return cp, nil
}

// Component names, used for binaries, log files, pid files and errors.
const (
	Etcd                  = "etcd"
	KubeAPIServer         = "kube-apiserver"
	KubeControllerManager = "kube-controller-manager"
	KubeScheduler         = "kube-scheduler"
	Kubectl               = "kubectl"
	Kwok                  = "kwok"
	// EC2MetadataMock is a test tool, not a dev cluster component: build it
	// with EnsureTool.
	EC2MetadataMock = "ec2-metadata-mock"
)

// binarySource says which module under hack/ builds a binary.
type binarySource struct {
	module  string // directory under hack/
	version string // cache key
	names   []string
	// ldflags are the linker flags of the build, part of the build stamp.
	ldflags string
}

// binarySources are the modules a dev cluster running cp needs built.
func binarySources(cp ControlPlane) []binarySource {
	return []binarySource{
		{module: cp.Module, version: "kubernetes-" + cp.Kubernetes + "_etcd-" + cp.Etcd,
			names: []string{Etcd, KubeAPIServer, KubeControllerManager, KubeScheduler, Kubectl}, ldflags: kubernetesVersionFlags(cp.Kubernetes)},
		{module: "kwok", version: "kwok-" + KwokVersion, names: []string{Kwok}},
	}
}

// toolSources build the test tools that dev clusters do not run; EnsureTool
// builds one on demand, so starting a dev cluster never waits for them.
var toolSources = []binarySource{
	{module: "ec2-metadata-mock", version: "ec2-metadata-mock-" + EC2MetadataMockVersion, names: []string{EC2MetadataMock}},
}

// kubernetesVersionFlags stamp the Kubernetes binaries with their version,
// as Kubernetes' own release build does: built from the module proxy, they
// would otherwise say v0.0.0-master, and tools that check the server's
// version (Helm's kubeVersion, kubectl version) would refuse it.
func kubernetesVersionFlags(version string) string {
	major, minor, _ := strings.Cut(strings.TrimPrefix(version, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	var flags []string
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		flags = append(flags, "-X "+pkg+".gitMajor="+major, "-X "+pkg+".gitMinor="+minor,
			"-X "+pkg+".gitVersion="+version, "-X "+pkg+".gitTreeState=clean",
			"-X "+pkg+".buildDate=1970-01-01T00:00:00Z")
	}
	return strings.Join(flags, " ")
}
