package rabbitmq

import (
	"context"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/hourglasstest/outage"
	"github.com/hourglass/hourglass/internal/testenv"
)

// settleAfterRestart is how long after the broker is back the test waits
// before deleting its queues. RabbitMQ 3.10 crashes the dead-letter worker
// of an at-least-once quorum queue deleted while the worker is still
// starting, and its supervisor gives up after two crashes in 5 s, leaving
// every at-least-once quorum queue of the node down until it restarts.
const settleAfterRestart = 10 * time.Second

// TestOutage stops the RabbitMQ application (rabbitmqctl stop_app: the
// listener goes, every connection is closed, the quorum queues stay on disk)
// mid-load for a couple of seconds and starts it again. Orders due while it
// is down are closed by the engine's sweeper; the timers published before
// the outage still fire afterwards, into no-op closes.
func TestOutage(t *testing.T) {
	testenv.Require(t, testenv.Outage)
	url := brokerURL(t)
	if _, err := exec.LookPath("rabbitmqctl"); err != nil {
		t.Skip("rabbitmqctl is not on PATH: cannot stop the broker")
	}
	t.Cleanup(func() { checkDeadLetterSupervisor(t) }) // runs last
	var mu sync.Mutex
	var back time.Time
	outage.Run(t, outage.Config{
		Open: func(t *testing.T, _ hourglass.Store) hourglass.Scheduler {
			s := setup(t, Config{URL: url, Namespace: hourglasstest.Namespace(t)})
			t.Cleanup(func() { // runs before setup's Destroy
				mu.Lock()
				defer mu.Unlock()
				if wait := time.Until(back.Add(settleAfterRestart)); wait > 0 {
					t.Logf("waiting %s for the restarted broker to settle before deleting the queues", wait.Round(time.Millisecond))
					time.Sleep(wait) // in a Cleanup: t.Context has ended, so no testenv.Phase
				}
			})
			return s
		},
		Outage: func(t *testing.T) {
			began := time.Now()
			rabbitmqctl(t, "stop_app")
			t.Logf("stop_app took %s", time.Since(began).Round(time.Millisecond))
			// Down 2 s. Outage runs off the test's goroutine: no testenv.Phase.
			testenv.Until(t.Context(), time.Now().Add(2*time.Second))
			rabbitmqctl(t, "start_app")
			waitForAMQP(t, url, 60*time.Second)
			mu.Lock()
			back = time.Now()
			mu.Unlock()
		},
		// 10 s of load: the orders created after the broker is back show
		// the mechanism closing on time again.
		Orders: 2000,
	})
}

// checkDeadLetterSupervisor fails the test if the broker's at-least-once
// dead-letter supervisor died, and restarts the node so that other tests
// are not left with a broker whose tier queues never dead-letter.
func checkDeadLetterSupervisor(t *testing.T) {
	out, err := exec.Command("rabbitmqctl", "eval", "whereis(rabbit_fifo_dlx_sup).").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "undefined") {
		return
	}
	t.Errorf("the broker's rabbit_fifo_dlx_sup died: at-least-once quorum queues cannot run; restarting the node")
	rabbitmqctl(t, "stop")
	if out, err := exec.Command("rabbitmq-server", "-detached").CombinedOutput(); err != nil {
		t.Fatalf("rabbitmq-server -detached: %v: %s", err, out)
	}
	rabbitmqctl(t, "await_startup")
}

func rabbitmqctl(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// waitForAMQP polls until the broker completes an AMQP handshake.
func waitForAMQP(t *testing.T, url string, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, "RabbitMQ accepting AMQP connections after start_app", func() bool {
		conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
		if err != nil {
			return false
		}
		conn.Close()
		return true
	})
}
