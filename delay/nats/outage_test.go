package nats_test

import (
	"context"
	"os/exec"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/nats"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/hourglasstest/outage"
	"github.com/hourglass/hourglass/internal/testenv"
)

// The local NATS server as the Debian package runs it here.
const (
	natsServerBin = "/usr/sbin/nats-server"
	outageDown    = 2 * time.Second
)

var natsServerArgs = []string{"-a", "127.0.0.1", "-p", "4222", "-js", "-sd", "/var/lib/nats-server", "-l", "/var/log/nats-server.log"}

// TestOutage stops the local nats-server for about 2 s mid-load and starts
// it again: no order may be lost or closed twice.
func TestOutage(t *testing.T) {
	testenv.Require(t, testenv.Outage)
	url := serverURL(t)
	t.Cleanup(func() { startNATS(t, url) }) // whatever happens, leave it running
	outage.Run(t, outage.Config{
		Open: func(t *testing.T, _ hourglass.Store) hourglass.Scheduler {
			return open(t, url, hourglasstest.Namespace(t), nats.Config{})
		},
		Outage: func(t *testing.T) {
			stop := exec.Command("start-stop-daemon", "--stop", "--oknodo", "--retry", "10", "--exec", natsServerBin)
			if out, err := stop.CombinedOutput(); err != nil {
				t.Errorf("stop nats-server: %v: %s", err, out)
			}
			// Outage runs off the test's goroutine: no testenv.Phase.
			testenv.Until(t.Context(), time.Now().Add(outageDown))
			startNATS(t, url)
		},
	})
}

// startNATS starts the local nats-server (a no-op if it runs) and waits
// until it accepts connections and JetStream answers.
func startNATS(t *testing.T, url string) {
	args := append([]string{"--start", "--oknodo", "--background", "--exec", natsServerBin, "--"}, natsServerArgs...)
	if out, err := exec.Command("start-stop-daemon", args...).CombinedOutput(); err != nil {
		t.Errorf("start nats-server: %v: %s", err, out)
		return
	}
	giveUp := time.NewTimer(30 * time.Second)
	defer giveUp.Stop()
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	for {
		err := jetStreamAnswers(url)
		if err == nil {
			return
		}
		select {
		case <-poll.C:
		case <-giveUp.C:
			t.Errorf("nats-server did not come back at %s: %v", url, err)
			return
		}
	}
}

func jetStreamAnswers(url string) error {
	nc, err := natsgo.Connect(url, natsgo.Timeout(time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err
}
