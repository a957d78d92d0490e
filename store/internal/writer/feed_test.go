package writer

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"github.com/hourglass/hourglass"
)

// dueWrite is a test write that makes its id due when it commits.
type dueWrite struct {
	write
	id int64
}

func (w *dueWrite) Due(u *hourglass.DueUpdate) {
	u.Due = append(u.Due, hourglass.DueItem{ID: w.id})
}

// dueFake runs dueWrites as fake runs writes.
type dueFake struct{ fake }

func (f *dueFake) Run(ctx context.Context, ws []*dueWrite) (int, error) {
	inner := make([]*write, len(ws))
	for i, w := range ws {
		inner[i] = &w.write
	}
	return f.fake.Run(ctx, inner)
}

// TestWatchDue: the committed writes that say what they made due are
// announced before Submit returns, a failed one is not, and nothing is told
// once the watch's context ended.
func TestWatchDue(t *testing.T) {
	t.Parallel()
	f := &dueFake{}
	w := New(Config[*dueWrite]{Name: "test", Log: slog.New(slog.DiscardHandler), MaxBatch: 100, Retry: RetryPolicy{Attempts: 1}}, f)
	t.Cleanup(w.Close)
	var (
		mu  sync.Mutex
		got []int64
	)
	ctx, cancel := context.WithCancel(context.Background())
	wait := w.WatchDue(ctx, nil, func(u hourglass.DueUpdate) {
		mu.Lock()
		defer mu.Unlock()
		for _, d := range u.Due {
			got = append(got, d.ID)
		}
	})
	seen := func() []int64 {
		mu.Lock()
		defer mu.Unlock()
		return slices.Sorted(slices.Values(got))
	}
	errs := w.SubmitAll(context.Background(), Normal, []*dueWrite{{id: 1}, {id: 2}, {write: write{broken: true}, id: 3}})
	if errs[0] != nil || errs[1] != nil || errs[2] == nil {
		t.Fatalf("errors %v; want the broken write's only", errs)
	}
	if want := []int64{1, 2}; !slices.Equal(seen(), want) {
		t.Fatalf("announced %v when Submit returned; want %v (the committed writes)", seen(), want)
	}
	cancel()
	wait()
	if err := w.Submit(context.Background(), Normal, &dueWrite{id: 4}); err != nil {
		t.Fatal(err)
	}
	if want := []int64{1, 2}; !slices.Equal(seen(), want) {
		t.Fatalf("announced %v after the watch ended; want still %v", seen(), want)
	}
}
