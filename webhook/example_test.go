package webhook_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/hourglass/hourglass/webhook"
)

// verifySignature is the receiver-side check documented in the README,
// written with the standard library only (a receiver need not import
// hourglass). Keep the two in step.
func verifySignature(header, secret string, body []byte, now time.Time) error {
	var ts string
	var sigs []string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sigs = append(sigs, v)
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errors.New("no timestamp")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return errors.New("timestamp too old or in the future")
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, s := range sigs {
		if got, err := hex.DecodeString(s); err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return errors.New("bad signature")
}

// A receiver reads the raw body, checks the signature, and answers 2xx only
// once it has stored the event (keyed by its id, to drop redeliveries).
func Example_receiver() {
	const secret = "whsec-0123456789abcdef"
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "read error", http.StatusBadRequest)
			return
		}
		if err := verifySignature(r.Header.Get("Hourglass-Signature"), secret, body, time.Now()); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		fmt.Println("accepted", r.Header.Get("Hourglass-Event-Type"))
		w.WriteHeader(http.StatusNoContent)
	})

	body := []byte(`{"id":"evt_1","type":"order.paid","created_at":"2026-11-21T10:00:00.000Z","order":{}}`)
	for _, key := range []string{secret, "someone else's secret"} {
		req := httptest.NewRequest(http.MethodPost, "/hooks/hourglass", strings.NewReader(string(body)))
		req.Header.Set("Hourglass-Signature", webhook.Sign(key, time.Now(), body))
		req.Header.Set("Hourglass-Event-Type", "order.paid")
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		fmt.Println(rec.Code)
	}
	// Output:
	// accepted order.paid
	// 204
	// 401
}
