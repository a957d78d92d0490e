package testenv

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

// TestOnceEach: concurrent callers with one key share one build and its
// value; another key builds again; an error is kept for later callers.
func TestOnceEach(t *testing.T) {
	var o OnceEach[int]
	var builds atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := o.Get("a", func() (int, error) { return int(builds.Add(1)), nil })
			if v != 1 || err != nil {
				t.Errorf("Get(a) = %d, %v; want 1 from the one build", v, err)
			}
		}()
	}
	wg.Wait()
	if v, _ := o.Get("b", func() (int, error) { return int(builds.Add(1)), nil }); v != 2 {
		t.Fatalf("Get(b) = %d, want 2 (a build of its own)", v)
	}
	failed := errors.New("down")
	o.Get("c", func() (int, error) { return 0, failed })
	if _, err := o.Get("c", func() (int, error) { return 3, nil }); !errors.Is(err, failed) {
		t.Fatalf("Get(c) after a failed build = %v, want its error", err)
	}
	if n := builds.Load(); n != 2 {
		t.Fatalf("%d builds, want 2", n)
	}
}
