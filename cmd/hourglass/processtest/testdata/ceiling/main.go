// Command ceiling is the HTTP ceiling BenchmarkHTTPCreateOrders compares
// hourglass with: a Go net/http server whose POST /v1/orders decodes the
// same body with encoding/json and answers an order-shaped 201, storing
// nothing; PUT /v1/products/{sku} answers 200 so the benchmark's seeding
// runs unchanged. What hourglass spends beyond it is its own work: strict
// validation, the durable write, metrics, middleware.
package main

import (
	"encoding/json"
	"flag"
	"io"
	"log"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"
)

type item struct {
	SKU      string `json:"sku"`
	Quantity int64  `json:"quantity"`
}

type order struct {
	ID          int64   `json:"id"`
	UserID      string  `json:"user_id"`
	Status      string  `json:"status"`
	Items       []item  `json:"items"`
	CreatedAt   string  `json:"created_at"`
	Deadline    string  `json:"deadline"`
	PaidAt      *string `json:"paid_at"`
	ClosedAt    *string `json:"closed_at"`
	CloseReason *string `json:"close_reason"`
	PaymentID   *string `json:"payment_id"`
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "address to listen on")
	debugAddr := flag.String("debug-addr", "", "address to serve the runtime profiles on (none when empty)")
	flag.Parse()
	if *debugAddr != "" {
		debug := http.NewServeMux()
		debug.HandleFunc("/debug/pprof/profile", pprof.Profile)
		go func() { log.Fatal(http.ListenAndServe(*debugAddr, debug)) }()
	}
	var ids atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /v1/products/{sku}", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"sku":"` + r.PathValue("sku") + `","name":"","category":"","available":0,"reserved":0,"sold":0}` + "\n"))
	})
	mux.HandleFunc("POST /v1/orders", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			UserID    string `json:"user_id"`
			Items     []item `json:"items"`
			TimeoutMs int64  `json:"timeout_ms"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		now := time.Now().UTC()
		b, _ := json.Marshal(order{ID: ids.Add(1), UserID: req.UserID, Status: "pending_payment", Items: req.Items,
			CreatedAt: now.Format("2006-01-02T15:04:05.000Z"), Deadline: now.Add(time.Duration(req.TimeoutMs) * time.Millisecond).Format("2006-01-02T15:04:05.000Z")})
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write(append(b, '\n'))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"status":"ready"}`)) })
	log.Fatal(http.ListenAndServe(*addr, mux))
}
