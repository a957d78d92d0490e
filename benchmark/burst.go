package benchmark

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/engine"
	"github.com/hourglass/hourglass/webhook"
)

// BurstWorkload is a flash sale's mass expiry: N orders for one SKU,
// created as fast as the store allows, each with the timeout that puts its
// deadline at one instant, then closed by the close path at default
// settings while a probe keeps creating and paying other orders.
type BurstWorkload struct {
	// Orders is how many orders fall due at the instant.
	Orders int
	// Webhooks is how many webhooks (to a local receiver, subscribed to
	// every event) exist during the burst, so the fan-out's cost shows.
	Webhooks int
	// BoundaryPays is how many of the burst's orders are paid in the last
	// 50 ms before the deadline: each must end paid if its pay succeeded
	// and closed if it was refused.
	BoundaryPays int
	// ProbeRate is the creates and the pays per second (each) sent during
	// the burst to measure the API's latency.
	ProbeRate int
	// TrickleRate is how many other orders fall due per second, from a
	// second before the burst's deadline until its deliveries have their
	// first attempts: closes that keep coming while the burst's events fan
	// out (0: none).
	TrickleRate int
	// HookEvents are the events the webhooks subscribe to (default every
	// event, "*").
	HookEvents []hourglass.EventType
}

// BurstResult is what one burst run measured.
type BurstResult struct {
	System   string
	Orders   int
	Webhooks int
	// CreateRate is the orders per second the seeding achieved.
	CreateRate float64
	// Drain is when the last burst order closed, after the deadline;
	// Late are lateness percentiles (closed_at − deadline) over the closed
	// burst orders.
	Drain                time.Duration
	LateP50, LateP99     time.Duration
	ClosesPerSecond      float64
	Closed, Swept, Noops int
	PaidAtBoundary       int
	RefusedAtBoundary    int
	CreateP99, PayP99    time.Duration
	Probes               int
	Delivered            int           // webhook deliveries received when the burst had drained
	DeliveredAll         time.Duration // after the deadline, when every delivery had arrived (0: not within a minute)
	// FirstAttempts is, after the burst's last close, when every webhook
	// subscribed to order.closed had received the order.closed event of
	// every burst order that closed (its first attempt; -1: not within a
	// minute).
	FirstAttempts time.Duration
	Trickled      int // other orders closed meanwhile (TrickleRate)
	Error         string
}

// burstObserver records every burst close's lateness and counts sweeps,
// no-ops and the other orders' closes.
type burstObserver struct {
	mu       sync.Mutex
	burst    map[int64]bool // the burst's orders, once seeded (nil: every order)
	late     []time.Duration
	last     time.Time
	swept    int
	noops    int
	trickled int
	closed   atomic.Int64
}

func (o *burstObserver) Closed(c hourglass.ClosedOrder, swept bool) {
	o.mu.Lock()
	if o.burst != nil && !o.burst[c.OrderID] {
		o.trickled++
		o.mu.Unlock()
		return
	}
	o.late = append(o.late, c.ClosedAt.Sub(c.Deadline))
	if c.ClosedAt.After(o.last) {
		o.last = c.ClosedAt
	}
	if swept {
		o.swept++
	}
	o.mu.Unlock()
	o.closed.Add(1)
}
func (o *burstObserver) Stale(n int)            { o.mu.Lock(); o.noops += n; o.mu.Unlock() }
func (o *burstObserver) CloseFailed(int, error) {}
func (o *burstObserver) Swept(int)              {}
func (o *burstObserver) SchedulerFailed(error)  {}

