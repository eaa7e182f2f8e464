package transport

// fifo is a first-in first-out queue that reuses its backing array, so a
// steady stream of pushes and pops allocates nothing.
type fifo[T any] struct {
	items []T
	head  int
}

func (q *fifo[T]) len() int { return len(q.items) - q.head }

// push appends v. Where the queue never empties (a peer that stays a few
// frames ahead of this rank's receives, op after op), the popped front
// would otherwise stay in the backing array, which append then doubles
// again and again: so before an append that would grow the array, a front
// of at least half of it is dropped by moving the live items down, a copy
// paid for by the pops that made the front.
func (q *fifo[T]) push(v T) {
	if q.head > 0 && (q.head == len(q.items) || len(q.items) == cap(q.items) && 2*q.head >= len(q.items)) {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	q.items = append(q.items, v)
}

func (q *fifo[T]) at(i int) T { return q.items[q.head+i] }

// remove deletes the i-th item from the front, keeping the order of the rest.
func (q *fifo[T]) remove(i int) T {
	var zero T
	j := q.head + i
	v := q.items[j]
	if i == 0 {
		q.items[j] = zero
		q.head++
	} else {
		copy(q.items[j:], q.items[j+1:])
		q.items[len(q.items)-1] = zero
		q.items = q.items[:len(q.items)-1]
	}
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
	return v
}

func (q *fifo[T]) clear() {
	var zero T
	for i := range q.items {
		q.items[i] = zero
	}
	q.items, q.head = q.items[:0], 0
}
