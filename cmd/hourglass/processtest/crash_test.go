package processtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store/storetest"
)

// TestCrashRecovery builds the binary, runs a load of creates, payments and
// cancels against it, SIGKILLs it mid-load, restarts it on the same data
// directory and checks that what every answered request promised holds, that
// every unpaid order was closed exactly once (stock is conserved) and that
// the deadlines that passed while it was down were closed promptly on restart.
// On SQLite in the Default tier, on the server stores in the Matrix tier.
func TestCrashRecovery(t *testing.T) {
	testenv.EveryCase(t, testenv.Default, stores, nil, testCrashRecovery)
}

func testCrashRecovery(t *testing.T) {
	dir := t.TempDir()
	bin := binary(t)
	dataDir := filepath.Join(dir, "data")
	dbURL := storetest.URL(t)

	first := startHourglass(t, "first run", bin, dataDir, "--database-url", dbURL)
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = 64
	t.Cleanup(transport.CloseIdleConnections)
	hc := &http.Client{Transport: transport, Timeout: 10 * time.Second}
	client := api.NewClient(first.url, "", hc)

	const initial = 100000
	skus := []string{"crash-a", "crash-b", "crash-c", "crash-d"}
	for _, sku := range skus {
		if _, err := client.PutProduct(t.Context(), sku, sku, "", initial); err != nil {
			t.Fatalf("put product %s: %v", sku, err)
		}
	}

	// The load: workers create orders; a share of them is paid or cancelled
	// at once or after a random delay. Every request's outcome is recorded:
	// answered (the server's word binds it) or unknown (in flight at the
	// kill: the restarted server's state is the truth).
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	const workers = 16
	var (
		stop    atomic.Bool
		stopped = make(chan struct{})
		mu      sync.Mutex
		records []*record
		wg      sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for n := 0; !stop.Load(); n++ {
				r := &record{userID: fmt.Sprintf("w%d-%d", w, n), timeoutMs: 1000 + rng.Int64N(2001)}
				for _, j := range rng.Perm(len(skus))[:1+rng.IntN(3)] {
					r.items = append(r.items, api.ItemJSON{SKU: skus[j], Quantity: 1 + rng.Int64N(3)})
				}
				mu.Lock()
				records = append(records, r)
				mu.Unlock()
				o, _, err := client.CreateOrder(context.Background(), api.CreateOrderRequest{UserID: r.userID, Items: r.items, TimeoutMs: r.timeoutMs}, "")
				r.create, r.createErr = classify(err)
				if r.create != answered {
					continue
				}
				r.order = o
				var delay time.Duration
				switch x := rng.Float64(); {
				case x < 0.3:
					r.action = "pay"
				case x < 0.4:
					r.action = "cancel"
				case x < 0.55:
					// Pay after a delay of up to 3.5s: some land after the
					// deadline, some are in flight at the kill.
					r.action = "pay"
					delay = time.Duration(rng.Int64N(3500)) * time.Millisecond
				default:
					continue
				}
				act := func() {
					var err error
					switch r.action {
					case "pay":
						r.paymentID = "pay-" + r.userID
						_, err = client.Pay(context.Background(), o.ID, r.paymentID)
					case "cancel":
						_, err = client.Transition(context.Background(), o.ID, "cancel")
					}
					r.act, r.actErr = classify(err)
				}
				if delay == 0 {
					act()
					continue
				}
				wg.Go(func() {
					select {
					case <-stopped:
						r.action = "" // never sent
					case <-time.After(delay):
						act()
					}
				})
			}
		})
	}
	testenv.Phase(t, 2*time.Second, "the load runs against the first process before its SIGKILL")
	if err := first.cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatalf("kill: %v", err)
	}
	killedAt := time.Now()
	stop.Store(true)
	close(stopped)
	<-first.exited
	wg.Wait()
	transport.CloseIdleConnections()

	// Refused answers are final; an unexpected code or a 5xx is a bug.
	for _, r := range records {
		if r.create == refused && r.createErr.Code != "insufficient_stock" {
			t.Errorf("create %s: unexpected refusal %v", r.userID, r.createErr)
		}
		if r.act == refused && !(r.action == "pay" && r.actErr.Code == "order_not_payable") &&
			!(r.action == "cancel" && r.actErr.Code == "invalid_transition") {
			t.Errorf("%s order %d: unexpected refusal %v", r.action, r.order.ID, r.actErr)
		}
		for _, err := range []*api.Error{r.createErr, r.actErr} {
			if err != nil && err.Status >= 500 {
				t.Errorf("order of %s: a 5xx answer: %v", r.userID, err)
			}
		}
	}

	// Let some deadlines pass while the server is down, then restart it.
	// Deadlines reach killedAt+3s, so some also fall after the restart.
	testenv.Phase(t, time.Second, "the server stays down while deadlines pass")
	second := startHourglass(t, "restart", bin, dataDir, "--database-url", dbURL)
	readyAt := second.readyAt
	client = api.NewClient(second.url, "", hc)

	// Every create was processed before the kill, so every deadline is at
	// most killedAt + 3s: wait until the closer is done, at most 10s past
	// that. No order is listed pending before the last deadline has
	// passed, so the whole list is read only once none is.
	var orders []api.OrderJSON
	testenv.EventuallyEvery(t, max(time.Until(killedAt.Add(3*time.Second)), 0)+10*time.Second, 50*time.Millisecond,
		"orders still pending (or closed without closed_at) 10s after the last deadline", func() bool {
			if l, err := client.ListOrders(t.Context(), "pending_payment", 1, 0); err != nil || len(l.Orders) > 0 {
				return false
			}
			orders = listAll(t, client)
			return settled(orders)
		})

	byUser := map[string]api.OrderJSON{}
	for _, o := range orders {
		if prev, dup := byUser[o.UserID]; dup {
			t.Errorf("two orders for one create request %s: %d and %d", o.UserID, prev.ID, o.ID)
		}
		byUser[o.UserID] = o
	}
	errs := 0
	fail := func(format string, args ...any) {
		t.Helper()
		if errs++; errs <= 30 {
			t.Errorf(format, args...)
		}
	}
	var (
		counts  = map[string]int{}
		soldQty = map[string]int64{}
		known   = map[string]bool{}
	)
	for _, r := range records {
		counts["create "+r.create.String()]++
		if r.action != "" {
			counts[r.action+" "+r.act.String()]++
		}
		known[r.userID] = true
		o, exists := byUser[r.userID]
		switch r.create {
		case answered:
			if !exists {
				fail("order %d (%s) was created (201) but is gone after the restart", r.order.ID, r.userID)
				continue
			}
			if o.ID != r.order.ID || o.CreatedAt != r.order.CreatedAt || o.Deadline != r.order.Deadline || !slices.Equal(o.Items, r.order.Items) {
				fail("order %s changed across the restart: created %+v, now %+v", r.userID, r.order, o)
			}
		case refused:
			if exists {
				fail("create %s was refused (%v) but order %d exists", r.userID, r.createErr, o.ID)
			}
			continue
		case unknown:
			if !exists {
				continue
			}
			counts["create unknown, order exists"]++
			if !slices.Equal(o.Items, r.items) {
				fail("order %d of in-flight create %s has items %+v, sent %+v", o.ID, r.userID, o.Items, r.items)
			}
		}
		want := map[string]bool{"closed": true} // nobody else touches it
		switch {
		case r.action == "pay" && r.act == answered:
			want = map[string]bool{"paid": true}
		case r.action == "cancel" && r.act == answered:
			want = map[string]bool{"cancelled": true}
		case r.action == "pay" && r.act == unknown:
			want = map[string]bool{"paid": true, "closed": true}
		case r.action == "cancel" && r.act == unknown:
			want = map[string]bool{"cancelled": true, "closed": true}
		}
		if !want[o.Status] {
			fail("order %d (%s, %s %s): status %s, want one of %v", o.ID, r.userID, r.action, r.act, o.Status, want)
		}
		if o.Status == "paid" && (o.PaymentID == nil || *o.PaymentID != r.paymentID) {
			fail("order %d: paid with payment_id %v, want %q", o.ID, o.PaymentID, r.paymentID)
		}
	}

	var closedWhileDown, closedAfterRestart int
	for _, o := range orders {
		if !known[o.UserID] {
			fail("order %d (%s) matches no create request", o.ID, o.UserID)
		}
		deadline := parseTime(t, o.Deadline)
		switch o.Status {
		case "paid":
			if o.PaidAt == nil || !parseTime(t, *o.PaidAt).Before(deadline) || o.ClosedAt != nil || o.CloseReason != nil {
				fail("paid order %d: paid_at %v, deadline %s, closed_at %v, close_reason %v", o.ID, o.PaidAt, o.Deadline, o.ClosedAt, o.CloseReason)
			}
			for _, it := range o.Items {
				soldQty[it.SKU] += it.Quantity
			}
		case "cancelled":
			if o.PaidAt != nil || o.CloseReason != nil {
				fail("cancelled order %d: %+v", o.ID, o)
			}
		case "closed":
			if o.ClosedAt == nil || o.CloseReason == nil || *o.CloseReason != "timeout" || o.PaidAt != nil {
				fail("closed order %d: closed_at %v, close_reason %v, paid_at %v", o.ID, o.ClosedAt, o.CloseReason, o.PaidAt)
				continue
			}
			closedAt := parseTime(t, *o.ClosedAt)
			if closedAt.Before(deadline) {
				fail("order %d closed at %s, before its deadline %s", o.ID, *o.ClosedAt, o.Deadline)
			}
			switch {
			case deadline.After(killedAt) && deadline.Before(readyAt):
				closedWhileDown++
			case !deadline.Before(readyAt):
				closedAfterRestart++
			}
			// What was due before the restart is closed by start-up
			// recovery, which runs in the background once /readyz is 200
			// (issue 10): the lag check below bounds it from the ready time.
			due := deadline
			if readyAt.After(due) {
				due = readyAt
			}
			if lag := closedAt.Sub(due); lag >= 5*time.Second {
				fail("order %d: closed at %s, %v after max(deadline %s, ready %s)", o.ID, *o.ClosedAt, lag, o.Deadline, readyAt.UTC().Format(time.RFC3339Nano))
			}
		default:
			fail("order %d has status %s, want paid, cancelled or closed", o.ID, o.Status)
		}
	}
	if errs > 30 {
		t.Errorf("... and %d more errors", errs-30)
	}
	t.Logf("down for %v; %d orders; requests: %v; closed while down then at restart: %d, after restart: %d",
		readyAt.Sub(killedAt).Round(time.Millisecond), len(orders), counts, closedWhileDown, closedAfterRestart)
	if counts["create answered"] == 0 || counts["pay answered"] == 0 || counts["cancel answered"] == 0 {
		t.Errorf("the load did too little to test anything: %v", counts)
	}
	if closedWhileDown == 0 || closedAfterRestart == 0 {
		t.Errorf("no deadline passed while down (%d) or after the restart (%d): the timing of the test is off", closedWhileDown, closedAfterRestart)
	}

	for _, sku := range skus {
		p, err := client.Product(t.Context(), sku)
		if err != nil {
			t.Fatalf("product %s: %v", sku, err)
		}
		if p.Available+p.Reserved+p.Sold != initial || p.Reserved != 0 || p.Sold != soldQty[sku] {
			t.Errorf("stock of %s: available %d + reserved %d + sold %d; want sum %d, reserved 0, sold %d (the paid orders' quantities)",
				sku, p.Available, p.Reserved, p.Sold, initial, soldQty[sku])
		}
	}
}

