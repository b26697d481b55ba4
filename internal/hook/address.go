package hook

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RefusedError is an address the controller never calls: the hook would
// reach something other than the app it drains (the node itself, the
// cloud's metadata service, the controller's own host).
type RefusedError struct {
	Pod, IP, Why string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("vacate does not call the HTTP hook of pod %s at %s: %s", e.Pod, e.IP, e.Why)
}

// IsRefused reports whether err is (or wraps) a RefusedError.
func IsRefused(err error) bool {
	var re *RefusedError
	return errors.As(err, &re)
}

// awsMetadataV6 is the IPv6 address of the EC2 instance metadata service
// (a unique local address, so no range test catches it).
var awsMetadataV6 = netip.MustParseAddr("fd00:ec2::254")

// broadcast is the IPv4 limited broadcast address.
var broadcast = netip.MustParseAddr("255.255.255.255")

// CheckPod says whether the controller may call the pod's hook at ip: the
// pod is not on the host network (its IP would be the node's), ip is one of
// its current status.podIPs, and CheckAddress allows it.
func CheckPod(pod *corev1.Pod, ip string, allowLoopback bool) error {
	name := pod.Namespace + "/" + pod.Name
	if pod.Spec.HostNetwork {
		return &RefusedError{Pod: name, IP: ip, Why: "the pod uses hostNetwork: its IP is the node's, and the call would reach whatever listens on the node"}
	}
	if !slices.Contains(podIPs(pod), ip) {
		return &RefusedError{Pod: name, IP: ip, Why: "the address is not among the pod's status.podIPs"}
	}
	return CheckAddress(name, ip, allowLoopback)
}

// podIPs are the pod's current IPs (status.podIPs, or status.podIP alone).
func podIPs(pod *corev1.Pod) []string {
	if len(pod.Status.PodIPs) == 0 {
		return []string{pod.Status.PodIP}
	}
	out := make([]string, 0, len(pod.Status.PodIPs))
	for _, a := range pod.Status.PodIPs {
		out = append(out, a.IP)
	}
	return out
}

// CheckAddress refuses the addresses a hook is never called on: link-local
// (169.254.0.0/16 with the cloud metadata service, fe80::/10), the EC2
// metadata address fd00:ec2::254, unspecified, multicast, broadcast, and
// loopback unless allowLoopback (development clusters, whose simulated pods
// live on 127.0.0.0/8). An IPv4-mapped IPv6 address is judged as IPv4.
func CheckAddress(pod, ip string, allowLoopback bool) error {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return &RefusedError{Pod: pod, IP: Summary(ip), Why: "not an IP address"}
	}
	a = a.Unmap()
	var why string
	switch {
	case a == awsMetadataV6:
		why = "it is the cloud metadata address"
	case a.IsLinkLocalUnicast():
		why = "it is a link-local address (such as the cloud metadata service)"
	case a.IsUnspecified():
		why = "it is the unspecified address"
	case a.IsMulticast():
		why = "it is a multicast address"
	case a == broadcast:
		why = "it is the broadcast address"
	case a.IsLoopback() && !allowLoopback:
		why = "it is a loopback address (allowed only with --allow-loopback-hooks, for development clusters)"
	default:
		return nil
	}
	return &RefusedError{Pod: pod, IP: ip, Why: why}
}

// MaxSummary is the longest summary (in runes) of what an app said that
// the controller copies into status and events.
const MaxSummary = 256

// Summary is s made short and printable, for status and events: control
// characters, format characters (such as bidirectional overrides) and
// invalid UTF-8 become spaces, runs of spaces one, and it is cut at
// MaxSummary runes, marked with "…".
func Summary(s string) string {
	out := make([]rune, 0, min(len(s), MaxSummary+1))
	space := false
	for _, r := range strings.ToValidUTF8(s, " ") {
		if r == utf8.RuneError || !unicode.IsPrint(r) || unicode.IsSpace(r) {
			r = ' '
		}
		if r == ' ' && space {
			continue
		}
		space = r == ' '
		out = append(out, r)
		if len(out) > MaxSummary {
			return string(out[:MaxSummary-1]) + "…"
		}
	}
	return string(out)
}

// StillTheTarget is a prober's check before every call (Prober.Check),
// against what c reads (an informer's current view): the pod is there with
// the same UID, and the target's IP is still one of its addresses and one
// vacate calls. A pod gone, replaced or moved to another IP is not called:
// the IP may belong to another pod by now.
func StillTheTarget(ctx context.Context, c client.Reader, t Target, allowLoopback bool) error {
	pod := &corev1.Pod{}
	if err := c.Get(ctx, t.Key, pod); err != nil {
		return fmt.Errorf("reading pod %s: %w", t.Name, err)
	}
	if pod.UID != t.Pod {
		return fmt.Errorf("pod %s is gone (another pod has its name)", t.Name)
	}
	return CheckPod(pod, t.IP, allowLoopback)
}
