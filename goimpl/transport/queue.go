package transport

// fifo is a first-in first-out queue that reuses its backing array, so a
// steady stream of pushes and pops allocates nothing.
type fifo[T any] struct {
	items []T
	head  int
}

func (q *fifo[T]) len() int { return len(q.items) - q.head }

func (q *fifo[T]) push(v T) {
	if q.head > 0 && q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
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
