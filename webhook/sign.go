package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Headers of a delivery.
const (
	// SignatureHeader carries "t=<unix seconds>,v1=<hex HMAC-SHA256>", the
	// HMAC keyed with the webhook's secret over "<t>.<body>" (see Sign).
	SignatureHeader = "Hourglass-Signature"
	// EventIDHeader is the event's id: the same on every attempt of a
	// delivery, so a receiver can drop duplicates.
	EventIDHeader = "Hourglass-Event-Id"
	// EventTypeHeader is the event's type, e.g. "order.paid".
	EventTypeHeader = "Hourglass-Event-Type"
	// DeliveryIDHeader is the delivery's id (one per event and webhook).
	DeliveryIDHeader = "Hourglass-Delivery-Id"
	// AttemptHeader is the attempt number, from 1.
	AttemptHeader = "Hourglass-Delivery-Attempt"
)

// Sign returns the SignatureHeader value of body sent at t with secret:
// "t=<t in unix seconds>,v1=<lower-case hex of HMAC-SHA256(secret, "<t>.<body>")>".
// Signing the timestamp with the body lets a receiver refuse old messages
// replayed by someone who captured one.
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// Errors of Verify.
var (
	ErrNoSignature  = errors.New("webhook: no valid t= and v1= in the signature header")
	ErrBadSignature = errors.New("webhook: signature does not match")
	ErrStale        = errors.New("webhook: signature timestamp outside the tolerance")
)

// Verify checks a SignatureHeader value against the raw body a receiver
// read: one of its v1= values (there may be several) must be the HMAC of
// "<t>.<body>" with secret, and t must be within tolerance of now (a
// tolerance <= 0 skips that check). It returns nil, ErrNoSignature,
// ErrBadSignature or ErrStale. It compares in constant time.
func Verify(header, secret string, body []byte, now time.Time, tolerance time.Duration) error {
	var (
		ts   string
		sigs [][]byte
	)
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			if b, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return ErrNoSignature
	}
	want := mac(secret, ts, body)
	ok := false
	for _, s := range sigs {
		ok = hmac.Equal(s, want) || ok
	}
	if !ok {
		return ErrBadSignature
	}
	if tolerance > 0 {
		if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
			return fmt.Errorf("%w: signed %s ago, tolerance %s", ErrStale, d.Round(time.Second), tolerance)
		}
	}
	return nil
}
