package shm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
)

// Dir is where segments live: a tmpfs every process of one host sees,
// unless a container gave it a /dev/shm of its own (which the bootstrap's
// probe detects: the peer cannot open the segment).
const Dir = "/dev/shm"

// Prefix starts the name of every segment gohccl creates, so that leak
// checks and operators can tell them apart.
const Prefix = "gohccl-"

// Segment is one shared-memory mapping.
type Segment struct {
	name string
	data []byte
}

// Path returns the file a segment name stands for.
func Path(name string) string { return filepath.Join(Dir, name) }

func checkName(name string) error {
	if !strings.HasPrefix(name, Prefix) || strings.ContainsAny(name, "/\x00") || len(name) > 200 {
		return fmt.Errorf("invalid shared-memory segment name %q", name)
	}
	return nil
}

// Create makes a new segment of size bytes, readable and writable by this
// user only, and maps it. It fails if the name exists. The memory is zero.
func Create(name string, size int) (*Segment, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if size <= 0 {
		return nil, fmt.Errorf("shared-memory segment %s: size %d", name, size)
	}
	f, err := os.OpenFile(Path(name), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("creating shared-memory segment: %w", err)
	}
	defer f.Close()
	// The umask cannot widen 0600, but a narrower umask could make it
	// unusable; set it explicitly.
	if err := f.Chmod(0o600); err == nil {
		err = f.Truncate(int64(size))
	}
	if err != nil {
		os.Remove(f.Name())
		return nil, fmt.Errorf("sizing shared-memory segment %s to %d bytes: %w", name, size, err)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		os.Remove(f.Name())
		return nil, fmt.Errorf("mapping shared-memory segment %s: %w", name, err)
	}
	return &Segment{name: name, data: data}, nil
}

// ErrNotFound reports a segment that does not exist where this process
// looks: the creator is on another host, in a container with its own
// /dev/shm, or already unlinked it.
var ErrNotFound = errors.New("shared-memory segment not found")

// Open maps an existing segment, which must be exactly size bytes, a
// regular file owned by this user and not accessible to anyone else.
func Open(name string, size int) (*Segment, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(Path(name), os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, Path(name))
		}
		return nil, fmt.Errorf("opening shared-memory segment: %w", err)
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("shared-memory segment %s: %w", name, err)
	}
	switch {
	case st.Mode&syscall.S_IFMT != syscall.S_IFREG:
		return nil, fmt.Errorf("shared-memory segment %s is not a regular file", name)
	case int(st.Uid) != os.Getuid():
		return nil, fmt.Errorf("shared-memory segment %s belongs to uid %d, not this process's %d", name, st.Uid, os.Getuid())
	case st.Mode&0o077 != 0:
		return nil, fmt.Errorf("shared-memory segment %s has mode %o; only 0600 is trusted", name, st.Mode&0o777)
	case st.Size != int64(size):
		return nil, fmt.Errorf("shared-memory segment %s is %d bytes, expected %d", name, st.Size, size)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping shared-memory segment %s: %w", name, err)
	}
	return &Segment{name: name, data: data}, nil
}

// Name returns the segment's name in Dir.
func (s *Segment) Name() string { return s.name }

// Bytes returns the mapping. It is valid until Close.
func (s *Segment) Bytes() []byte { return s.data }

// Unlink removes the segment's name; mappings stay valid. Removing a name
// that is already gone is not an error.
func (s *Segment) Unlink() error { return Unlink(s.name) }

// Unlink removes a segment's name if it exists.
func Unlink(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := os.Remove(Path(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Close unmaps the segment. Nothing may touch Bytes afterwards.
func (s *Segment) Close() error {
	if s.data == nil {
		return nil
	}
	err := syscall.Munmap(s.data)
	s.data = nil
	return err
}

// Guard makes a memory fault on this goroutine (SIGBUS from a truncated
// segment) a recoverable panic instead of a crash. Call it at the start of
// every goroutine that touches a mapping, and recover with Recovered.
func Guard() { debug.SetPanicOnFault(true) }

// Recovered turns a recovered panic value into an error when it is a memory
// fault, and re-panics otherwise. Use as
//
//	defer func() { err = shm.Recovered(recover(), err) }()
func Recovered(v any, err error) error {
	if v == nil {
		return err
	}
	if re, ok := v.(interface{ Addr() uintptr }); ok {
		return fmt.Errorf("shared memory vanished under this process (memory fault at %#x): a peer truncated or removed the segment", re.Addr())
	}
	panic(v)
}
