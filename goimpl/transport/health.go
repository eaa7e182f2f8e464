package transport

// Health returns the error that closed the matcher (an abort, a peer's
// abort frame, Close), else the loss of the lowest-numbered peer that was
// lost, else nil. Waits that do not go through the matcher, such as the
// shared-memory collectives, poll it while they sleep to learn that a peer
// is gone instead of waiting out their deadline.
func (m *Matcher) Health() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed != nil {
		return m.closed
	}
	for p := range m.peers {
		if err := m.peers[p].dead; err != nil {
			return err // the links name the peer
		}
	}
	return nil
}
