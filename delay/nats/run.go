package nats

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hourglass/hourglass"
)

// Run implements hourglass.Scheduler: it re-declares the stream and the
// consumers, then fetches timers from the consumers of the partitions this
// process owns (and moves those of the unpartitioned consumer of earlier
// versions to their partitions), holds the near ones, delivers the due ones
// with Workers goroutines and acknowledges each after deliver returned nil.
// It returns nil when ctx ends, after handing back (negatively acknowledging)
// what it held so another consumer takes over at once; it returns an error
// when the connection has been down, or fetching has failed, for FailAfter,
// or the consumer or stream was deleted. Only one Run may be active per
// Scheduler; a second one returns an error at once.
func (s *Scheduler) Run(ctx context.Context, deliver hourglass.Deliver) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("nats: run: already running on this scheduler")
	}
	defer s.running.Store(false)
	if err := s.awaitConnection(ctx); err != nil || ctx.Err() != nil {
		return err
	}
	s.mu.Lock()
	cons := s.opened
	s.opened = nil
	s.mu.Unlock()
	var err error
	if cons == nil {
		opCtx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
		cons, err = s.ensure(opCtx)
		cancel()
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}

	r := &run{s: s, deliver: deliver, cons: cons, wake: make(chan struct{}, 1), ready: make(chan struct{}, 1), ackReady: make(chan struct{}, 1), fetchers: map[int]context.CancelFunc{}, failed: make(chan error, 1)}
	s.mu.Lock()
	s.cur = r
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.cur = nil
		s.mu.Unlock()
	}()

	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range s.cfg.Workers {
		wg.Add(1)
		go func() { defer wg.Done(); r.work(runCtx) }()
	}
	wg.Add(2)
	go func() { defer wg.Done(); r.hold(runCtx) }()
	go func() { defer wg.Done(); r.send(runCtx) }()

	err = r.consume(runCtx)
	stop()
	r.closeQueue()
	wg.Wait()
	r.release()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// awaitConnection waits up to FailAfter for the client to be connected. It
// returns nil when connected or when ctx ends.
func (s *Scheduler) awaitConnection(ctx context.Context) error {
	start := s.clock.Now()
	for !s.nc.IsConnected() {
		if s.nc.IsClosed() {
			return fmt.Errorf("nats: run: the connection to %s is closed", s.url)
		}
		if waited := s.clock.Now().Sub(start); waited >= s.cfg.FailAfter {
			return fmt.Errorf("nats: run: not connected to %s after %s (reconnecting)%s", s.url, waited.Round(time.Millisecond), s.lastError())
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return nil
		}
	}
	return nil
}

// lastError returns ": <the client's last error>", or "" if none.
func (s *Scheduler) lastError() string {
	if err := s.nc.LastError(); err != nil {
		return ": " + err.Error()
	}
	return ""
}

// run is the state of one Run call.
type run struct {
	s       *Scheduler
	deliver hourglass.Deliver
	cons    *consumers

	// fetchers are the fetch loops running, by partition, each with the
	// cancel that stops it; stopped is set once consume returns. Guarded
	// by fmu. failed takes the first fetch loop's error.
	fmu      sync.Mutex
	fetchers map[int]context.CancelFunc
	fetchCtx context.Context
	stopped  bool
	fetchWG  sync.WaitGroup
	failed   chan error

	mu       sync.Mutex
	held     heldHeap      // waiting for their deadline, earliest first
	wakeAt   time.Time     // the deadline the holder sleeps towards
	wake     chan struct{} // tells the holder an earlier deadline arrived
	due      []*heldMsg    // waiting for a worker
	acks     []*heldMsg    // delivered, waiting for the sender
	naks     []nak         // waiting for the sender's next burst
	closed   bool          // workers stop
	failures int           // consecutive failed deliveries
	ready    chan struct{} // holds a token while due is non-empty or closed
	ackReady chan struct{} // holds a token while acks is non-empty
}

