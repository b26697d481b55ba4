package devcluster

// Pinned versions of the dev cluster's components. They must agree with the
// go.mod files of the modules under hack/ that build them; a test checks it.
const (
	// KubernetesVersion is the version of kube-apiserver,
	// kube-controller-manager, kube-scheduler and kubectl.
	KubernetesVersion = "v1.36.3"
	// EtcdVersion is the etcd server that KubernetesVersion requires.
	EtcdVersion = "v3.6.8"
	// KwokVersion is the kwok controller that simulates nodes and pods.
	KwokVersion = "v0.7.0"
)

// Component names, used for binaries, log files, pid files and errors.
const (
	Etcd                  = "etcd"
	KubeAPIServer         = "kube-apiserver"
	KubeControllerManager = "kube-controller-manager"
	KubeScheduler         = "kube-scheduler"
	Kubectl               = "kubectl"
	Kwok                  = "kwok"
)

// binarySource says which module under hack/ builds a binary.
type binarySource struct {
	module  string // directory under hack/
	version string // cache key
	names   []string
}

var binarySources = []binarySource{
	{module: "controlplane", version: "kubernetes-" + KubernetesVersion + "_etcd-" + EtcdVersion,
		names: []string{Etcd, KubeAPIServer, KubeControllerManager, KubeScheduler, Kubectl}},
	{module: "kwok", version: "kwok-" + KwokVersion, names: []string{Kwok}},
}
