package flight

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gohccl/gohccl/goimpl/transport"
)

// Version is the dump format's version; python/gohccl/trace.py reads it.
const Version = 1

// Dump is one rank's record of one communicator as written to a file: who
// wrote it, why, and its operations oldest first.
type Dump struct {
	Version int    `json:"version"`
	Rank    int    `json:"rank"`
	Size    int    `json:"size"`
	Group   string `json:"group"` // the communicator id, the same on every rank of the group
	Host    string `json:"host"`
	// Hosts is every rank's host identity as bootstrap learned it, so an
	// analysis can name the host of a rank that wrote no dump.
	Hosts []string `json:"hosts,omitempty"`
	PID   int      `json:"pid"`
	// Reason is why the dump was written: "timeout", "mismatch",
	// "peer lost", "error", "signal SIGUSR1" or "request".
	Reason string `json:"reason"`
	// Error is what broke the communicator, if anything did.
	Error string `json:"error,omitempty"`
	// Links names the transports that reach the peers ("shm:2 self:1").
	Links string `json:"links"`
	// Time is when the dump was taken, Unix nanoseconds.
	Time int64 `json:"time_ns"`
	// LastSeq is the sequence number of the latest collective begun.
	LastSeq uint64 `json:"last_seq"`
	// Buffer is the ring's capacity; Dropped counts older records it lost.
	Buffer  int     `json:"buffer"`
	Dropped uint64  `json:"dropped"`
	Entries []Entry `json:"entries"`
}

// Entry is a Record as the dump spells it.
type Entry struct {
	ID    uint64 `json:"id"`
	Seq   uint64 `json:"seq"`
	Kind  string `json:"kind"`
	DType string `json:"dtype"`
	Op    string `json:"op,omitempty"`
	Count uint64 `json:"count"`
	Root  *int32 `json:"root,omitempty"`
	Peer  *int32 `json:"peer,omitempty"`
	Tag   *int64 `json:"tag,omitempty"`
	// Algo is the tuner's choice as GOHCCL_ALGO names it, with its segment
	// ("ring/1MiB", "mesh.oneshot", "level0:mesh;level1:rhd").
	Algo    string `json:"algo,omitempty"`
	State   string `json:"state"`
	Start   int64  `json:"start_ns"`
	End     int64  `json:"end_ns,omitempty"`
	Micros  int64  `json:"duration_us"`
	Awaited []int  `json:"awaited,omitempty"`
	// AwaitedMore counts awaited peers beyond those listed.
	AwaitedMore int `json:"awaited_more,omitempty"`
}

// Entries converts records, newest state as of now, into their dump form.
func Entries(recs []Record, now time.Time) []Entry {
	out := make([]Entry, len(recs))
	for i := range recs {
		r := &recs[i]
		e := Entry{ID: r.ID, Seq: r.Seq, Kind: r.Kind.String(), DType: r.DType.String(), Count: r.Count,
			State: r.State.String(), Start: r.Start, End: r.End}
		switch {
		case r.Recv:
			e.Kind = "recv"
		case r.Kind.IsP2P():
			e.Kind = "send"
		}
		if r.Kind.IsP2P() {
			peer, tag := r.Peer, r.Tag
			e.Peer, e.Tag = &peer, &tag
		} else {
			e.Algo = r.Choice.String()
			if r.Choice.Row == nil {
				e.Algo = ""
			}
		}
		if r.Root >= 0 && !r.Kind.IsP2P() {
			root := r.Root
			e.Root = &root
		}
		if r.Op.Valid() && hasOp(r.Kind) {
			e.Op = r.Op.String()
		}
		end := r.End
		if end == 0 {
			end = now.UnixNano()
		}
		e.Micros = (end - r.Start) / 1000
		n := min(int(r.NAwaited), MaxAwaited)
		for _, p := range r.Awaited[:n] {
			e.Awaited = append(e.Awaited, int(p))
		}
		e.AwaitedMore = int(r.NAwaited) - n
		out[i] = e
	}
	return out
}

func hasOp(k transport.Kind) bool {
	return k == transport.KindAllReduce || k == transport.KindReduce || k == transport.KindReduceScatter
}

// FileName is the name of the dump of rank in group on host: one file per
// rank and group, so that every rank of every group can write into one
// directory (also one shared by several hosts).
func FileName(group string, rank int, host string) string {
	return fmt.Sprintf("gohccl_trace_%s_rank%d_%s.json", sanitize(group), rank, sanitize(host))
}

func sanitize(s string) string {
	if s == "" {
		return "unknown"
	}
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.':
			return r
		}
		return '_'
	}, s)
}

// Write writes d into dir (created if missing) as FileName's file, whole or
// not at all: through a temporary file renamed into place, so an analysis
// never reads half a dump. It returns the file's path.
func Write(dir string, d *Dump) (string, error) {
	if dir == "" {
		return "", fmt.Errorf("flight: no directory to write the dump of rank %d into", d.Rank)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("flight: %w", err)
	}
	b, err := json.MarshalIndent(d, "", " ")
	if err != nil {
		return "", fmt.Errorf("flight: %w", err)
	}
	path := filepath.Join(dir, FileName(d.Group, d.Rank, d.Host))
	tmp, err := os.CreateTemp(dir, ".gohccl_trace_*.tmp")
	if err != nil {
		return "", fmt.Errorf("flight: %w", err)
	}
	_, werr := tmp.Write(append(b, '\n'))
	cerr := tmp.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), path)
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("flight: writing %s: %w", path, werr)
	}
	return path, nil
}
