package sqlite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// write records the writes gather hands on.
type writes struct {
	at   []int64
	size []int
	data map[int64][]byte
	fail error
}

func (w *writes) write(p []byte, off int64) error {
	if w.fail != nil {
		return w.fail
	}
	w.at, w.size = append(w.at, off), append(w.size, len(p))
	if w.data == nil {
		w.data = map[int64][]byte{}
	}
	w.data[off] = bytes.Clone(p)
	return nil
}

// TestGatherWritesContiguousFramesAtOnce: a commit's frames, each a 24-byte
// header then a page, reach the file as one write when flushed; a write
// that does not follow the last flushes first; a flush is cut into writes
// of at most gatherChunk; a failed write is reported and what was held
// dropped.
func TestGatherWritesContiguousFramesAtOnce(t *testing.T) {
	t.Parallel()
	frame := func(g *gather, w *writes, off int64, n int) int64 {
		for i := range n {
			hdr, page := bytes.Repeat([]byte{byte(i)}, 24), bytes.Repeat([]byte{byte(i + 1)}, 4096)
			if err := g.add(hdr, off, w.write); err != nil {
				t.Fatal(err)
			}
			if err := g.add(page, off+24, w.write); err != nil {
				t.Fatal(err)
			}
			off += 24 + 4096
		}
		return off
	}

	var g gather
	w := &writes{}
	end := frame(&g, w, 32, 20)
	if len(w.at) != 0 {
		t.Fatalf("writes before the flush: %v", w.at)
	}
	if err := g.flush(w.write); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(w.at, w.size) != fmt.Sprint([]int64{32}, []int{20 * 4120}) {
		t.Fatalf("20 frames flushed as writes at %v of %v bytes, want one of %d at 32", w.at, w.size, 20*4120)
	}
	if got := w.data[32][4120+24]; got != 2 {
		t.Fatalf("the second frame's page starts with %d, want 2", got)
	}

	// A write elsewhere (the WAL restarted at its header) flushes first.
	w = &writes{}
	frame(&g, w, end, 2)
	if err := g.add(make([]byte, 32), 0, w.write); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(w.at, w.size) != fmt.Sprint([]int64{end}, []int{2 * 4120}) {
		t.Fatalf("after a write elsewhere: writes at %v of %v, want the two frames at %d", w.at, w.size, end)
	}

	// Large flushes go in chunks the default VFS writes whole.
	g, w = gather{}, &writes{}
	frame(&g, w, 32, 100)
	if err := g.flush(w.write); err != nil {
		t.Fatal(err)
	}
	total := 0
	for i, n := range w.size {
		if n > gatherChunk {
			t.Fatalf("write %d of %d bytes, more than %d", i, n, gatherChunk)
		}
		if i > 0 && w.at[i] != w.at[i-1]+int64(w.size[i-1]) {
			t.Fatalf("write %d at %d does not follow the one before", i, w.at[i])
		}
		total += n
	}
	if total != 100*4120 || len(w.size) != (100*4120+gatherChunk-1)/gatherChunk {
		t.Fatalf("100 frames flushed as %d writes of %d bytes in all", len(w.size), total)
	}

	// More than gatherCap held is written before it grows further.
	g, w = gather{}, &writes{}
	frame(&g, w, 32, gatherCap/4120+1)
	if len(w.at) == 0 || len(g.buf) > gatherCap {
		t.Fatalf("held %d bytes after %d writes, cap %d", len(g.buf), len(w.at), gatherCap)
	}

	// A failed write is the flush's error, and the frames are dropped.
	g, w = gather{}, &writes{}
	frame(&g, w, 32, 3)
	w.fail = errors.New("disk full")
	if err := g.flush(w.write); !errors.Is(err, w.fail) {
		t.Fatalf("flush = %v, want the write's error", err)
	}
	if len(g.buf) != 0 {
		t.Fatalf("%d bytes held after a failed flush", len(g.buf))
	}
}

// TestWriterGathersItsWAL: the store's writer opens its WAL through
// gatherVFS, and what it commits reads back after a reopen.
func TestWriterGathersItsWAL(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.PutProduct(ctx, hourglass.Product{SKU: "A", Available: 100}); err != nil {
		t.Fatal(err)
	}
	o, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Items: []hourglass.Item{{SKU: "A", Quantity: 2}}, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	wal := dbPath(dir, "") + "-wal"
	found := false
	gatherState.files.Range(func(_, v any) bool {
		found = found || v.(*walFile).name == wal
		return !found
	})
	if !found {
		t.Fatalf("no gathering WAL file %s open", wal)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, err := s.Order(ctx, o.ID); err != nil || got.ID != o.ID {
		t.Fatalf("order %d after reopen = %+v, %v", o.ID, got, err)
	}
	if p, err := s.Product(ctx, "A"); err != nil || p.Reserved != 2 {
		t.Fatalf("product after reopen = %+v, %v; want 2 reserved", p, err)
	}
}
