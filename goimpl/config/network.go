package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// MaxPeerTimeout bounds GOHCCL_PEER_TIMEOUT: longer than a day is a typo,
// and the op timeout bounds every wait anyway.
const MaxPeerTimeout = 24 * time.Hour

// MinPeerTimeout is the shortest GOHCCL_PEER_TIMEOUT accepted: keepalive
// probes go out at whole seconds, so a shorter bound could not tell a quiet
// peer from a dead one.
const MinPeerTimeout = 2 * time.Second

// loadNetwork reads the TCP transport's liveness and port settings.
func (c *Config) loadNetwork(get func(string) string) error {
	v := get("GOHCCL_PEER_TIMEOUT")
	s, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(s) || s < 0 {
		return fmt.Errorf("GOHCCL_PEER_TIMEOUT=%q: want a number of seconds (0 for off)", v)
	}
	d := time.Duration(s * float64(time.Second))
	if s != 0 && (d < MinPeerTimeout || d > MaxPeerTimeout) {
		return fmt.Errorf("GOHCCL_PEER_TIMEOUT=%q: want 0 (off) or between %v and %v", v, MinPeerTimeout, MaxPeerTimeout)
	}
	c.PeerTimeout = d
	if c.PortLo, c.PortHi, err = ParsePortRange(get("GOHCCL_PORT_RANGE")); err != nil {
		return fmt.Errorf("GOHCCL_PORT_RANGE: %v", err)
	}
	return nil
}

// ParsePortRange parses "lo-hi" (or one port "p"); "" is no range (0, 0).
func ParsePortRange(s string) (lo, hi int, err error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, 0, nil
	}
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		b = a
	}
	lo, err1 := strconv.Atoi(strings.TrimSpace(a))
	hi, err2 := strconv.Atoi(strings.TrimSpace(b))
	if err1 != nil || err2 != nil || lo < 1 || hi > 65535 || lo > hi {
		return 0, 0, fmt.Errorf("%q is not a port range (want lo-hi with 1 <= lo <= hi <= 65535, e.g. 29600-29700)", s)
	}
	return lo, hi, nil
}
