package alert

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
)

// TestNotifierFailureHidesSecrets: a notification to an unreachable
// --alert-webhook whose URL holds a user, a password and a token is logged
// as failed without them (net/http's error quotes the whole URL).
func TestNotifierFailureHidesSecrets(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close()
	var logs bytes.Buffer
	w := newNotifier(WebhookConfig{URL: "http://alertuser1:alertpw1@" + down + "/hook?token=alerttok1", Attempts: 1},
		slog.New(slog.NewTextHandler(&logs, nil)))
	w.deliver(context.Background(), Notification{Rule: "test", State: "firing"})
	out := logs.String()
	if !strings.Contains(out, down) {
		t.Fatalf("no failure logged for %s:\n%s", down, out)
	}
	for _, secret := range []string{"alertuser1", "alertpw1", "alerttok1"} {
		if strings.Contains(out, secret) {
			t.Errorf("the log shows %q:\n%s", secret, out)
		}
	}
}
