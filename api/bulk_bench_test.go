package api_test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/node"
	"github.com/hourglass/hourglass/node/nodetest"
	"github.com/hourglass/hourglass/store"
)

// BenchmarkTimerBatch1000 measures POST /v1/timers/batch of 1,000 new arms
// (each a new key with a 100-byte payload) over HTTP on loopback, on a
// real node (node.New) on SQLite: the target is a p99 within
// 200 ms. It reports the p50 and p99 of the calls.
//
//	go test ./api/ -run '^$' -bench TimerBatch1000 -benchtime 200x
func BenchmarkTimerBatch1000(b *testing.B) {
	n := nodetest.Start(b, node.Config{Store: store.Options{URL: "sqlite://" + filepath.Join(b.TempDir(), "hourglass.db")}})
	c := api.NewClient(nodetest.URL(n), "", &http.Client{Timeout: 30 * time.Second})
	payload := []byte(`{"cart":"c-0123456789","coupon":"SPRING-2026","note":"` + fmt.Sprintf("%052d", 0) + `"}`)
	var took []time.Duration
	i := 0
	for b.Loop() {
		req := api.TimerBatchRequest{Arm: make([]api.TimerBatchArm, 1000)}
		for j := range req.Arm {
			d := int64(3_600_000)
			req.Arm[j] = api.TimerBatchArm{Key: fmt.Sprintf("bench:%06d:%04d", i, j), DelayMs: &d, Payload: payload}
		}
		i++
		start := time.Now()
		res, err := c.TimerBatch(b.Context(), req)
		took = append(took, time.Since(start))
		if err != nil || len(res.Results) != 1000 || res.Results[999].Error != nil {
			b.Fatalf("batch %d: %v", i, err)
		}
	}
	slices.Sort(took)
	at := func(q float64) float64 {
		return float64(took[min(len(took)-1, int(q*float64(len(took))))].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
	b.ReportMetric(1000*float64(b.N)/b.Elapsed().Seconds(), "arms/s")
}
