package nodes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/internal/testenv"
)

// Defaults of LoadConfig.
const (
	LoadRateDefault           = 50.0
	LoadStockDefault          = 1_000_000
	LoadTimeoutMinDefault     = time.Second
	LoadTimeoutMaxDefault     = 3 * time.Second
	LoadPayShareDefault       = 0.4
	LoadRequestTimeoutDefault = 2 * time.Second
	LoadRetriesDefault        = 2
	// LoadTimerRearmShareDefault and LoadTimerCancelShareDefault are the
	// shares of armed timers re-armed and cancelled.
	LoadTimerRearmShareDefault  = 0.15
	LoadTimerCancelShareDefault = 0.15
	// loadInFlightMax bounds the requests in flight: beyond it (every node
	// paused, say) a create is skipped rather than piled up.
	loadInFlightMax = 512
)

// LoadConfig shapes a Load. The zero value of each field is its default.
type LoadConfig struct {
	// Rate is creates per second across the cluster (LoadRateDefault).
	Rate float64
	// SKUs are the products orders draw 1–3 items from; each is put with
	// Stock available before the load starts (default load-a … load-d).
	SKUs  []string
	Stock int64
	// TimeoutMin and TimeoutMax bound each order's timeout_ms, drawn
	// uniformly; short, so that deadlines pass during a test.
	TimeoutMin, TimeoutMax time.Duration
	// PayShare is the share of created orders paid, each after a random
	// delay up to 1.2 × its timeout, so that some pays come too late.
	PayShare float64
	// RequestTimeout bounds each HTTP request: a request to a killed or
	// paused node ends unanswered after it.
	RequestTimeout time.Duration
	// Retries is how many times an unanswered create or pay is sent again
	// to the next live node (a create with the same Idempotency-Key, a pay
	// with the same payment_id, both safe to repeat); -1 for none.
	Retries int
	// Seed seeds the random choices; 0 takes one from the clock.
	Seed uint64
	// TimerRate is timers armed per second across the cluster, round-robin
	// like the creates, each to fire TimeoutMin..TimeoutMax after it is
	// sent; 0 arms none. Of those acknowledged, TimerRearmShare
	// (LoadTimerRearmShareDefault) are re-armed shortly after to a new
	// time as far out, and TimerCancelShare (LoadTimerCancelShareDefault)
	// cancelled, each through another node than the one that armed it.
	TimerRate                         float64
	TimerRearmShare, TimerCancelShare float64
}

func (c LoadConfig) withDefaults() LoadConfig {
	c.Rate = cmp.Or(c.Rate, LoadRateDefault)
	if len(c.SKUs) == 0 {
		c.SKUs = []string{"load-a", "load-b", "load-c", "load-d"}
	}
	c.Stock = cmp.Or(c.Stock, LoadStockDefault)
	c.TimeoutMin = cmp.Or(c.TimeoutMin, LoadTimeoutMinDefault)
	c.TimeoutMax = cmp.Or(c.TimeoutMax, LoadTimeoutMaxDefault)
	c.PayShare = cmp.Or(c.PayShare, LoadPayShareDefault)
	c.RequestTimeout = cmp.Or(c.RequestTimeout, LoadRequestTimeoutDefault)
	switch c.Retries {
	case 0:
		c.Retries = LoadRetriesDefault
	case -1:
		c.Retries = 0
	}
	c.Seed = cmp.Or(c.Seed, uint64(time.Now().UnixNano()))
	c.TimerRearmShare = cmp.Or(c.TimerRearmShare, LoadTimerRearmShareDefault)
	c.TimerCancelShare = cmp.Or(c.TimerCancelShare, LoadTimerCancelShareDefault)
	return c
}

