package rabbitmq

import (
	"context"
	"fmt"
	"net/url"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
)

// requirePlugin skips the test unless the broker at url has the
// rabbitmq_delayed_message_exchange plugin, which no Debian package ships:
// point HOURGLASS_TEST_RABBITMQ_URL at a broker that has it to run these.
func requirePlugin(t *testing.T, url string) {
	t.Helper()
	s := &Scheduler{cfg: Config{URL: url, Namespace: hourglasstest.Namespace(t)}.withDefaults()}
	uri, err := parseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	s.uri = uri
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	has, err := s.probePlugin(ctx)
	if err != nil {
		t.Fatalf("probing for the plugin: %v", err)
	}
	adminDelete(t, s.cfg.Namespace) // the probe's exchange
	if !has {
		t.Skipf("the broker at %s has no rabbitmq_delayed_message_exchange plugin (no Debian package ships it): set HOURGLASS_TEST_RABBITMQ_URL to a broker with it to run this test", address(uri))
	}
}

// TestDelayedExchangeBurstHeldInMemory: 10,000 timers due in one
// millisecond leave the plugin a margin early and are waited out in memory,
// so they arrive within a fraction of a second of their deadline (issue 11:
// with x-delay the whole delay they trickled in 2.2-7.3 s late).
func TestDelayedExchangeBurstHeldInMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 timers 6 s ahead; skipped with -short")
	}
	t.Parallel()
	requirePlugin(t, brokerURL(t))
	s := setup(t, Config{Mode: ModeDelayedExchange})
	deadline := time.Now().Add(6 * time.Second).Truncate(time.Millisecond)
	timers := make([]hourglass.DueItem, 10000)
	for i := range timers {
		timers[i] = hourglass.DueItem{ID: int64(i + 1), At: deadline}
	}
	for i := 0; i < len(timers); i += 1000 {
		if err := s.Schedule(context.Background(), timers[i:i+1000]); err != nil {
			t.Fatal(err)
		}
	}
	got := collect(t, s, len(timers), 30*time.Second)
	if len(got) != len(timers) {
		t.Fatalf("%d of %d delivered", len(got), len(timers))
	}
	var late []time.Duration
	for _, at := range got {
		if at.Before(deadline) {
			t.Fatalf("delivered %s early", deadline.Sub(at))
		}
		late = append(late, at.Sub(deadline))
	}
	slices.Sort(late)
	t.Logf("10000 timers through the delayed exchange: lateness p50 %s p99 %s max %s", late[len(late)/2], late[len(late)*99/100], late[len(late)-1])
	if p99 := late[len(late)*99/100]; p99 > 500*time.Millisecond {
		t.Errorf("p99 lateness %s, want under 500ms (the last stretch is held in memory)", p99)
	}
}

// TestAccessCheckInBothModes: a user who may use the namespace's queues and
// exchanges but not publish to the default exchange is refused at start-up
// in both modes, with a line saying what is missing: both publish timers
// within the last stretch through it (issue 11: plugin mode skipped the
// check and failed at the first near timer with ACCESS_REFUSED).
func TestAccessCheckInBothModes(t *testing.T) {
	t.Parallel()
	base := brokerURL(t)
	if _, err := exec.LookPath("rabbitmqctl"); err != nil {
		t.Skip("rabbitmqctl is not on PATH: cannot create a user with limited permissions")
	}
	for _, mode := range []Mode{ModeTiers, ModeDelayedExchange} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			if mode == ModeDelayedExchange {
				requirePlugin(t, base)
			}
			ns := hourglasstest.Namespace(t)
			user, password := ns+"-user", "pw-"+ns
			u, err := url.Parse(base)
			if err != nil {
				t.Fatal(err)
			}
			vhost := strings.TrimPrefix(u.Path, "/")
			if vhost == "" {
				vhost = "/"
			}
			mine := "^" + regexp.QuoteMeta(ns) + `\..*`
			rabbitmqctl(t, "add_user", user, password)
			t.Cleanup(func() { exec.Command("rabbitmqctl", "delete_user", user).Run() })
			rabbitmqctl(t, "set_permissions", "-p", vhost, user, mine, mine, mine)
			t.Cleanup(func() { adminDelete(t, ns) })
			u.User = url.UserPassword(user, password)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s, err := New(ctx, Config{URL: u.String(), Namespace: ns, Mode: mode})
			if err == nil {
				s.Close()
				t.Fatal("New succeeded for a user who may not publish to the default exchange")
			}
			if msg := err.Error(); !strings.Contains(msg, "publish to the default exchange (amq.default)") || strings.Contains(msg, "\n") {
				t.Fatalf("error %q: want one line naming the default exchange", msg)
			}
			t.Log(err)
		})
	}
}

// TestDelayedExchangeTimersSurviveBrokerRestart stops the broker while
// timers are in the plugin, past their deadlines, and starts it again: the
// plugin fires them at boot into the classic due queue, which accepts them,
// and every one is delivered (issue 11: into the quorum due queue, which had
// no leader yet, 200 of 200 were dropped).
func TestDelayedExchangeTimersSurviveBrokerRestart(t *testing.T) {
	testenv.Require(t, testenv.Outage)
	url := brokerURL(t)
	requirePlugin(t, url)
	if _, err := exec.LookPath("rabbitmqctl"); err != nil {
		t.Skip("rabbitmqctl is not on PATH: cannot stop the broker")
	}
	s := setup(t, Config{URL: url, Mode: ModeDelayedExchange})
	deadline := time.Now().Add(4 * time.Second).Truncate(time.Millisecond)
	timers := make([]hourglass.DueItem, 200)
	for i := range timers {
		timers[i] = hourglass.DueItem{ID: int64(i + 1), At: deadline}
	}
	if err := s.Schedule(context.Background(), timers); err != nil {
		t.Fatal(err)
	}
	rabbitmqctl(t, "stop_app")
	testenv.Phase(t, time.Until(deadline)+3*time.Second, "the broker down while every timer falls due")
	rabbitmqctl(t, "start_app")
	waitForAMQP(t, url, 60*time.Second)
	got := collect(t, s, len(timers), 60*time.Second)
	if len(got) != len(timers) {
		var missing []string
		for _, tm := range timers {
			if _, ok := got[tm.ID]; !ok {
				missing = append(missing, fmt.Sprint(tm.ID))
			}
		}
		t.Fatalf("%d of %d timers delivered after the broker restart; missing %s", len(got), len(timers), strings.Join(missing, ","))
	}
}
