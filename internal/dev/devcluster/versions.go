package devcluster

import "strings"

// Pinned versions of the dev cluster's components. They must agree with the
// go.mod files of the modules under hack/ that build them; a test checks it.
const (
	// KubernetesVersion is the version of kube-apiserver,
	// kube-controller-manager, kube-scheduler and kubectl.
	KubernetesVersion = "v1.37.2"
	// EtcdVersion is the etcd server that KubernetesVersion requires.
	EtcdVersion = "v3.7.0"
	// KwokVersion is the kwok controller that simulates nodes and pods.
	KwokVersion = "v0.7.0"
	// EC2MetadataMockVersion is amazon-ec2-metadata-mock, which stands in
	// for the EC2 instance metadata service in vacate-agent's tests.
	EC2MetadataMockVersion = "v1.13.0"
)

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

var binarySources = []binarySource{
	{module: "controlplane", version: "kubernetes-" + KubernetesVersion + "_etcd-" + EtcdVersion,
		names: []string{Etcd, KubeAPIServer, KubeControllerManager, KubeScheduler, Kubectl}, ldflags: kubernetesVersionFlags()},
	{module: "kwok", version: "kwok-" + KwokVersion, names: []string{Kwok}},
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
func kubernetesVersionFlags() string {
	major, minor, _ := strings.Cut(strings.TrimPrefix(KubernetesVersion, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	var flags []string
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		flags = append(flags, "-X "+pkg+".gitMajor="+major, "-X "+pkg+".gitMinor="+minor,
			"-X "+pkg+".gitVersion="+KubernetesVersion, "-X "+pkg+".gitTreeState=clean",
			"-X "+pkg+".buildDate=1970-01-01T00:00:00Z")
	}
	return strings.Join(flags, " ")
}