// Validate returns an error naming the field out of range.
func (c LoadConfig) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Rate <= 0 || c.Rate > 10000:
		return fmt.Errorf("load: Rate must be in (0, 10000] creates/s, got %g", c.Rate)
	case c.TimeoutMin < time.Second || c.TimeoutMax < c.TimeoutMin:
		return fmt.Errorf("load: want 1s <= TimeoutMin <= TimeoutMax, got %s and %s", c.TimeoutMin, c.TimeoutMax)
	case c.PayShare < 0 || c.PayShare > 1:
		return fmt.Errorf("load: PayShare must be in [0, 1], got %g", c.PayShare)
	case c.Retries < 0:
		return fmt.Errorf("load: Retries must be >= -1, got %d", c.Retries)
	case c.TimerRate < 0 || c.TimerRate > 10000:
		return fmt.Errorf("load: TimerRate must be in [0, 10000] timers/s, got %g", c.TimerRate)
	case c.TimerRearmShare < 0 || c.TimerCancelShare < 0 || c.TimerRearmShare+c.TimerCancelShare > 1:
		return fmt.Errorf("load: TimerRearmShare and TimerCancelShare must be >= 0 with a sum <= 1, got %g and %g", c.TimerRearmShare, c.TimerCancelShare)
	}
	return nil
}

// Outcome is what the answers to a request (and its retries) say happened.
type Outcome int

// The outcomes of a request.
const (
	// NotSent: the load stopped before the request was due.
	NotSent Outcome = iota
	// Acknowledged: a 2xx answer; the server's word binds it.
	Acknowledged
	// Refused: a 4xx answer to the last attempt and no attempt without an
	// answer before it: nothing was written.
	Refused
	// Unknown: no attempt was answered with a 2xx and at least one got no
	// answer (a killed or paused node, a timeout) or a 5xx: the database
	// is the truth, and the verdict reconciles it.
	Unknown
)

func (o Outcome) String() string {
	return [...]string{"not sent", "acknowledged", "refused", "unknown"}[o]
}

// Attempt is one HTTP request of a create or a pay.
type Attempt struct {
	Node   string // the node id it was sent to
	Status int    // 0: no answer
	Code   string // the error code of a non-2xx answer
	Err    string // why it got no answer, or the error's message
}

// Create is one create request of a Load, with its retries and the pay of
// its order.
type Create struct {
	UserID    string // unique per create request (and its Idempotency-Key)
	Items     []api.ItemJSON
	TimeoutMs int64
	SentAt    time.Time
	Attempts  []Attempt
	Outcome   Outcome
	Order     api.OrderJSON // the acknowledged order, when Outcome is Acknowledged
	Pay       *Pay          // nil when the order was not to be paid
}

// Pay is the pay of a created order.
type Pay struct {
	PaymentID string
	Delay     time.Duration // after the create's answer
	Attempts  []Attempt
	Outcome   Outcome
}

// Ledger is what a Load sent and what it was told.
type Ledger struct {
	Creates []*Create
	// Stock is each SKU's total stock as the load put it.
	Stock map[string]int64
	// Skipped counts creates not sent because too many requests were in
	// flight.
	Skipped int64
	// Timers are the timers armed (LoadConfig.TimerRate); TimersSkipped
	// counts arms not sent because too many requests were in flight.
	Timers        []*ArmedTimer
	TimersSkipped int64
}

// Counts returns how many creates, pays, timer arms, re-arms and cancels
// ended in each outcome, keyed "create acknowledged", "pay refused", "arm
// unknown", "rearm acknowledged", "cancel refused", ….
func (l *Ledger) Counts() map[string]int {
	out := map[string]int{}
	for _, c := range l.Creates {
		out["create "+c.Outcome.String()]++
		if c.Pay != nil {
			out["pay "+c.Pay.Outcome.String()]++
		}
	}
	for _, a := range l.Timers {
		out["arm "+a.Outcome.String()]++
		if a.Rearm != nil {
			out["rearm "+a.Rearm.Outcome.String()]++
		}
		if a.Cancel != nil {
			out["cancel "+a.Cancel.Outcome.String()]++
		}
	}
	return out
}

