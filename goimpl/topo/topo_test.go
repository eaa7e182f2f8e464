package topo

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFromHosts(t *testing.T) {
	tp := FromHosts([]string{"a", "b", "a", "b", "c", "c"})
	assert.Equal(t, [][]int{{0, 2}, {1, 3}, {4, 5}}, tp.Nodes)
	assert.Equal(t, []int{0, 0, 1, 1, 0, 1}, tp.Local)
	assert.Equal(t, 2, tp.PerNode())
	assert.False(t, tp.Consecutive())
	l0, l1, err := tp.Levels(3)
	require.NoError(t, err)
	assert.Equal(t, []int{1, 3}, l0)
	assert.Equal(t, []int{2, 3, 5}, l1)
	assert.Equal(t, "3 nodes x 2 ranks", tp.String())
	// Local rank 0 of nodes a, b, c, then local rank 1 of each.
	assert.Equal(t, []int{0, 1, 4, 2, 3, 5}, tp.SliceOrder())
}

func TestBlocked(t *testing.T) {
	tp := Blocked(32, 8)
	assert.Equal(t, 4, tp.NumNodes())
	assert.Equal(t, 8, tp.PerNode())
	assert.True(t, tp.Consecutive())
	l0, l1, err := tp.Levels(13)
	require.NoError(t, err)
	assert.Equal(t, []int{8, 9, 10, 11, 12, 13, 14, 15}, l0)
	assert.Equal(t, []int{5, 13, 21, 29}, l1)
	assert.Equal(t, l1, tp.SliceOrder()[5*4:6*4], "level1 group of local rank 5")
	assert.Equal(t, []int{0, 2, 1, 3}, Blocked(4, 2).SliceOrder())

	uneven := Blocked(5, 2)
	assert.Equal(t, 0, uneven.PerNode())
	assert.Equal(t, 2, uneven.MaxPerNode())
	assert.Nil(t, uneven.SliceOrder())
	_, _, err = uneven.Levels(0)
	assert.ErrorContains(t, err, "2+2+1")
	assert.Equal(t, 1, Blocked(4, 0).NumNodes())
}
