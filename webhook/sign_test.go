package webhook_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/hourglass/hourglass/webhook"
)

func TestSignVerify(t *testing.T) {
	t.Parallel()
	const secret = "0123456789abcdef"
	body := []byte(`{"id":"evt_1"}`)
	at := time.Unix(1_800_000_000, 0)
	header := webhook.Sign(secret, at, body)

	// The documented construction, computed independently.
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("1800000000." + string(body)))
	if want := "t=1800000000,v1=" + hex.EncodeToString(m.Sum(nil)); header != want {
		t.Fatalf("Sign = %q, want %q", header, want)
	}
	other := webhook.Sign("another secret!!", at, body)
	tests := []struct {
		name   string
		header string
		secret string
		body   []byte
		now    time.Time
		want   error
	}{
		{"valid", header, secret, body, at.Add(time.Minute), nil},
		{"two signatures, one valid", other + "," + header[len("t=1800000000,"):], secret, body, at, nil},
		{"wrong secret", header, "0123456789abcdeX", body, at, webhook.ErrBadSignature},
		{"changed body", header, secret, []byte(`{"id":"evt_2"}`), at, webhook.ErrBadSignature},
		{"changed timestamp", "t=1800000001" + header[len("t=1800000000"):], secret, body, at, webhook.ErrBadSignature},
		{"stale", header, secret, body, at.Add(6 * time.Minute), webhook.ErrStale},
		{"from the future", header, secret, body, at.Add(-6 * time.Minute), webhook.ErrStale},
		{"empty", "", secret, body, at, webhook.ErrNoSignature},
		{"no v1", "t=1800000000", secret, body, at, webhook.ErrNoSignature},
		{"no t", header[len("t=1800000000,"):], secret, body, at, webhook.ErrNoSignature},
	}
	for _, tt := range tests {
		err := webhook.Verify(tt.header, tt.secret, tt.body, tt.now, 5*time.Minute)
		if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("%s: Verify = %v, want %v", tt.name, err, tt.want)
		}
	}
	if err := webhook.Verify(header, secret, body, at.Add(time.Hour), 0); err != nil {
		t.Errorf("tolerance 0 checks no time: %v", err)
	}
}