// LastDeadline returns the latest deadline an order of the ledger can have:
// the acknowledged ones' deadlines, and for the others their send time plus
// timeout plus the request timeouts of their attempts.
func (l *Ledger) LastDeadline(requestTimeout time.Duration) time.Time {
	var last time.Time
	for _, c := range l.Creates {
		d := c.SentAt.Add(time.Duration(c.TimeoutMs)*time.Millisecond + time.Duration(len(c.Attempts))*requestTimeout)
		if c.Outcome == Acknowledged {
			if t, err := time.Parse(time.RFC3339Nano, c.Order.Deadline); err == nil {
				d = t
			}
		}
		if d.After(last) {
			last = d
		}
	}
	return last
}

// Load sends creates at a steady rate, and pays for a share of them, and
// arms timers (see ArmedTimer), round-robin to a cluster's live nodes. Start it with Cluster.StartLoad;
// Stop ends it.
type Load struct {
	cfg     LoadConfig
	cluster *Cluster
	http    *http.Client
	stop    context.CancelFunc
	done    chan struct{}
	next    atomic.Uint64 // round-robin cursor
	flight  chan struct{} // semaphore of requests in flight
	wg      sync.WaitGroup

	mu     sync.Mutex
	ledger Ledger
}

// StartLoad puts the load's products (through a live node) and starts
// sending. It returns an error if the products cannot be put.
func (c *Cluster) StartLoad(ctx context.Context, cfg LoadConfig) (*Load, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = 64
	l := &Load{
		cfg:     cfg,
		cluster: c,
		http:    &http.Client{Transport: transport, Timeout: cfg.RequestTimeout},
		done:    make(chan struct{}),
		flight:  make(chan struct{}, loadInFlightMax),
		ledger:  Ledger{Stock: map[string]int64{}},
	}
	live := c.Live()
	if len(live) == 0 {
		return nil, errors.New("load: no live node to put the products through")
	}
	client := api.NewClient(live[0].URL(), "", l.http)
	for _, sku := range cfg.SKUs {
		p, err := client.PutProduct(ctx, sku, sku, "", cfg.Stock)
		if err != nil {
			return nil, fmt.Errorf("load: put product %s: %w", sku, err)
		}
		l.ledger.Stock[sku] = p.Available + p.Reserved + p.Sold
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	l.stop = stop
	if cfg.TimerRate > 0 {
		l.wg.Go(func() { l.runTimers(runCtx) })
	}
	go l.run(runCtx)
	return l, nil
}

// Stop stops sending, waits for the requests in flight, marks the pays not
// yet due as NotSent, and returns the ledger. It is idempotent.
func (l *Load) Stop() *Ledger {
	l.stop()
	<-l.done
	l.wg.Wait()
	l.http.CloseIdleConnections()
	l.mu.Lock()
	defer l.mu.Unlock()
	return &l.ledger
}

// Sent returns how many creates have been sent so far.
func (l *Load) Sent() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ledger.Creates)
}

func (l *Load) run(ctx context.Context) {
	defer close(l.done)
	rng := rand.New(rand.NewPCG(l.cfg.Seed, 0x6c6f6164))
	interval := time.Duration(float64(time.Second) / l.cfg.Rate)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		c := &Create{
			UserID:    fmt.Sprintf("u%d-%d", l.cfg.Seed%100000, n),
			TimeoutMs: (l.cfg.TimeoutMin + time.Duration(rng.Int64N(int64(l.cfg.TimeoutMax-l.cfg.TimeoutMin)+1))).Milliseconds(),
		}
		for _, j := range rng.Perm(len(l.cfg.SKUs))[:1+rng.IntN(min(3, len(l.cfg.SKUs)))] {
			c.Items = append(c.Items, api.ItemJSON{SKU: l.cfg.SKUs[j], Quantity: 1 + rng.Int64N(3)})
		}
		if rng.Float64() < l.cfg.PayShare {
			c.Pay = &Pay{
				PaymentID: "pay-" + c.UserID,
				Delay:     time.Duration(rng.Int64N(c.TimeoutMs*12/10)) * time.Millisecond,
			}
		}
		select {
		case l.flight <- struct{}{}:
		default:
			l.mu.Lock()
			l.ledger.Skipped++
			l.mu.Unlock()
			continue
		}
		l.mu.Lock()
		l.ledger.Creates = append(l.ledger.Creates, c)
		l.mu.Unlock()
		l.wg.Go(func() { l.create(ctx, c, func() { <-l.flight }) })
	}
}