// RunBurst runs w on sys, behind a node at its default settings, on a
// fresh scratch database on the server databaseURL names (SQLite in a
// temporary directory when empty).
func RunBurst(ctx context.Context, sys System, databaseURL string, w BurstWorkload, progress Progress) (BurstResult, error) {
	res := BurstResult{System: sys.Name, Orders: w.Orders, Webhooks: w.Webhooks}
	// Webhook delivery runs in the node, as in serve, allowed to reach
	// the receiver below.
	allow, err := webhook.ParseAllowList("127.0.0.1")
	if err != nil {
		return res, err
	}
	obs := &burstObserver{}
	run, err := startSystem(ctx, sys, databaseURL, engine.Config{}, webhook.Config{Allow: allow}, obs)
	if err != nil {
		return res, err
	}
	defer run.drop()
	db := run.db
	var bg sync.WaitGroup
	defer bg.Wait()

	// The webhooks and their receiver, with delivery running as in serve.
	// The receiver notes when each webhook first received each order's
	// order.closed event.
	var (
		received atomic.Int64
		svc      *webhook.Service
		firstMu  sync.Mutex
		first    = map[closedArrival]time.Time{}
		// burstSet is the burst's orders, once seeded; burstFirst and
		// burstLatest count their first arrivals as they come, so the
		// wait below reads two numbers, not the map, under firstMu.
		burstSet    atomic.Pointer[map[int64]bool]
		burstFirst  int
		burstLatest time.Time
	)
	if w.Webhooks > 0 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return res, err
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			now := time.Now()
			received.Add(1)
			var ev struct {
				Type  string `json:"type"`
				Order struct {
					ID int64 `json:"id"`
				} `json:"order"`
			}
			if json.Unmarshal(body, &ev) == nil && ev.Type == string(hourglass.EventOrderClosed) {
				k := closedArrival{hook: r.URL.Path, order: ev.Order.ID}
				firstMu.Lock()
				if _, ok := first[k]; !ok {
					first[k] = now
					if set := burstSet.Load(); set != nil && (*set)[k.order] {
						burstFirst++
						burstLatest = now
					}
				}
				firstMu.Unlock()
			}
		})}
		bg.Go(func() { srv.Serve(ln) })
		defer srv.Close()
		svc = run.n.Webhooks
		events := w.HookEvents
		if len(events) == 0 {
			events = []hourglass.EventType{hourglass.EventTypeAll}
		}
		for i := range w.Webhooks {
			if _, err := svc.CreateWebhook(ctx, hourglass.WebhookParams{URL: fmt.Sprintf("http://%s/hook/%d", ln.Addr(), i),
				Events: events, Secret: "burst-benchmark-secret"}); err != nil {
				return res, fmt.Errorf("create webhook: %w", err)
			}
		}
	}

	const sku, probeSKU, trickleSKU = "BURST", "PROBE", "TRICKLE"
	probes := 2 * w.ProbeRate * 120 // enough for two minutes of probing
	for _, p := range []hourglass.Product{{SKU: sku, Name: sku, Category: "physical", Available: int64(w.Orders)},
		{SKU: probeSKU, Name: probeSKU, Category: "physical", Available: int64(2 * probes)},
		{SKU: trickleSKU, Name: trickleSKU, Category: "physical", Available: int64(w.TrickleRate * 300)}} {
		if _, err := db.PutProduct(ctx, p); err != nil {
			return res, err
		}
	}
	target := &storeTarget{store: db}
	// Orders to pay during the burst, due long after it. Created the way
	// the burst is, they also measure the store's create rate, which sets
	// how far ahead the burst's deadline must lie.
	toPay := make(chan int64, probes)
	calStart := time.Now()
	var calWG sync.WaitGroup
	calErr := make(chan error, 64)
	for g := range 64 {
		calWG.Go(func() {
			for i := g; i < probes/2; i += 64 {
				o, err := target.Create(ctx, probeSKU, 1, 10*time.Minute, 0)
				if err != nil {
					calErr <- err
					return
				}
				toPay <- o.ID
			}
		})
	}
	calWG.Wait()
	close(calErr)
	if err := <-calErr; err != nil {
		return res, err
	}
	rate := float64(probes/2) / time.Since(calStart).Seconds()
	// Seed: the deadline lies twice the measured seeding time ahead, plus
	// 3 s (1.5 times was short on a machine whose speed varied).
	due := time.Now().Add(3*time.Second + time.Duration(2*float64(w.Orders)/rate*float64(time.Second))).Truncate(time.Second)
	ids := make([]int64, w.Orders)
	var (
		next   atomic.Int64
		seedWG sync.WaitGroup
		errs   = make(chan error, 64)
	)
	seedStart := time.Now()
	for range 64 {
		seedWG.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= w.Orders {
					return
				}
				if i%1000 == 0 && progress != nil {
					progress(sys.Name, i, w.Orders, "seeding")
				}
				left := time.Until(due)
				if left < hourglass.MinTimeout+time.Second {
					// Seeding ran slower than its calibration: the rest
					// cannot be due at the burst's instant.
					errs <- fmt.Errorf("seeding ran slower than its calibration (%.0f creates/s): order %d of %d would be due in %s, under the API's minimum timeout (%s) plus a second; rerun on a quieter machine",
						rate, i, w.Orders, left.Round(time.Millisecond), hourglass.MinTimeout)
					return
				}
				o, err := target.Create(ctx, sku, 1, left, 0)
				if err != nil {
					errs <- err
					return
				}
				ids[i] = o.ID
			}
		})
	}
	seedWG.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return res, fmt.Errorf("seed: %w", err)
	}
	res.CreateRate = float64(w.Orders) / time.Since(seedStart).Seconds()
	if !time.Now().Before(due) {
		return res, fmt.Errorf("seeding %d orders ended %s after their deadline (%.0f creates/s)", w.Orders, time.Since(due), res.CreateRate)
	}
	set := make(map[int64]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	burstSet.Store(&set) // read only from here on
	obs.mu.Lock()
	obs.burst = set
	obs.mu.Unlock()

	// The trickle: TrickleRate orders a second with a 1 s timeout, from 2 s
	// before the deadline until the first attempts are measured.
	trickleCtx, stopTrickle := context.WithCancel(ctx)
	defer stopTrickle()
	var trickleWG sync.WaitGroup
	if w.TrickleRate > 0 {
		trickleWG.Go(func() {
			time.Sleep(time.Until(due.Add(-2 * time.Second)))
			t := time.NewTicker(time.Second / time.Duration(w.TrickleRate))
			defer t.Stop()
			for {
				select {
				case <-trickleCtx.Done():
					return
				case <-t.C:
				}
				target.Create(trickleCtx, trickleSKU, 1, time.Second, 0) //nolint:errcheck // a failed create only trickles less
			}
		})
	}
	if progress != nil {
		progress(sys.Name, w.Orders, w.Orders, "waiting for the deadline")
	}

	// Boundary pays: the first BoundaryPays orders, paid in the last 50 ms.
	type payResult struct {
		id int64
		ok bool
	}
	boundary := make(chan payResult, w.BoundaryPays)
	var payWG sync.WaitGroup
	for i := range min(w.BoundaryPays, w.Orders) {
		at := due.Add(-50*time.Millisecond + time.Duration(i)*50*time.Millisecond/time.Duration(max(w.BoundaryPays, 1)))
		payWG.Go(func() {
			time.Sleep(time.Until(at))
			ok, err := target.Pay(ctx, ids[i])
			if err != nil {
				ok = false
			}
			boundary <- payResult{ids[i], ok}
		})
	}

	// The probe: creates and pays at ProbeRate each from the deadline until
	// the burst has drained.
	time.Sleep(time.Until(due))
	probeCtx, stopProbe := context.WithCancel(ctx)
	var (
		probeMu           sync.Mutex
		createLat, payLat []time.Duration
		probeWG           sync.WaitGroup
	)
	probe := func(do func() error, into *[]time.Duration) {
		t := time.NewTicker(time.Second / time.Duration(max(w.ProbeRate, 1)))
		defer t.Stop()
		for {
			select {
			case <-probeCtx.Done():
				return
			case <-t.C:
			}
			start := time.Now()
			if err := do(); err != nil {
				continue
			}
			probeMu.Lock()
			*into = append(*into, time.Since(start))
			probeMu.Unlock()
		}
	}
	if w.ProbeRate > 0 {
		probeWG.Go(func() {
			probe(func() error { _, err := target.Create(probeCtx, probeSKU, 1, 10*time.Minute, 0); return err }, &createLat)
		})
		probeWG.Go(func() {
			probe(func() error {
				select {
				case id := <-toPay:
					_, err := target.Pay(probeCtx, id)
					return err
				default:
					return fmt.Errorf("no order left to pay")
				}
			}, &payLat)
		})
	}
	payWG.Wait()
	close(boundary)
	paid := map[int64]bool{}
	for r := range boundary {
		paid[r.id] = r.ok
		if r.ok {
			res.PaidAtBoundary++
		} else {
			res.RefusedAtBoundary++
		}
	}
	want := int64(w.Orders - res.PaidAtBoundary)
	for obs.closed.Load() < want {
		if time.Since(due) > 5*time.Minute {
			stopProbe()
			probeWG.Wait()
			return res, fmt.Errorf("only %d of %d orders closed 5 minutes after their deadline", obs.closed.Load(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stopProbe()
	probeWG.Wait()
	res.Delivered = int(received.Load())

	obs.mu.Lock()
	late := slices.Clone(obs.late)
	res.Drain, res.Swept, res.Noops, res.Closed = obs.last.Sub(due), obs.swept, obs.noops, len(obs.late)
	obs.mu.Unlock()
	slices.Sort(late)
	res.LateP50, res.LateP99 = late[len(late)/2], late[(len(late)-1)*99/100]
	res.ClosesPerSecond = float64(len(late)) / max(res.Drain.Seconds(), 0.001)
	res.CreateP99, res.PayP99 = p99(createLat), p99(payLat)
	res.Probes = len(createLat) + len(payLat)

	// The boundary: a pay that succeeded left its order paid, a refused one
	// left it closed.
	for id, ok := range paid {
		o, err := db.Order(ctx, id)
		if err != nil {
			return res, err
		}
		if ok != (o.Status == hourglass.StatePaid) || !ok && o.Status != hourglass.StateClosed {
			return res, fmt.Errorf("order %d: pay at the boundary ok=%v but the order is %s", id, ok, o.Status)
		}
	}
	// Stock: every closed burst order's unit is available again.
	p, err := db.Product(ctx, sku)
	if err != nil {
		return res, err
	}
	if p.Reserved != 0 || p.Available != int64(w.Orders-res.PaidAtBoundary) || p.Sold != int64(res.PaidAtBoundary) {
		return res, fmt.Errorf("stock after the burst: available %d, reserved %d, sold %d; want %d, 0, %d", p.Available, p.Reserved, p.Sold, w.Orders-res.PaidAtBoundary, res.PaidAtBoundary)
	}
	if w.Webhooks > 0 && subscribesClosed(w.HookEvents) {
		// Every burst order that closed has one order.closed delivery per
		// webhook: wait for the first attempt of each.
		obs.mu.Lock()
		lastClose := obs.last
		obs.mu.Unlock()
		res.FirstAttempts = -1
		for time.Since(lastClose) < time.Minute {
			firstMu.Lock()
			n, latest := burstFirst, burstLatest
			firstMu.Unlock()
			if n >= w.Webhooks*(w.Orders-res.PaidAtBoundary) {
				res.FirstAttempts = latest.Sub(lastClose)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	stopTrickle()
	trickleWG.Wait()
	obs.mu.Lock()
	res.Trickled = obs.trickled
	obs.mu.Unlock()
	if w.Webhooks > 0 {
		// Every close, pay and create of the run has one delivery per webhook.
		for time.Since(due) < time.Minute {
			pending, _, err := svc.DeliveryCounts(ctx)
			if err == nil && pending == 0 {
				res.DeliveredAll = time.Since(due)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return res, nil
}

// closedArrival names an order's order.closed event at one webhook.
type closedArrival struct {
	hook  string
	order int64
}

// subscribesClosed reports whether webhooks subscribed to events receive
// order.closed (no events: every event).
func subscribesClosed(events []hourglass.EventType) bool {
	return len(events) == 0 || slices.Contains(events, hourglass.EventTypeAll) || slices.Contains(events, hourglass.EventOrderClosed)
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

func p99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[(len(ds)-1)*99/100]
}

// WriteBurstTable prints one row per burst run.
func WriteBurstTable(out io.Writer, results []BurstResult) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "system\torders\twebhooks\tcreates/s\tdrain\tlate p50\tlate p99\tcloses/s\tswept\tno-ops\tcreate p99\tpay p99\tboundary paid/refused\tfirst attempts\tall delivered\terror\t")
	ms := func(d time.Duration) string { return fmt.Sprintf("%d ms", d.Milliseconds()) }
	for _, r := range results {
		delivered, firsts := "-", "-"
		if r.Webhooks > 0 {
			delivered, firsts = "> 60 s", "> 60 s"
			if r.DeliveredAll > 0 {
				delivered = fmt.Sprintf("%.1f s", r.DeliveredAll.Seconds())
			}
			if r.FirstAttempts >= 0 {
				firsts = fmt.Sprintf("%.1f s", r.FirstAttempts.Seconds())
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%s\t%s\t%s\t%.0f\t%d\t%d\t%s\t%s\t%d/%d\t%s\t%s\t%s\t\n", r.System, r.Orders, r.Webhooks, r.CreateRate,
			ms(r.Drain), ms(r.LateP50), ms(r.LateP99), r.ClosesPerSecond, r.Swept, r.Noops, ms(r.CreateP99), ms(r.PayP99),
			r.PaidAtBoundary, r.RefusedAtBoundary, firsts, delivered, r.Error)
	}
	tw.Flush()
}
