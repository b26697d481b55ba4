// Package traffic measures whether draining nodes drops requests: the
// question endpoint-aware eviction (issue 15) answers. A counter of failed
// pods or a PDB guard cannot see a request refused by a pod that stopped
// listening before the load balancer stopped sending to it; only real
// requests to real listeners can, so this package runs them.
//
// The parts stand in for what a kwok cluster lacks:
//
//   - Network: a network namespace holding a private prefix, so that pods get
//     addresses EndpointSlices accept (they refuse loopback) and reach from
//     the host without touching anything else on it.
//   - Kubelet: runs one server process per pod inside the Network, stops it
//     as a kubelet stops containers (SIGTERM, grace period, SIGKILL), and
//     deletes the pod only once its process has exited.
//   - Balancer: sends requests round robin to the ready endpoints of a
//     Service's EndpointSlices, applying every change late, as kube-proxy
//     does, and counts what failed.
//   - MaybeServe: the pod's server, in the same binary as its caller so no
//     extra program is built or shipped.
//
// Everything needs root on Linux (network namespaces, veth links, routes).
package traffic