// heldMsg is a fetched message this process is responsible for.
type heldMsg struct {
	msg     jetstream.Msg
	timer   hourglass.DueItem
	touched time.Time // received, or last reported in progress
}

// heldHeap is a min-heap of held messages by deadline (container/heap).
type heldHeap []*heldMsg

func (h heldHeap) Len() int           { return len(h) }
func (h heldHeap) Less(i, j int) bool { return h[i].timer.At.Before(h[j].timer.At) }
func (h heldHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *heldHeap) Push(x any)        { *h = append(*h, x.(*heldMsg)) }
func (h *heldHeap) Pop() any {
	old := *h
	m := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return m
}

// nak is a negative acknowledgement waiting to be sent: the server is to
// redeliver msg at until (the delay is computed when it is sent, so time
// spent in the buffer does not make the message come back late).
type nak struct {
	msg   jetstream.Msg
	until time.Time
}

func (r *run) pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.held) + len(r.due)
}

// consume runs a fetch loop on the consumer of each owned partition, and
// one on the unpartitioned consumer of earlier versions, until ctx ends
// (nil) or one of them cannot go on (its error). Own starts and stops the
// partitions' loops meanwhile (reown).
func (r *run) consume(ctx context.Context) error {
	r.fmu.Lock()
	r.fetchCtx = ctx
	r.fmu.Unlock()
	if r.cons.legacy != nil {
		r.fetchWG.Add(1)
		go func() {
			defer r.fetchWG.Done()
			r.fetchLoop(ctx, r.cons.legacy, r.forward)
		}()
	}
	r.reown()
	var err error
	select {
	case <-ctx.Done():
	case err = <-r.failed:
	}
	r.fmu.Lock()
	r.stopped = true
	for p, stop := range r.fetchers {
		stop()
		delete(r.fetchers, p)
	}
	r.fmu.Unlock()
	r.fetchWG.Wait()
	return err
}

// reown follows the partitions owned: it starts the fetch loops of those
// gained, stops those of the partitions lost, and hands back the messages
// of lost partitions held or waiting for a worker (a held one with a delay
// that brings it back inside the hold window, a due one at once), for the
// new owner. It does not block.
func (r *run) reown() {
	s := r.s
	r.fmu.Lock()
	if r.fetchCtx != nil && !r.stopped {
		mask := s.owned.Load()
		for p := range hourglass.Partitions {
			owned := mask>>p&1 == 1
			stop, running := r.fetchers[p]
			switch {
			case owned && !running:
				ctx, cancel := context.WithCancel(r.fetchCtx)
				r.fetchers[p] = cancel
				cons := r.cons.parts[p]
				r.fetchWG.Add(1)
				go func() {
					defer r.fetchWG.Done()
					r.fetchLoop(ctx, cons, r.accept)
				}()
			case !owned && running:
				stop()
				delete(r.fetchers, p)
			}
		}
	}
	r.fmu.Unlock()

	now := s.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	kept := r.held[:0]
	for _, h := range r.held {
		if s.owns(h.timer.ID) {
			kept = append(kept, h)
			continue
		}
		r.naks = append(r.naks, nak{msg: h.msg, until: h.timer.At.Add(-s.cfg.NakLead)})
	}
	clear(r.held[len(kept):])
	r.held = kept
	heap.Init(&r.held)
	r.due = slices.DeleteFunc(r.due, func(h *heldMsg) bool {
		if s.owns(h.timer.ID) {
			return false
		}
		r.naks = append(r.naks, nak{msg: h.msg, until: now})
		return true
	})
}

// fetchLoop runs fetch on cons until ctx ends; an error of fetch stops the
// whole Run (failed).
func (r *run) fetchLoop(ctx context.Context, cons jetstream.Consumer, take func(jetstream.Msg)) {
	if err := r.fetch(ctx, cons, take); err != nil {
		select {
		case r.failed <- err:
		default:
		}
	}
}

