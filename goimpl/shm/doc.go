// Package shm holds the primitives that ranks on one host share memory
// with: named segments in /dev/shm, counters that live inside a segment,
// and the wait policy (spin, then sleep on a futex) every shared-memory
// path uses. The shared-memory Link (goimpl/transport/shm) and the
// intra-host collectives (goimpl/mesh) are built on it.
//
// A segment is created 0600 with O_EXCL, sized before anyone maps it, and
// unlinked as soon as every rank has mapped it, so nothing is left in
// /dev/shm however a rank ends. Reading a mapping whose file was truncated
// raises SIGBUS; every goroutine that touches a mapping calls Guard first,
// which turns that fault into a panic the caller recovers as an error.
package shm
