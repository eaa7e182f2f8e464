package transport

// Awaiting calls fn, in rank order, for each peer that a collective receive
// is posted for and not yet being filled: the peers the collective in
// progress still waits on, as this rank's flight record reports them while
// the op runs (goimpl/flight). fn runs under the matcher's lock and must not
// call back into it.
func (m *Matcher) Awaiting(fn func(peer int)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for p := range m.peers {
		if m.peers[p].coll.len() > 0 {
			fn(p)
		}
	}
}