// outcome is what a request's answer says happened.
type outcome int

const (
	answered outcome = iota // 2xx
	refused                 // 4xx: nothing was written
	unknown                 // no answer (in flight at the kill) or 5xx
)

func (o outcome) String() string { return [...]string{"answered", "refused", "unknown"}[o] }

func classify(err error) (outcome, *api.Error) {
	var e *api.Error
	switch {
	case err == nil:
		return answered, nil
	case errors.As(err, &e) && e.Status < 500:
		return refused, e
	case errors.As(err, &e):
		return unknown, e
	}
	return unknown, nil
}

// record is one create request and the action taken on its order.
type record struct {
	userID    string // unique per request, to find its order
	items     []api.ItemJSON
	timeoutMs int64
	create    outcome
	createErr *api.Error
	order     api.OrderJSON // when create == answered
	action    string        // "", "pay" or "cancel"
	paymentID string
	act       outcome
	actErr    *api.Error
}

func listAll(t testing.TB, c *api.Client) []api.OrderJSON {
	t.Helper()
	var out []api.OrderJSON
	var after int64
	for {
		l, err := c.ListOrders(t.Context(), "", 1000, after)
		if err != nil {
			t.Fatalf("list orders after %d: %v", after, err)
		}
		out = append(out, l.Orders...)
		if l.Next == nil {
			return out
		}
		after = *l.Next
	}
}

