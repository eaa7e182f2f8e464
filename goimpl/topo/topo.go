// Package topo groups a communicator's ranks into nodes and derives the two
// levels hierarchical algorithms run on: level0, the ranks of one node, and
// level1, one rank per node with the same local rank.
package topo

import "fmt"

// Topology is the node structure of a group of ranks.
type Topology struct {
	// Node is the node index of each rank; nodes are numbered in order of
	// their lowest rank.
	Node []int
	// Nodes lists the ranks of each node, ascending.
	Nodes [][]int
	// Local is each rank's local rank: its index in Nodes[Node[r]].
	Local []int

	order []int // SliceOrder, when every node has as many ranks
}

// FromHosts groups ranks by host identity (what bootstrap learned from each
// rank): ranks with equal hosts share a node.
func FromHosts(hosts []string) *Topology {
	ids := map[string]int{}
	node := make([]int, len(hosts))
	for r, h := range hosts {
		id, ok := ids[h]
		if !ok {
			id = len(ids)
			ids[h] = id
		}
		node[r] = id
	}
	return fromNodes(node)
}

// Blocked treats each k consecutive ranks of size as one node
// (GOHCCL_RANKS_PER_NODE=k); the last node holds what is left.
func Blocked(size, k int) *Topology {
	if k < 1 {
		k = size
	}
	node := make([]int, size)
	for r := range node {
		node[r] = r / max(k, 1)
	}
	return fromNodes(node)
}

func fromNodes(node []int) *Topology {
	t := &Topology{Node: node, Local: make([]int, len(node))}
	for r, n := range node {
		for len(t.Nodes) <= n {
			t.Nodes = append(t.Nodes, nil)
		}
		t.Local[r] = len(t.Nodes[n])
		t.Nodes[n] = append(t.Nodes[n], r)
	}
	if k := t.PerNode(); k > 0 {
		for l := 0; l < k; l++ {
			for _, ranks := range t.Nodes {
				t.order = append(t.order, ranks[l])
			}
		}
	}
	return t
}

// SliceOrder returns every rank grouped by local rank: the level1 group of
// local rank 0 (one rank per node, in node order), then that of local rank
// 1, and so on, so that entry l*NumNodes()+m is local rank l of node m. A
// hierarchical allgather or reduce-scatter hands local rank l the blocks of
// the ranks SliceOrder()[l*NumNodes() : (l+1)*NumNodes()]. It is nil unless
// every node has the same number of ranks. The slice is shared: do not
// modify it.
func (t *Topology) SliceOrder() []int { return t.order }

// Size returns the number of ranks.
func (t *Topology) Size() int { return len(t.Node) }

// NumNodes returns the number of nodes.
func (t *Topology) NumNodes() int { return len(t.Nodes) }

// PerNode returns the ranks per node when every node has the same number,
// else 0.
func (t *Topology) PerNode() int {
	if len(t.Nodes) == 0 {
		return 0
	}
	k := len(t.Nodes[0])
	for _, n := range t.Nodes {
		if len(n) != k {
			return 0
		}
	}
	return k
}

// MaxPerNode returns the largest number of ranks on one node.
func (t *Topology) MaxPerNode() int {
	m := 0
	for _, n := range t.Nodes {
		m = max(m, len(n))
	}
	return m
}

// Consecutive reports whether every node's ranks are consecutive, so that a
// ring in rank order crosses between nodes only NumNodes times.
func (t *Topology) Consecutive() bool {
	for _, n := range t.Nodes {
		if n[len(n)-1]-n[0] != len(n)-1 {
			return false
		}
	}
	return true
}

// Levels returns rank's level0 group (its node's ranks, by local rank) and
// level1 group (the rank with its local rank on every node, by node). It
// fails unless every node has the same number of ranks, since a slice
// without an owner on some node could not cross at level1.
func (t *Topology) Levels(rank int) (level0, level1 []int, err error) {
	if t.PerNode() == 0 {
		return nil, nil, fmt.Errorf("nodes hold different numbers of ranks (%s)", t)
	}
	level0 = t.Nodes[t.Node[rank]]
	l := t.Local[rank]
	level1 = make([]int, len(t.Nodes))
	for i, n := range t.Nodes {
		level1[i] = n[l]
	}
	return level0, level1, nil
}

// String describes the topology, e.g. "4 nodes x 8 ranks" or "2 nodes (3+2 ranks)".
func (t *Topology) String() string {
	if k := t.PerNode(); k > 0 {
		return fmt.Sprintf("%d nodes x %d ranks", len(t.Nodes), k)
	}
	s := fmt.Sprintf("%d nodes (", len(t.Nodes))
	for i, n := range t.Nodes {
		if i > 0 {
			s += "+"
		}
		s += fmt.Sprint(len(n))
	}
	return s + " ranks)"
}