// create sends c (and its retries), calls release, then sends its pay after
// its delay.
func (l *Load) create(ctx context.Context, c *Create, release func()) {
	c.SentAt = time.Now()
	req := api.CreateOrderRequest{UserID: c.UserID, Items: c.Items, TimeoutMs: c.TimeoutMs}
	var attempts []Attempt
	var order api.OrderJSON
	outcome := l.send(ctx, &attempts, "", func(cl *api.Client) error {
		o, _, err := cl.CreateOrder(context.Background(), req, c.UserID)
		order = o
		return err
	})
	release()
	l.mu.Lock()
	c.Attempts, c.Outcome, c.Order = attempts, outcome, order
	l.mu.Unlock()
	if c.Pay == nil {
		return
	}
	if outcome != Acknowledged {
		// Nothing known to pay: the order may exist (an unknown create),
		// and then it must close.
		l.mu.Lock()
		c.Pay = nil
		l.mu.Unlock()
		return
	}
	select {
	case <-ctx.Done():
		l.mu.Lock()
		c.Pay.Outcome = NotSent
		l.mu.Unlock()
		return
	case <-time.After(c.Pay.Delay):
	}
	var payAttempts []Attempt
	payOutcome := l.send(ctx, &payAttempts, "", func(cl *api.Client) error {
		_, err := cl.Pay(context.Background(), order.ID, c.Pay.PaymentID)
		return err
	})
	l.mu.Lock()
	c.Pay.Attempts, c.Pay.Outcome = payAttempts, payOutcome
	l.mu.Unlock()
}

// send makes a request through the next live nodes, other than the node
// avoid while another is live, until one answers or the retries run out,
// records each attempt, and returns the outcome. ctx is the load's: a
// request already sent is not cut short when it ends, only the wait before
// a retry when no node was live.
func (l *Load) send(ctx context.Context, attempts *[]Attempt, avoid string, do func(*api.Client) error) Outcome {
	unanswered := false
	for try := 0; try <= l.cfg.Retries; try++ {
		live := l.cluster.Live()
		if len(live) == 0 {
			*attempts = append(*attempts, Attempt{Err: "no live node"})
			// As long as a request to a dead node waits for its answer.
			testenv.Until(ctx, time.Now().Add(l.cfg.RequestTimeout))
			continue
		}
		n := pick(live, l.next.Add(1), avoid)
		a := Attempt{Node: n.ID()}
		err := do(api.NewClient(n.URL(), "", l.http))
		var apiErr *api.Error
		switch {
		case err == nil:
			a.Status = http.StatusOK
			*attempts = append(*attempts, a)
			return Acknowledged
		case errors.As(err, &apiErr):
			a.Status, a.Code, a.Err = apiErr.Status, apiErr.Code, apiErr.Message
		default:
			a.Err = err.Error()
		}
		*attempts = append(*attempts, a)
		if a.Status >= 400 && a.Status < 500 {
			if unanswered {
				return Unknown
			}
			return Refused
		}
		unanswered = true
	}
	return Unknown
}

// pick returns the live node at cursor (modulo), or the next one after it
// whose id is not avoid, if there is one.
func pick(live []*Node, cursor uint64, avoid string) *Node {
	start := int(cursor % uint64(len(live)))
	for k := range live {
		if n := live[(start+k)%len(live)]; n.ID() != avoid {
			return n
		}
	}
	return live[start]
}