// settled reports whether no order is pending or awaiting its close commit.
func settled(orders []api.OrderJSON) bool {
	for _, o := range orders {
		if o.Status == "pending_payment" || (o.Status == "closed" && o.ClosedAt == nil) {
			return false
		}
	}
	return true
}

func parseTime(t *testing.T, s string) time.Time {
	t.Helper()
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("parse time %q: %v", s, err)
	}
	return tm
}

// hourglassProcess is a running `hourglass serve`.
type hourglassProcess struct {
	cmd       *exec.Cmd
	url       string
	startedAt time.Time // just before the process was started
	readyAt   time.Time // when /readyz first answered 200
	exited    chan struct{}
}

var listeningURL = regexp.MustCompile(`msg="hourglass: listening" url=(\S+)`)

// startHourglass starts the binary on a free port and waits until /readyz
// answers 200. The process is killed in t.Cleanup; its stderr is written to
// the test log if the test failed.
func startHourglass(t testing.TB, name, bin, dataDir string, extraArgs ...string) *hourglassProcess {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	stderr := &logBuffer{}
	cmd := exec.Command(bin, append([]string{"serve", "--addr", addr, "--data-dir", dataDir, "--sweep-interval", "200ms"}, extraArgs...)...)
	cmd.Stdout = stderr
	cmd.Stderr = stderr
	startedAt := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &hourglassProcess{cmd: cmd, startedAt: startedAt, exited: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			cmd.Process.Signal(syscall.SIGKILL)
			<-p.exited
		}
		if t.Failed() {
			t.Logf("hourglass stderr (%s):\n%s", name, stderr.String())
		}
	})

	deadline := time.Now().Add(15 * time.Second)
	for p.url == "" {
		if m := listeningURL.FindStringSubmatch(stderr.String()); m != nil {
			p.url = m[1]
			break
		}
		select {
		case <-p.exited:
			t.Fatalf("%s exited before listening: %v", name, cmd.ProcessState)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no listening line on stderr after 15s", name)
		}
	}
	if want := "http://" + addr; p.url != want {
		t.Fatalf("%s listens on %s, want %s", name, p.url, want)
	}
	probe := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := probe.Get(p.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				p.readyAt = time.Now()
				return p
			}
		}
		select {
		case <-p.exited:
			t.Fatalf("%s exited before ready: %v", name, cmd.ProcessState)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: /readyz not 200 after 15s", name)
		}
	}
}

// logBuffer collects a child's output; safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
