package comm

import (
	"runtime"

	"github.com/gohccl/gohccl/goimpl/transport/tcp"
)

// stripesTo returns, for each rank, how many TCP connections this rank opens
// to it (GOHCCL_NSOCKS): one to a peer on this host that shared memory
// serves (the connection only watches that the peer lives), else the
// configured number, else the automatic one.
func stripesTo(opt Options, peers []peerInfo) []int {
	me := peers[opt.Rank].Host
	local := 0
	for _, p := range peers {
		if p.Host == me {
			local++
		}
	}
	auto := tcp.AutoStripes(runtime.GOMAXPROCS(0), local)
	out := make([]int, len(peers))
	for p := range peers {
		switch {
		case peers[p].Host == me && opt.Config.Transport != "tcp":
			out[p] = 1
		case opt.Config.NSocks > 0:
			out[p] = opt.Config.NSocks
		default:
			out[p] = auto
		}
	}
	return out
}
