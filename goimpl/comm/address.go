package comm

import (
	"fmt"
	"net"
	"strings"

	"github.com/gohccl/gohccl/goimpl/transport/tcp"
)

// hostname is the hostname part of a host identity ("name/boot-id").
func hostname(identity string) string {
	h, _, _ := strings.Cut(identity, "/")
	return h
}

// name describes rank p for errors: its rank, host and published address.
func (pi peerInfo) name(p int) string { return tcp.PeerName(p, hostname(pi.Host), pi.Addr) }

// lookupIP resolves the rendezvous host; tests replace it.
var lookupIP = net.LookupIP

// routeProbe is an address outside every private range (TEST-NET-3,
// RFC 5737): asking the kernel how it would reach it names the interface of
// the default route.
var routeProbe = net.IPv4(203, 0, 113, 1)

// listenAddress picks the IPv4 address to listen on:
//   - GOHCCL_SOCKET_IFNAME's interface, when set;
//   - else the address of the interface that routes to MASTER_ADDR: the
//     one the other hosts reach the rendezvous through;
//   - when MASTER_ADDR is loopback itself (localhost, 127.x), loopback: a
//     one-host job;
//   - when MASTER_ADDR is a name that resolves to loopback here (Debian
//     maps the host's own name to 127.0.1.1), this host is the master and
//     the other hosts reach it by another address: the default route's
//     interface, else the first non-loopback one;
//   - loopback only when nothing else is up.
func listenAddress(ifname, master string) (string, error) {
	if ifname != "" {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return "", fmt.Errorf("GOHCCL_SOCKET_IFNAME=%s: %v", ifname, err)
		}
		if ip := firstIPv4(ifi); ip != "" {
			return ip, nil
		}
		return "", fmt.Errorf("GOHCCL_SOCKET_IFNAME=%s: the interface has no IPv4 address", ifname)
	}
	if master != "" {
		if ip := net.ParseIP(master); (ip != nil && ip.IsLoopback()) || strings.EqualFold(master, "localhost") {
			return "127.0.0.1", nil
		}
		if ips, err := lookupIP(master); err == nil {
			for _, ip := range ips {
				if ip.To4() == nil || ip.IsLoopback() {
					continue
				}
				if local := localAddressTo(ip); local != "" {
					return local, nil
				}
			}
		}
	}
	if local := localAddressTo(routeProbe); local != "" {
		return local, nil
	}
	ifs, _ := net.Interfaces()
	for i := range ifs {
		if ifs[i].Flags&net.FlagUp != 0 && ifs[i].Flags&net.FlagLoopback == 0 {
			if ip := firstIPv4(&ifs[i]); ip != "" {
				return ip, nil
			}
		}
	}
	return "127.0.0.1", nil
}

// localAddressTo returns the local IPv4 address the kernel would send from
// to reach ip, or "" when there is no route or it is loopback. A UDP
// "connection" sends nothing; it only asks the routing table.
func localAddressTo(ip net.IP) string {
	u, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: ip, Port: 9})
	if err != nil {
		return ""
	}
	defer u.Close()
	local := u.LocalAddr().(*net.UDPAddr).IP
	if local.IsLoopback() || local.IsUnspecified() {
		return ""
	}
	return local.String()
}

func firstIPv4(ifi *net.Interface) string {
	addrs, _ := ifi.Addrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}
