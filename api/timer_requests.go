package api

import (
	"net/http"

	"github.com/hourglass/hourglass"
)

// Listing the timer requests hourglass could not apply (rows shops wrote
// to timer_requests in their own transactions; see package txtimer).
const (
	RejectedTimerRequestLimitDefault = 100
	MaxRejectedTimerRequestLimit     = 1000
	// rejectedRequestBatch: a rejected request is read with at most its
	// first KiB of each text column (hourglass.RejectedTextMax).
	rejectedRequestBatch = 100
)

// RejectedTimerRequestJSON is a timer request hourglass could not apply, as
// the shop wrote it (every column as it was, NULL as null; of timer_key,
// action and payload at most the first 1 KiB, and the payload's size in
// bytes), with why.
type RejectedTimerRequestJSON struct {
	Seq          int64   `json:"seq"`
	TimerKey     *string `json:"timer_key"`
	Action       string  `json:"action"`
	FireAt       *string `json:"fire_at"`
	DelayMs      *int64  `json:"delay_ms"`
	Payload      *string `json:"payload"`
	PayloadBytes int64   `json:"payload_bytes"`
	WebhookID    *int64  `json:"webhook_id"`
	RequestedAt  string  `json:"requested_at"`
	RejectedAt   string  `json:"rejected_at"`
	Reason       string  `json:"reason"`
}

// RejectedTimerRequestListJSON is the response of GET
// /v1/timer-requests/rejected. Next is the cursor to pass as after= for the
// next page, null on the last page.
type RejectedTimerRequestListJSON struct {
	Requests []RejectedTimerRequestJSON `json:"requests"`
	Next     *int64                     `json:"next"`
}

func rejectedTimerRequestJSON(r hourglass.RejectedTimerRequest) RejectedTimerRequestJSON {
	out := RejectedTimerRequestJSON{Seq: r.Seq, TimerKey: r.Key, Action: r.Action, DelayMs: r.DelayMs, Payload: r.Payload, PayloadBytes: r.PayloadBytes, WebhookID: r.WebhookID,
		RequestedAt: *formatTime(r.RequestedAt), RejectedAt: *formatTime(r.RejectedAt), Reason: r.Reason}
	if r.FireAt != nil {
		out.FireAt = formatTime(*r.FireAt)
	}
	return out
}

// timerRequestRoutes returns the /v1/timer-requests routes, when the store
// applies timer requests (Config.TimerRequests).
func (s *Server) timerRequestRoutes() []route {
	if s.cfg.TimerRequests == nil {
		return nil
	}
	return []route{{"GET", "/v1/timer-requests/rejected", s.listRejectedTimerRequests}}
}

func (s *Server) listRejectedTimerRequests(r *http.Request, _ []byte) (int, any, error) {
	pg, err := parsePage(r.URL.Query(), "timer request seq", RejectedTimerRequestLimitDefault, MaxRejectedTimerRequestLimit)
	if err != nil {
		return 0, nil, err
	}
	page := newPage(r, "requests")
	next, err := fillPage(page, pg.limit, rejectedRequestBatch, pg.after,
		func(after int64, n int) ([]hourglass.RejectedTimerRequest, error) {
			return s.cfg.TimerRequests.RejectedTimerRequests(r.Context(), after, n)
		},
		func(t hourglass.RejectedTimerRequest) any { return rejectedTimerRequestJSON(t) },
		func(t hourglass.RejectedTimerRequest) int64 { return t.Seq })
	if err != nil {
		return 0, nil, err
	}
	out, err := page.finish(next)
	return http.StatusOK, out, err
}
