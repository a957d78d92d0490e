package nats_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/nats"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
)

// schedulesServerVersion is the nats-server built for TestMsgSchedules.
const schedulesServerVersion = "v2.15.2"

// schedulesServerURL returns a NATS server with message schedules (2.12+):
// HOURGLASS_TEST_NATS_SCHEDULES_URL if set; else, with
// HOURGLASS_TEST_NATS_SCHEDULES=1, a nats-server built from the Go module
// github.com/nats-io/nats-server/v2 (go install, cached under the user cache
// directory; about 30 s the first time) and started on a free loopback port
// for this test. The server runs as a child process rather than in-process
// so that this module does not require nats-server and its dependencies.
func schedulesServerURL(t *testing.T) string {
	t.Helper()
	if u := os.Getenv("HOURGLASS_TEST_NATS_SCHEDULES_URL"); u != "" {
		return testenv.ServiceURL(t, "NATS 2.12+", "HOURGLASS_TEST_NATS_SCHEDULES_URL", u)
	}
	if os.Getenv("HOURGLASS_TEST_NATS_SCHEDULES") != "1" {
		t.Skip("needs a NATS 2.12+ server: set HOURGLASS_TEST_NATS_SCHEDULES_URL, or HOURGLASS_TEST_NATS_SCHEDULES=1 to build nats-server " + schedulesServerVersion + " and run it")
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	bin := filepath.Join(cache, "hourglass", "nats-server-"+schedulesServerVersion)
	exe := filepath.Join(bin, "nats-server")
	if _, err := os.Stat(exe); err != nil {
		install := exec.Command("go", "install", "github.com/nats-io/nats-server/v2@"+schedulesServerVersion)
		install.Env = append(os.Environ(), "GOBIN="+bin, "GOTOOLCHAIN=local", "GOFLAGS=-buildvcs=false")
		if out, err := install.CombinedOutput(); err != nil {
			t.Fatalf("go install nats-server %s: %v\n%s", schedulesServerVersion, err, out)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	srv := exec.Command(exe, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", t.TempDir())
	if err := srv.Start(); err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	t.Cleanup(func() {
		srv.Process.Kill()
		srv.Wait()
	})
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	testenv.Eventually(t, 15*time.Second, fmt.Sprintf("nats-server %s answering JetStream at %s", schedulesServerVersion, url), func() bool {
		nc, err := natsgo.Connect(url, natsgo.Timeout(time.Second))
		if err != nil {
			return false
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err = js.AccountInfo(ctx)
		return err == nil
	})
	return url
}

// TestMsgSchedules runs the conformance suite and the far-timer test on a
// server with message schedules, where far timers wait in the stream as
// schedules instead of in the consumer.
func TestMsgSchedules(t *testing.T) {
	url := schedulesServerURL(t)
	t.Run("Conformance", func(t *testing.T) {
		hourglasstest.ExerciseScheduler(t, hourglasstest.SchedulerHarness{
			New: func(t *testing.T, ns string) hourglass.Scheduler {
				s := open(t, url, ns, nats.Config{})
				if !s.MsgSchedules() {
					t.Fatal("the scheduler does not use message schedules on a 2.12+ server")
				}
				return s
			},
			MaxLateness: time.Second, // a broken mechanism is seconds late; lateness itself is measured by hourglass bench
			Redelivery:  nats.AckWaitDefault,
		})
	})
	t.Run("FarTimers", func(t *testing.T) {
		ns := hourglasstest.Namespace(t)
		s := open(t, url, ns, nats.Config{HoldWindow: 2 * time.Second, NakLead: time.Second, ScheduleLead: 500 * time.Millisecond})
		exerciseFarTimers(t, url, ns, s, true, false)
	})
	t.Run("NoMsgSchedulesOnAScheduledStream", func(t *testing.T) {
		// The server refuses to turn schedules off on a stream: reopening
		// with NoMsgSchedules must keep the stream as it is and work.
		ns := hourglasstest.Namespace(t)
		first := open(t, url, ns, nats.Config{})
		first.Close()
		s := open(t, url, ns, nats.Config{NoMsgSchedules: true})
		if s.MsgSchedules() {
			t.Fatal("MsgSchedules() with NoMsgSchedules")
		}
	})
	t.Run("FarTimersWithoutSchedules", func(t *testing.T) {
		ns := hourglasstest.Namespace(t)
		s := open(t, url, ns, nats.Config{HoldWindow: 2 * time.Second, NakLead: time.Second, ScheduleLead: 500 * time.Millisecond, NoMsgSchedules: true})
		exerciseFarTimers(t, url, ns, s, false, false)
	})
}
