package shm

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"syscall"
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
	state, start, err := procStat(os.Getpid())
	if err != nil || state == 0 {
		return procIdentity{}
	}
	return procIdentity{pid: uint64(os.Getpid()), pidNS: ns, start: start}
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
func (id procIdentity) dead(self procIdentity) bool {
	if id.pid == 0 || self.pid == 0 || id.pidNS != self.pidNS || id.pid > 1<<22 {
		return false
	}
	state, start, err := procStat(int(id.pid))
	if errors.Is(err, os.ErrNotExist) {
		return true
	}
	if err != nil {
		return false
	}
	return state == 'Z' || state == 'X' || start != id.start
}

// procStat returns the state letter and start time of a process from
// /proc/<pid>/stat.
func procStat(pid int) (state byte, start uint64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) is in parentheses and may hold anything;
	// the fields after its last ')' are plain: state is field 3, the start
	// time field 22.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, errors.New("malformed /proc stat")
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 || len(f[0]) != 1 {
		return 0, 0, errors.New("malformed /proc stat")
	}
	start, err = strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return 0, 0, err
	}
	return f[0][0], start, nil
}
