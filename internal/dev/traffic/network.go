package traffic

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Network is a network namespace that holds every address of a private
// prefix, reachable from the host. Pods of simulated nodes whose
// spec.podCIDR lies in the prefix get addresses that EndpointSlices accept
// and that a server can bind inside the namespace, while nothing on the
// host itself answers for them: a request that reaches no server is refused,
// as it is in a real cluster, instead of reaching something else.
//
// Inside the namespace a local route makes the whole prefix bindable (no
// address to add per pod); the host routes the prefix through a veth pair
// whose own /30 is the last one of the prefix, so no address outside the
// prefix is used. Pod CIDRs must stay off that /30 (see Contains).
type Network struct {
	name   string
	prefix netip.Prefix
	link   netip.Prefix // the last /30 of prefix: the veth pair's addresses
	hostIf string       // the host's end of the veth pair
	nsIf   string       // the namespace's end

	mu sync.Mutex
}

// netnsDir is where `ip netns` keeps the namespaces it names.
const netnsDir = "/run/netns"

// validName keeps a namespace's name a plain file name under netnsDir.
var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// NewNetwork creates the namespace name for prefix, which must be a private
// IPv4 range between /8 and /28 that no host route already covers. A
// namespace of the same name left by a run that crashed is removed first,
// so the name must be unique among the programs running on the host. Close
// removes everything it made.
func NewNetwork(name string, prefix netip.Prefix) (*Network, error) {
	if err := checkPrefix(prefix); err != nil {
		return nil, fmt.Errorf("network %s: %w", name, err)
	}
	if !validName.MatchString(name) {
		return nil, fmt.Errorf("network %q: a name is letters, digits, '_', '.' and '-', at most 64", name)
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	id := fmt.Sprintf("%08x", h.Sum32())
	last := lastAddr(prefix)
	n := &Network{
		name:   name,
		prefix: prefix,
		link:   netip.PrefixFrom(addrAdd(last, -3), 30),
		hostIf: "vth" + id,
		nsIf:   "vtn" + id,
	}
	if err := n.remove(); err != nil {
		return nil, fmt.Errorf("removing what a previous run left of network %s: %w", name, err)
	}
	if err := n.checkHostRoutes(); err != nil {
		return nil, err
	}
	if err := n.create(); err != nil {
		return nil, errors.Join(fmt.Errorf("creating network %s: %w", name, err), n.remove())
	}
	return n, nil
}

// checkPrefix refuses prefixes whose addresses could belong to someone: a
// route for a public range would divert the host's own traffic.
func checkPrefix(p netip.Prefix) error {
	switch {
	case !p.IsValid() || !p.Addr().Is4():
		return fmt.Errorf("prefix %s is not an IPv4 prefix", p)
	case p != p.Masked():
		return fmt.Errorf("prefix %s is not canonical (%s)", p, p.Masked())
	case !p.Addr().IsPrivate() || !lastAddr(p).IsPrivate():
		return fmt.Errorf("prefix %s is not a private range (10/8, 172.16/12, 192.168/16)", p)
	case p.Bits() < 8 || p.Bits() > 28:
		return fmt.Errorf("prefix %s: want between /8 and /28", p)
	}
	return nil
}

// checkHostRoutes refuses a prefix that the host already routes, or holds
// an address of, in any table: the namespace would take its traffic.
func (n *Network) checkHostRoutes() error {
	out, err := ipCmd("-4", "-o", "route", "show", "table", "all", "root", n.prefix.String())
	if err != nil {
		return fmt.Errorf("network %s: listing host routes: %w", n.name, err)
	}
	if s := strings.TrimSpace(out); s != "" {
		return fmt.Errorf("network %s: the host already has routes in %s:\n%s", n.name, n.prefix, s)
	}
	return nil
}

// create makes the namespace, the veth pair and the routes.
func (n *Network) create() error {
	hostAddr, nsAddr := n.linkAddrs()
	link := n.link.String()
	steps := [][]string{
		{"netns", "add", n.name},
		{"link", "add", n.hostIf, "type", "veth", "peer", "name", n.nsIf, "netns", n.name},
		{"addr", "add", netip.PrefixFrom(hostAddr, 30).String(), "dev", n.hostIf},
		{"link", "set", n.hostIf, "up"},
		{"-n", n.name, "link", "set", "lo", "up"},
		{"-n", n.name, "addr", "add", netip.PrefixFrom(nsAddr, 30).String(), "dev", n.nsIf},
		{"-n", n.name, "link", "set", n.nsIf, "up"},
		// Every address of the prefix is the namespace's own, so a server
		// binds its pod's IP without adding it first.
		{"-n", n.name, "route", "add", "local", n.prefix.String(), "dev", "lo"},
		// Except the host's end of the link: the local table is looked up
		// before the main one, so the link's route must be there too.
		{"-n", n.name, "route", "add", link, "dev", n.nsIf, "table", "local"},
		{"route", "add", n.prefix.String(), "via", nsAddr.String(), "dev", n.hostIf},
	}
	for _, args := range steps {
		if _, err := ipCmd(args...); err != nil {
			return err
		}
	}
	return nil
}

// Name is the namespace's name, as `ip netns` knows it.
func (n *Network) Name() string { return n.name }

// Prefix is the range the namespace holds.
func (n *Network) Prefix() netip.Prefix { return n.prefix }

// Contains reports whether a is an address a pod may have: in the prefix
// and not one of the four addresses of the link to the host. Traffic is
// sent only to such addresses.
func (n *Network) Contains(a netip.Addr) bool {
	return n.prefix.Contains(a) && !n.link.Contains(a)
}

// Close removes the namespace, the veth pair and the host's route. It may
// be called more than once. Servers still running inside lose their
// network; stop the Kubelet first.
func (n *Network) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.remove(); err != nil {
		return fmt.Errorf("removing network %s: %w", n.name, err)
	}
	return nil
}

// remove deletes whatever exists of the network. Deleting the host's end of
// the veth pair deletes the other end and the host's route with it, even
// when processes still keep the namespace itself alive.
func (n *Network) remove() error {
	var errs []error
	if exists("/sys/class/net/" + n.hostIf) {
		if _, err := ipCmd("link", "del", n.hostIf); err != nil {
			errs = append(errs, err)
		}
	}
	if exists(netnsDir + "/" + n.name) {
		if _, err := ipCmd("netns", "del", n.name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// linkAddrs are the addresses of the host's and the namespace's ends of
// the link.
func (n *Network) linkAddrs() (host, ns netip.Addr) {
	return addrAdd(n.link.Addr(), 1), addrAdd(n.link.Addr(), 2)
}

// ipCmd runs ip(8) and returns its output, or an error that includes it.
func ipCmd(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// lastAddr is the highest address of an IPv4 prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().As4()
	v := binary.BigEndian.Uint32(b[:]) | (uint32(1)<<(32-p.Bits()) - 1)
	return addrFromUint32(v)
}

// addrAdd is a+d for IPv4 addresses that do not wrap around.
func addrAdd(a netip.Addr, d int) netip.Addr {
	b := a.As4()
	return addrFromUint32(uint32(int64(binary.BigEndian.Uint32(b[:])) + int64(d)))
}

func addrFromUint32(v uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}