// forward moves a message of the unpartitioned consumer of earlier versions
// to its timer's partition subject, and acknowledges it once the server
// stored the copy (a failed publish is negatively acknowledged, to be
// moved again). The copy's Nats-Msg-Id differs from the original's, which
// the duplicate window may still hold.
func (r *run) forward(m jetstream.Msg) {
	s := r.s
	t, err := decodeTimer(m.Data())
	if err != nil {
		s.log.Error("nats: dropping a malformed timer message", "subject", m.Subject(), "err", err)
		if err := m.Term(); err != nil {
			s.log.Warn("nats: terminate malformed message", "err", err)
		}
		return
	}
	msg, opts := s.timerMsg(t, s.clock.Now(), s.schedules.Load(), "@p")
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.PublishTimeout)
	defer cancel()
	if _, err := s.js.PublishMsg(ctx, msg, opts...); err != nil {
		s.log.Warn("nats: could not move a timer of the unpartitioned subject to its partition; retrying", "order", t.ID, "err", err)
		_ = m.NakWithDelay(time.Second)
		return
	}
	if err := m.Ack(); err != nil {
		s.log.Debug("nats: ack of a moved timer failed; it is moved again (a duplicate)", "order", t.ID, "err", err)
	}
}

// fetch pulls messages from cons and hands each to take, until ctx ends
// (nil) or fetching cannot go on.
func (r *run) fetch(ctx context.Context, cons jetstream.Consumer, take func(jetstream.Msg)) error {
	s := r.s
	var downSince, failingSince time.Time
	for ctx.Err() == nil {
		now := s.clock.Now()
		if s.nc.IsClosed() {
			return fmt.Errorf("nats: fetch timers: the connection to %s was closed", s.url)
		}
		if !s.nc.IsConnected() {
			if downSince.IsZero() {
				downSince = now
			}
			if down := now.Sub(downSince); down >= s.cfg.FailAfter {
				return fmt.Errorf("nats: fetch timers: disconnected from %s for %s (reconnecting)%s", s.url, down.Round(time.Millisecond), s.lastError())
			}
			sleep(ctx, 50*time.Millisecond)
			continue
		}
		downSince = time.Time{}
		err := r.fetchBatch(cons, take)
		switch {
		case err == nil:
			failingSince = time.Time{}
		case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrStreamNotFound):
			return fmt.Errorf("nats: fetch timers from consumer %s of stream %s: %w", cons.CachedInfo().Name, cons.CachedInfo().Stream, err)
		default:
			if failingSince.IsZero() {
				failingSince = now
			}
			if failing := now.Sub(failingSince); failing >= s.cfg.FailAfter {
				return fmt.Errorf("nats: fetch timers from consumer %s: failing for %s: %w", cons.CachedInfo().Name, failing.Round(time.Millisecond), err)
			}
			s.log.Warn("nats: fetch failed; retrying", "consumer", cons.CachedInfo().Name, "err", err)
			sleep(ctx, 100*time.Millisecond)
		}
	}
	return nil
}

// partFetchMax caps each pull request. A request the server has not filled
// stays open until FetchWait; on NATS 2.9 messages published meanwhile
// reached it late (a burst of 10,000 timers over the 64 partitions, 156
// each, asked for 500 at a time: its last ones 1.7-2 s after their
// deadline; 50 at a time: 0.7 s, the time the publishing itself took).
const partFetchMax = 64

// fetchBatch runs one pull request to its end (at most FetchWait and a
// second): a batch cut short at shutdown would leave messages delivered to
// nobody until AckWait.
func (r *run) fetchBatch(cons jetstream.Consumer, take func(jetstream.Msg)) error {
	batch, err := cons.Fetch(min(r.s.cfg.FetchBatch, partFetchMax), jetstream.FetchMaxWait(r.s.cfg.FetchWait))
	if err != nil {
		return err
	}
	for m := range batch.Messages() {
		take(m)
	}
	err = batch.Error()
	if errors.Is(err, natsgo.ErrTimeout) || errors.Is(err, jetstream.ErrNoMessages) {
		return nil
	}
	return err
}

