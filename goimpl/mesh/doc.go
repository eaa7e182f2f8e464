// Package mesh runs the collectives of the local ranks of one host over one
// shared region that all of them map: every rank reads its peers' data
// straight from their buffers in the region, and no byte crosses a socket.
// It is the "mesh" level0 algorithm of docs/algorithms.md; docs/mesh.md
// gives the layout, the schedules with their bytes per rank, the tunables
// and the measurements.
//
// Terms:
//   - local rank: a rank's index among the n ranks of the region, 0..n-1.
//   - buffer: one of the depth pipeline buffers each rank owns in the
//     region; only its owner writes it.
//   - piece: 1/n of a buffer, lay.piece bytes: in a two-phase schedule,
//     piece r of rank i's buffer is rank i's data for rank r.
//   - eager slot: one of the stamps slots of EagerSlot bytes each rank
//     owns, which only the eager broadcasts it roots write.
//   - chunk: the part of an operation that one buffer (or eager slot)
//     carries. Chunks are numbered by a global sequence k that every
//     operation advances by the same amount on every rank (derived from its
//     arguments), and chunk k uses buffer k % depth (eager slot k % stamps).
//   - ready and free: each rank's two counters. ready = 2k+1 says the
//     rank's inputs of chunk k are in its buffer, 2k+2 its results; free =
//     k+1 says it has finished reading everyone's buffers for chunk k.
//   - stamp: the operation's transport.Header with the chunk's schedule and
//     number in Tag, published with every chunk in stamp line k % stamps and
//     compared by every reader (by an eager broadcast's root, later: verify).
//
// Every operation runs on the caller's goroutine, allocates nothing in
// steady state, and waits only through shm.Counter (spin, then futex) under
// the call's deadline and the engine's stop check.
package mesh
