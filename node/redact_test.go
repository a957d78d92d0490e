package node_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/engine"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/node"
	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/store/mysql/mytest"
	"github.com/hourglass/hourglass/store/storetest"
	"github.com/hourglass/hourglass/webhook"
)

// syncBuffer is a log destination safe for the node's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// leaks returns the secrets text shows.
func leaks(text string, secrets ...string) []string {
	var out []string
	for _, s := range secrets {
		if strings.Contains(text, s) {
			out = append(out, s)
		}
	}
	return out
}

// TestSecretsNeverReachTheLog runs a node whose payment check, webhook and
// event sink point at a closed port, with a user, a password and query tokens in
// their URLs (and, on PostgreSQL, whose trust authentication ignores it, a
// password in the database URL), until each fails and is logged at DEBUG:
// the log shows none of the secrets, but the hosts it could not reach.
func TestSecretsNeverReachTheLog(t *testing.T) {
	t.Parallel()
	dbURL := storetest.URL(t)
	secrets := []string{"paysecret1", "paytoken1", "payuser1", "hooktoken1", "hooksig1", "sinksecret1"}
	if storetest.Kind() == store.KindPostgres {
		u, err := url.Parse(dbURL)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.UserPassword(u.User.Username(), "dbsecret1")
		dbURL = u.String()
		secrets = append(secrets, "dbsecret1")
	}
	down := closedPort(t)
	var logs syncBuffer
	n, err := node.New(context.Background(), node.Config{
		Addr:   "127.0.0.1:0",
		Store:  store.Options{URL: dbURL},
		Engine: engine.Config{SweepInterval: 100 * time.Millisecond, SweepGrace: 100 * time.Millisecond},
		BeforeClose: node.BeforeClose{
			URL: "http://payuser1:paysecret1@" + down + "/check?token=paytoken1",
		},
		Webhooks:   webhook.Config{Allow: mustAllow(t, "127.0.0.1"), Retry: []time.Duration{time.Hour}, PollInterval: 50 * time.Millisecond},
		EventSinks: []string{"redis://hguser:sinksecret1@" + down + "/0?stream=events"},
		TimerMax:   1000,
		Logger:     slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	node.RunInTest(t, n)
	ctx := context.Background()
	c := api.NewClient("http://"+n.Addr().String(), "", nil)
	hook := map[string]any{"url": "http://" + down + "/hook?token=hooktoken1&sig=hooksig1", "events": []string{"*"}, "secret": strings.Repeat("s", 32)}
	if status, err := c.Do(ctx, http.MethodPost, "/v1/webhooks", nil, hook, nil); err != nil || status != http.StatusCreated {
		t.Fatalf("create webhook: %d %v", status, err)
	}
	if _, err := c.PutProduct(ctx, "A", "a", "", 10); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.CreateOrder(ctx, api.CreateOrderRequest{UserID: "u", Items: []api.ItemJSON{{SKU: "A", Quantity: 1}}, TimeoutMs: 1000}, ""); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 15*time.Second, "a failed webhook delivery and a failed payment check in the log", func() bool {
		l := logs.String()
		return strings.Contains(l, "webhook: delivery failed") && strings.Contains(l, "payment check failed") && strings.Contains(l, "eventsink: publishing failed")
	})
	l := logs.String()
	if got := leaks(l, secrets...); len(got) > 0 {
		t.Errorf("the log shows %q:\n%s", got, l)
	}
	if !strings.Contains(l, down) {
		t.Errorf("the log does not name the unreachable %s:\n%s", down, l)
	}
}

// TestDatabaseSecretsNeverReachTheError: a node that cannot open its
// database (a closed port, a refused password, a go-sql-driver DSN) fails
// with an error and a log that show the user and host but not the
// password.
func TestDatabaseSecretsNeverReachTheError(t *testing.T) {
	t.Parallel()
	down := closedPort(t)
	my, err := url.Parse(testenv.ServiceURL(t, "MySQL", mytest.EnvURL, mytest.DefaultURL))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, url, want string }{
		{"postgres closed port", "postgres://hguser:dbsecret1@" + down + "/db?sslmode=disable&sslpassword=dbsecret2", down},
		{"mysql closed port", "mysql://hguser:dbsecret1@" + down + "/db", down},
		{"mysql refused password", "mysql://root:dbsecret1@" + my.Host + "/test", "root"},
		{"go-sql-driver DSN", "root:dbsecret1@tcp(" + down + ")/db", "root:xxxxx@tcp(" + down + ")/db is a go-sql-driver DSN: write it as a URL, mysql://"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var logs syncBuffer
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			n, err := node.New(ctx, node.Config{
				Addr:     "127.0.0.1:0",
				Store:    store.Options{URL: tt.url},
				TimerMax: 1000,
				Logger:   slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			})
			if err == nil {
				n.Close()
				t.Fatal("node.New opened an unreachable database")
			}
			text := err.Error() + "\n" + logs.String()
			if got := leaks(text, "dbsecret1", "dbsecret2"); len(got) > 0 {
				t.Errorf("the error or log shows %q:\n%s", got, text)
			}
			if !strings.Contains(text, tt.want) {
				t.Errorf("the error does not show %q:\n%s", tt.want, text)
			}
		})
	}
}

func mustAllow(t *testing.T, hosts string) webhook.AllowList {
	t.Helper()
	a, err := webhook.ParseAllowList(hosts)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