// accept sorts a fetched message: deliver now, hold until its deadline, or
// hand back with a delay (and at once, for its owner, one of a partition
// lost since the fetch began).
func (r *run) accept(m jetstream.Msg) {
	s := r.s
	t, err := decodeTimer(m.Data())
	if err != nil {
		s.log.Error("nats: dropping a malformed timer message", "subject", m.Subject(), "err", err)
		if err := m.Term(); err != nil {
			s.log.Warn("nats: terminate malformed message", "err", err)
		}
		return
	}
	now := s.clock.Now()
	h := &heldMsg{msg: m, timer: t, touched: now}
	act, wait := classify(now, t.At, s.cfg.HoldWindow, s.cfg.NakLead)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !s.owns(t.ID) {
		r.naks = append(r.naks, nak{msg: m, until: now})
		return
	}
	switch act {
	case deliverNow:
		r.pushLocked(h)
	case holdLocal:
		heap.Push(&r.held, h)
		if t.At.Before(r.wakeAt) {
			select {
			case r.wake <- struct{}{}:
			default:
			}
		}
	case nakLater:
		r.naks = append(r.naks, nak{msg: m, until: now.Add(wait)})
	}
}

// hold is the one local timer: it sleeps until the earliest held deadline
// (or until accept holds an earlier one) and moves every message whose
// deadline the clock has reached to the due queue, so 10,000 timers due in
// one millisecond cost one wake-up, not 10,000.
func (r *run) hold(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := r.s.clock.Now()
		wait := time.Hour
		r.mu.Lock()
		moved := false
		for len(r.held) > 0 && !r.held[0].timer.At.After(now) {
			r.due = append(r.due, heap.Pop(&r.held).(*heldMsg))
			moved = true
		}
		r.wakeAt = now.Add(wait)
		if len(r.held) > 0 {
			r.wakeAt = r.held[0].timer.At
			wait = r.wakeAt.Sub(now)
		}
		r.mu.Unlock()
		if moved {
			r.signal()
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-r.wake:
		}
	}
}

func (r *run) pushLocked(h *heldMsg) {
	r.due = append(r.due, h)
	r.signal()
}

func (r *run) signal() {
	select {
	case r.ready <- struct{}{}:
	default:
	}
}

func (r *run) closeQueue() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.signal()
}

// pop blocks until due messages are queued and returns up to DeliverBatch
// of them; ok is false once the queue is closed.
func (r *run) pop() (batch []*heldMsg, ok bool) {
	for {
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			r.signal() // wake the other workers too
			return nil, false
		}
		if n := min(r.s.cfg.DeliverBatch, len(r.due)); n > 0 {
			batch = slices.Clone(r.due[:n])
			if n == len(r.due) {
				r.due = nil
			} else {
				r.due = r.due[n:]
			}
			more := len(r.due) > 0
			r.mu.Unlock()
			if more {
				r.signal()
			}
			return batch, true
		}
		r.mu.Unlock()
		<-r.ready
	}
}

// work delivers due batches: acknowledge on success, negatively acknowledge
// with a growing delay on failure.
func (r *run) work(ctx context.Context) {
	s := r.s
	timers := make([]hourglass.DueItem, 0, s.cfg.DeliverBatch)
	for {
		batch, ok := r.pop()
		if !ok {
			return
		}
		// Messages of a partition lost since they were sorted go back to
		// the server for its new owner.
		if lost := r.dropLost(&batch); lost && len(batch) == 0 {
			continue
		}
		r.keepAlive(batch)
		timers = timers[:0]
		for _, h := range batch {
			timers = append(timers, h.timer)
		}
		err := r.deliver(ctx, timers)
		if err == nil {
			// Acknowledging is left to the sender so that a server slow to
			// take acknowledgements does not hold up the next delivery.
			r.mu.Lock()
			r.failures = 0
			r.acks = append(r.acks, batch...)
			r.mu.Unlock()
			select {
			case r.ackReady <- struct{}{}:
			default:
			}
			continue
		}
		r.mu.Lock()
		r.failures++
		delay := retryDelay(r.failures, s.cfg.RetryMax)
		if ctx.Err() != nil {
			delay = 0 // shutting down: let another consumer retry now
		}
		until := s.clock.Now().Add(delay)
		for _, h := range batch {
			r.naks = append(r.naks, nak{msg: h.msg, until: until})
		}
		r.mu.Unlock()
		if ctx.Err() == nil {
			s.log.Error("nats: delivery failed; redelivering", "timers", len(batch), "retry_in", delay, "err", err)
		}
	}
}

