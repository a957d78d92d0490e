package mysql

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/unavailable"
	"github.com/hourglass/hourglass/store/mysql/mytest"
)

// TestUnavailableMessage: once the database's address refuses connections,
// a read and a write fail with unavailable and our one message, never the
// driver's text (which names the address); the write's log line has it.
func TestUnavailableMessage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u, _ := url.Parse(mytest.NewDatabase(t))
	fw := forward(t, u.Host)
	u.Host = fw.addr
	logs := &lockedBuffer{}
	s, err := Open(ctx, Config{URL: u.String(), Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.PutProduct(ctx, hourglass.Product{SKU: "A", Name: "A", Available: 10}); err != nil {
		t.Fatal(err)
	}
	fw.close() // the port now refuses: the driver's errors name it

	_, readErr := s.Order(ctx, 1)
	_, _, writeErr := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Timeout: time.Minute, Items: []hourglass.Item{{SKU: "A", Quantity: 1}}})
	for name, err := range map[string]error{"read": readErr, "write": writeErr} {
		if code := hourglass.ErrorCode(err); code != hourglass.CodeUnavailable {
			t.Fatalf("%s: %v (code %s), want unavailable", name, err, code)
		}
		for _, shown := range []string{err.Error(), hourglass.ErrorMessage(err)} {
			if shown != unavailable.Message && !strings.HasSuffix(shown, ": "+unavailable.Message) ||
				strings.Contains(shown, fw.addr) || strings.Contains(shown, "tcp") {
				t.Errorf("%s: the client sees %q, want %q alone", name, shown, unavailable.Message)
			}
		}
	}
	// The driver's text depends on where the cut met the connection (a
	// dial refused names the address, a pooled connection reads EOF); the
	// writer's WARN line (every store's: store/internal/writer) has it,
	// whichever it is.
	if log := logs.String(); !strings.Contains(log, `level=WARN msg="mysql: database unavailable" op="write orders" err=`) {
		t.Errorf("no WARN line with the write's driver error; logs:\n%s", log)
	}
}

// forwarder passes TCP connections on to a database until close, after
// which its port refuses connections.
type forwarder struct {
	addr  string
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func forward(t *testing.T, target string) *forwarder {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{addr: ln.Addr().String(), ln: ln}
	t.Cleanup(f.close)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, d)
			f.mu.Unlock()
			go func() { io.Copy(d, c); d.Close() }()
			go func() { io.Copy(c, d); c.Close() }()
		}
	}()
	return f
}

func (f *forwarder) close() {
	f.ln.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = nil
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
