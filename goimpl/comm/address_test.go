package comm

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nonLoopback returns this machine's first up, non-loopback IPv4 address,
// or "" if it has none.
func nonLoopback() string {
	ifs, _ := net.Interfaces()
	for i := range ifs {
		if ifs[i].Flags&net.FlagUp != 0 && ifs[i].Flags&net.FlagLoopback == 0 {
			if ip := firstIPv4(&ifs[i]); ip != "" {
				return ip
			}
		}
	}
	return ""
}

// TestListenAddressNeverLoopbackForAHostName: a MASTER_ADDR that names this
// host and resolves to loopback here (Debian's 127.0.1.1) is the master of a
// job other hosts join: the listener must take an address they can reach.
// Loopback only for a loopback MASTER_ADDR, or when nothing else is up.
func TestListenAddressNeverLoopbackForAHostName(t *testing.T) {
	own := nonLoopback()
	saved := lookupIP
	defer func() { lookupIP = saved }()
	lookupIP = func(host string) ([]net.IP, error) {
		switch host {
		case "this-host":
			return []net.IP{net.ParseIP("127.0.1.1")}, nil
		case "own-address":
			return []net.IP{net.ParseIP(own)}, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	for _, master := range []string{"127.0.0.1", "localhost", "127.0.1.1"} {
		ip, err := listenAddress("", master)
		require.NoError(t, err)
		assert.Equal(t, "127.0.0.1", ip, "MASTER_ADDR=%s is loopback: a one-host job", master)
	}
	for _, master := range []string{"this-host", "unresolvable.invalid", ""} {
		ip, err := listenAddress("", master)
		require.NoError(t, err)
		if own == "" {
			assert.Equal(t, "127.0.0.1", ip, "no interface but loopback is up")
			continue
		}
		assert.False(t, net.ParseIP(ip).IsLoopback(), "MASTER_ADDR=%q: listened on %s, which no other host reaches", master, ip)
	}
	if own != "" {
		ip, err := listenAddress("", "own-address")
		require.NoError(t, err)
		assert.Equal(t, own, ip, "the master's own address routes through itself")
	}
}