// dropLost removes from *batch the messages of partitions no longer owned,
// to be handed back at once, and reports whether there were any.
func (r *run) dropLost(batch *[]*heldMsg) bool {
	s := r.s
	var lost []nak
	now := s.clock.Now()
	*batch = slices.DeleteFunc(*batch, func(h *heldMsg) bool {
		if s.owns(h.timer.ID) {
			return false
		}
		lost = append(lost, nak{msg: h.msg, until: now})
		return true
	})
	if len(lost) == 0 {
		return false
	}
	r.mu.Lock()
	r.naks = append(r.naks, lost...)
	r.mu.Unlock()
	return true
}

// keepAlive tells the server the messages of a batch that waited long (a
// slow or failing close path) are still in progress, so it does not hand
// them to another consumer meanwhile.
func (r *run) keepAlive(batch []*heldMsg) {
	now := r.s.clock.Now()
	for _, h := range batch {
		if now.Sub(h.touched) >= r.s.cfg.AckWait/2 {
			_ = h.msg.InProgress()
			h.touched = now
		}
	}
}

// send acknowledges delivered messages as soon as there are any, and sends
// the buffered negative acknowledgements every NakPacing, in bursts: a NATS
// 2.9 server postpones its redelivery scan while acknowledgements keep
// arriving, and needs the quiet gaps between bursts.
func (r *run) send(ctx context.Context) {
	t := time.NewTicker(r.s.cfg.NakPacing)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.ackReady:
			r.mu.Lock()
			acks := r.acks
			r.acks = nil
			r.mu.Unlock()
			r.sendAcks(acks)
		case <-t.C:
			r.mu.Lock()
			naks := r.naks
			r.naks = nil
			r.mu.Unlock()
			r.sendNaks(naks)
		}
	}
}

func (r *run) sendAcks(acks []*heldMsg) {
	for _, h := range acks {
		if err := h.msg.Ack(); err != nil {
			r.s.log.Debug("nats: ack failed; the timer will be redelivered into a no-op close", "order", h.timer.ID, "err", err)
		}
	}
}

func (r *run) sendNaks(naks []nak) {
	if len(naks) == 0 {
		return
	}
	now := r.s.clock.Now()
	for _, n := range naks {
		var err error
		if delay := n.until.Sub(now); delay > 0 {
			err = n.msg.NakWithDelay(delay)
		} else {
			err = n.msg.Nak()
		}
		if err != nil {
			r.s.log.Debug("nats: nak failed; the server redelivers after the ack wait", "err", err)
		}
	}
}

// release sends the acknowledgements still buffered and hands every message
// still held back to the server when Run ends: a held one with a delay that
// brings it back inside the hold window, a due one at once. Workers, the
// holder and the sender must have stopped.
func (r *run) release() {
	s := r.s
	now := s.clock.Now()
	r.mu.Lock()
	acks, naks := r.acks, r.naks
	for _, h := range r.held {
		naks = append(naks, nak{msg: h.msg, until: h.timer.At.Add(-s.cfg.NakLead)})
	}
	for _, h := range r.due {
		naks = append(naks, nak{msg: h.msg, until: now})
	}
	r.held, r.due, r.acks, r.naks = nil, nil, nil, nil
	r.mu.Unlock()
	r.sendAcks(acks)
	r.sendNaks(naks)
	if len(acks)+len(naks) > 0 && s.nc.IsConnected() {
		if err := s.nc.FlushTimeout(time.Second); err != nil {
			s.log.Debug("nats: flush on release", "err", err)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
