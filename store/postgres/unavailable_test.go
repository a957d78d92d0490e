package postgres

import (
	"bytes"
	"context"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/testenv"
	dbunavailable "github.com/hourglass/hourglass/store/internal/unavailable"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
)

// TestUnavailableMessage: once the database's address refuses connections,
// a read and a write fail with unavailable and the one message of every
// store, never the driver's text (which may name the address and the
// user); a WARN line has it.
func TestUnavailableMessage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u, _ := url.Parse(pgtest.NewDatabase(t))
	proxy := testenv.NewProxy(t, u.Host)
	u.Host = proxy.Addr()
	logs := &lockedBuffer{}
	s, err := Open(ctx, Config{URL: u.String(), MaxConns: 4, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.PutProduct(ctx, hourglass.Product{SKU: "A", Name: "A", Available: 10}); err != nil {
		t.Fatal(err)
	}
	proxy.Cut()

	_, readErr := s.Order(ctx, 1)
	_, _, writeErr := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Timeout: time.Minute, Items: []hourglass.Item{{SKU: "A", Quantity: 1}}})
	for name, err := range map[string]error{"read": readErr, "write": writeErr} {
		if code := hourglass.ErrorCode(err); code != hourglass.CodeUnavailable {
			t.Fatalf("%s: %v (code %s), want unavailable", name, err, code)
		}
		for _, shown := range []string{err.Error(), hourglass.ErrorMessage(err)} {
			if shown != dbunavailable.Message && !strings.HasSuffix(shown, ": "+dbunavailable.Message) ||
				strings.Contains(shown, proxy.Addr()) || strings.Contains(shown, "127.0.0.1") {
				t.Errorf("%s: the client sees %q, want %q alone", name, shown, dbunavailable.Message)
			}
		}
	}
	// The driver's text depends on where the cut met the connection (a
	// dial refused names the address, a pooled connection reads EOF); the
	// WARN line has it, whichever it is.
	if log := logs.String(); !strings.Contains(log, `level=WARN msg="postgres: database unavailable" op="write orders" err=`) {
		t.Errorf("no WARN line with the write's driver error; logs:\n%s", log)
	}
}

// lockedBuffer is a log destination safe for the store's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
