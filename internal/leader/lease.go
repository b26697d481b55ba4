package leader

// Where vacate-controller holds its leader Lease unless its flags
// (--leader-election-id, --leader-election-namespace) say otherwise: the
// controller's defaults, and where `vacate uninstall` looks for a
// controller run outside the installed Deployment.
const (
	DefaultLeaseName      = "vacate-controller"
	DefaultLeaseNamespace = "kube-system"
)
