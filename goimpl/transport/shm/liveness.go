package shm

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"syscall"
	"unsafe"
)

// A peer process that is killed never writes its closed flags, and nothing
// in shared memory tells its partners (a socket would be reset by the
// kernel). So each rank records its pid in its process slot, and a
// receive side that has waited a while checks that the peer still runs:
// /proc/<pid>/stat gone, or a zombie, or a different start time (the pid
// was reused) means it is dead. Pids only mean something within one pid
// namespace; two containers sharing /dev/shm but not pids skip the check
// and rely on deadlines.

// procIdentity is what a process slot records.
type procIdentity struct {
	pid, pidNS, start uint64
}

// selfIdentity reads this process's identity; a zero pid means unknown.
func selfIdentity() procIdentity {
	ns := pidNamespace()
	if ns == 0 {
		return procIdentity{}
	}
	pid := uint64(os.Getpid())
	var r procReader
	state, start, err := r.stat(pid)
	if err != nil || state == 0 {
		return procIdentity{}
	}
	return procIdentity{pid: pid, pidNS: ns, start: start}
}

func pidNamespace() uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/pid", &st); err != nil {
		return 0
	}
	return st.Ino
}

func (s *procSlot) publish(id procIdentity) {
	s.pidNS.Store(id.pidNS)
	s.start.Store(id.start)
	s.pid.Store(id.pid)
}

func (s *procSlot) load() procIdentity {
	pid := s.pid.Load()
	return procIdentity{pid: pid, pidNS: s.pidNS.Load(), start: s.start.Load()}
}

// dead reports whether the process id names is known to have exited. It
// answers false whenever it cannot tell.
func (id procIdentity) dead(self procIdentity, r *procReader) bool {
	if id.pid == 0 || self.pid == 0 || id.pidNS != self.pidNS || id.pid > 1<<22 {
		return false
	}
	state, start, err := r.stat(id.pid)
	if errors.Is(err, os.ErrNotExist) {
		return true
	}
	if err != nil {
		return false
	}
	return state == 'Z' || state == 'X' || start != id.start
}

// procReader reads /proc/<pid>/stat without allocating: the receive side
// checks an idle peer every livenessEvery, and an idle link should not
// feed the garbage collector.
type procReader struct {
	pid  uint64
	path []byte // "/proc/<pid>/stat", NUL-terminated
	buf  [1024]byte
}

var errMalformedStat = errors.New("malformed /proc stat")

// stat returns the state letter and start time of a process.
func (r *procReader) stat(pid uint64) (state byte, start uint64, err error) {
	if r.path == nil || r.pid != pid {
		r.pid = pid
		r.path = append(strconv.AppendUint([]byte("/proc/"), pid, 10), "/stat\x00"...)
	}
	fd, _, e := syscall.Syscall6(syscall.SYS_OPENAT, uintptr(atFDCWD), uintptr(unsafe.Pointer(&r.path[0])),
		syscall.O_RDONLY|syscall.O_CLOEXEC, 0, 0, 0)
	if e != 0 {
		return 0, 0, e // ENOENT matches os.ErrNotExist
	}
	n, _, e := syscall.Syscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&r.buf[0])), uintptr(len(r.buf)))
	syscall.Close(int(fd))
	if e != 0 {
		return 0, 0, e
	}
	if int(n) >= len(r.buf) {
		return 0, 0, errMalformedStat
	}
	state, start, ok := parseStat(r.buf[:n])
	if !ok {
		return 0, 0, errMalformedStat
	}
	return state, start, nil
}

// atFDCWD is AT_FDCWD, held in a variable: a negative constant does not
// convert to uintptr.
var atFDCWD = -100

// parseStat picks the state (field 3) and start time (field 22) out of a
// /proc/<pid>/stat line. The command name (field 2) is in parentheses and
// may hold anything, spaces and parentheses included; the fields after its
// last ')' are plain.
func parseStat(b []byte) (state byte, start uint64, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	field := 2
	for b = b[i+1:]; len(b) > 0; {
		if b[0] == ' ' || b[0] == '\n' {
			b = b[1:]
			continue
		}
		j := 0
		for j < len(b) && b[j] != ' ' && b[j] != '\n' {
			j++
		}
		tok := b[:j]
		b = b[j:]
		field++
		switch field {
		case 3:
			if len(tok) != 1 {
				return 0, 0, false
			}
			state = tok[0]
		case 22:
			for _, c := range tok {
				if c < '0' || c > '9' {
					return 0, 0, false
				}
				start = start*10 + uint64(c-'0')
			}
			return state, start, len(tok) > 0
		}
	}
	return 0, 0, false
}
