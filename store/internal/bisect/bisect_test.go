package bisect

import (
	"errors"
	"math/bits"
	"testing"
)

var errBroken = errors.New("broken write")

// batch simulates a database whose transaction fails when it holds a broken
// write.
type batch struct {
	broken    map[int]bool
	committed []bool
	failed    map[int]error
	txs       int
}

func newBatch(n int, broken ...int) *batch {
	b := &batch{broken: map[int]bool{}, committed: make([]bool, n), failed: map[int]error{}}
	for _, i := range broken {
		b.broken[i] = true
	}
	return b
}

func (b *batch) commit(lo, hi int) error {
	b.txs++
	for i := lo; i < hi; i++ {
		if b.broken[i] {
			return errBroken
		}
	}
	for i := lo; i < hi; i++ {
		if b.committed[i] {
			panic("write committed twice")
		}
		b.committed[i] = true
	}
	return nil
}

func (b *batch) fail(lo, hi int, err error) {
	for i := lo; i < hi; i++ {
		b.failed[i] = err
	}
}

func TestRun(t *testing.T) {
	t.Parallel()
	ceilLog2 := func(n int) int { return bits.Len(uint(n - 1)) }
	for _, tt := range []struct {
		name   string
		n      int
		broken []int
		// maxTx bounds the transactions; 0 means 1 + 2·⌈log2 n⌉ per broken write.
		maxTx int
	}{
		{name: "all good", n: 512, maxTx: 1},
		{name: "one write, broken", n: 1, broken: []int{0}, maxTx: 1},
		{name: "first of 512", n: 512, broken: []int{0}},
		{name: "last of 512", n: 512, broken: []int{511}},
		{name: "middle of 1000", n: 1000, broken: []int{500}},
		{name: "two of 7", n: 7, broken: []int{2, 3}},
		{name: "three of 300", n: 300, broken: []int{0, 150, 299}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newBatch(tt.n, tt.broken...)
			first, commits := Run(tt.n, b.commit, func(error) bool { return true }, b.fail)
			if (first != nil) != (len(tt.broken) > 0) {
				t.Fatalf("first = %v with %d broken writes", first, len(tt.broken))
			}
			for i := range tt.n {
				if b.broken[i] != (b.failed[i] != nil) || b.broken[i] == b.committed[i] {
					t.Fatalf("write %d: broken %v, committed %v, failed with %v", i, b.broken[i], b.committed[i], b.failed[i])
				}
			}
			limit := tt.maxTx
			if limit == 0 {
				limit = len(tt.broken) * (1 + 2*ceilLog2(tt.n))
			}
			if commits != b.txs || commits > limit {
				t.Fatalf("%d transactions (counted %d), want at most %d", commits, b.txs, limit)
			}
		})
	}
}

// TestRunNotIsolated: a failure that is the database's (isolate false) fails
// the whole range at once, without splitting it.
func TestRunNotIsolated(t *testing.T) {
	t.Parallel()
	b := newBatch(64, 10)
	first, commits := Run(64, b.commit, func(error) bool { return false }, b.fail)
	if first != errBroken || commits != 1 || len(b.failed) != 64 {
		t.Fatalf("first %v, %d transactions, %d failed; want one transaction failing all 64", first, commits, len(b.failed))
	}
}

func TestRunEmpty(t *testing.T) {
	t.Parallel()
	if first, commits := Run(0, nil, nil, nil); first != nil || commits != 0 {
		t.Fatalf("Run(0) = %v, %d", first, commits)
	}
}
