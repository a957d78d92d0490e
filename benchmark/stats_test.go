package benchmark

import (
	"math"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

func TestPercentile(t *testing.T) {
	t.Parallel()
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(i + 1) // 1..100
	}
	tests := []struct {
		name   string
		sorted []float64
		p      float64
		want   float64
	}{
		{"median of 1..100", hundred, 50, 50},
		{"p99 of 1..100", hundred, 99, 99},
		{"p99.9 of 1..100 is the max", hundred, 99.9, 100},
		{"p100", hundred, 100, 100},
		{"tiny p is the min", hundred, 0.001, 1},
		{"single value", []float64{7}, 99, 7},
		{"two values median", []float64{1, 2}, 50, 1},
	}
	for _, tt := range tests {
		if got := Percentile(tt.sorted, tt.p); got != tt.want {
			t.Errorf("%s: Percentile(p=%v) = %v, want %v", tt.name, tt.p, got, tt.want)
		}
	}
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Error("Percentile(empty) is not NaN")
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	var ds []time.Duration
	for i := range 1000 {
		ds = append(ds, time.Duration(i)*time.Millisecond) // 0..999 ms
	}
	ds = append(ds, -3*time.Millisecond, 5*time.Second)
	s := Summarize(ds)
	want := Summary{N: 1002, P50: 499, P90: 900, P99: 990, P999: 999, Max: 5000, Early: 1}
	if s != want {
		t.Fatalf("Summarize = %+v, want %+v", s, want)
	}
	if ds[0] != 0 || ds[1000] != -3*time.Millisecond {
		t.Fatal("Summarize reordered its input")
	}
	if (Summarize(nil) != Summary{}) {
		t.Fatal("Summarize(nil) is not zero")
	}
}

func TestCheckInvariant(t *testing.T) {
	t.Parallel()
	ts := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	item := func(q int64) []hourglass.Item { return []hourglass.Item{{SKU: "A", Quantity: q}} }
	orders := []hourglass.Order{
		{ID: 1, Status: hourglass.StatePaid, Items: item(2), PaidAt: ts},
		{ID: 2, Status: hourglass.StateClosed, Items: item(3), ClosedAt: ts},
		{ID: 3, Status: hourglass.StatePendingPayment, Items: item(1)},
	}
	good := hourglass.Product{SKU: "A", Available: 7, Reserved: 1, Sold: 2}
	tests := []struct {
		name    string
		product hourglass.Product
		orders  []hourglass.Order
		errs    int
	}{
		{"consistent", good, orders, 0},
		{"double release inflates available", hourglass.Product{SKU: "A", Available: 10, Reserved: 1, Sold: 2}, orders, 1},
		{"reserved leak", hourglass.Product{SKU: "A", Available: 6, Reserved: 2, Sold: 2}, orders, 1},
		{"sold mismatch", hourglass.Product{SKU: "A", Available: 6, Reserved: 1, Sold: 3}, orders, 1},
		{"paid and closed", good, append(append([]hourglass.Order(nil), orders...), hourglass.Order{ID: 4, Status: hourglass.StateClosed, PaidAt: ts, ClosedAt: ts}), 1},
	}
	for _, tt := range tests {
		errs := CheckInvariant(map[string]StockCheck{"A": {Initial: 10, Product: tt.product}}, tt.orders)
		if len(errs) != tt.errs {
			t.Errorf("%s: %d violations %v, want %d", tt.name, len(errs), errs, tt.errs)
		}
	}
}
