package api_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/metrics"
)

// instantStore answers CreateOrder at once from memory, so
// BenchmarkServeCreateOrder measures the API's own work per create (the
// middleware, decoding, encoding, metrics) without a database. Its other
// methods are the nil interface's: the benchmark calls none.
type instantStore struct {
	hourglass.Store
	now    time.Time
	nextID atomic.Int64
}

func (s *instantStore) CreateOrder(_ context.Context, p hourglass.CreateOrderParams) (hourglass.Order, bool, error) {
	return hourglass.Order{ID: s.nextID.Add(1), UserID: p.UserID, Status: hourglass.StatePendingPayment, Items: p.Items,
		CreatedAt: s.now, Deadline: s.now.Add(p.Timeout)}, true, nil
}

type readyEngine struct{}

func (readyEngine) Ready() bool    { return true }
func (readyEngine) Healthy() error { return nil }

// discardWriter is a reusable http.ResponseWriter that keeps the status
// and the body's length, and takes read deadlines as net/http's does.
type discardWriter struct {
	header http.Header
	status int
	n      int
}

func (w *discardWriter) Header() http.Header  { return w.header }
func (w *discardWriter) WriteHeader(code int) { w.status = code }
func (w *discardWriter) Write(b []byte) (int, error) {
	w.n += len(b)
	return len(b), nil
}

// SetReadDeadline takes the body's deadline as net/http's writer does
// (http.ResponseController).
func (w *discardWriter) SetReadDeadline(time.Time) error { return nil }

// BenchmarkServeCreateOrder is one POST /v1/orders through the API's
// handler, as the server's goroutine runs it after net/http has read the
// request: the checks, the body's read and decoding, the create (answered
// from memory), the answer's encoding and the request's metrics.
func BenchmarkServeCreateOrder(b *testing.B) {
	m := metrics.New(func() int { return 0 })
	srv, err := api.NewServer(api.Config{Store: &instantStore{now: time.Now()}, Engine: readyEngine{}, Observer: m})
	if err != nil {
		b.Fatal(err)
	}
	h := srv.Handler()
	body := []byte(`{"user_id":"bench","items":[{"sku":"BENCH-1","quantity":1}],"timeout_ms":600000}`)
	w := &discardWriter{header: http.Header{}}
	rd := bytes.NewReader(body)
	r, err := http.NewRequest(http.MethodPost, "http://127.0.0.1:8080/v1/orders", io.NopCloser(rd))
	if err != nil {
		b.Fatal(err)
	}
	r.Header.Set("Content-Type", "application/json")
	r.ContentLength = int64(len(body))
	b.ReportAllocs()
	for b.Loop() {
		rd.Reset(body)
		clear(w.header)
		w.status, w.n = 0, 0
		h.ServeHTTP(w, r)
		if w.status != http.StatusCreated {
			b.Fatalf("status %d", w.status)
		}
	}
}
