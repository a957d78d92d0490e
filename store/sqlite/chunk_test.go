package sqlite

import "testing"

// TestChunk: the multi-row INSERTs of n rows are chunks of the sizes the
// store prepared, each the largest that the rows left fill, and add up to n.
func TestChunk(t *testing.T) {
	for n := 1; n <= 3*maxRows+7; n++ {
		for left := n; left > 0; {
			i := chunk(left)
			if c := chunkSizes[i]; c > left || (i > 0 && chunkSizes[i-1] <= left) {
				t.Fatalf("%d rows, %d left: a chunk of %d", n, left, c)
			}
			left -= chunkSizes[i]
		}
	}
}
