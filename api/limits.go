package api

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
)

// LimitConnections returns a listener that has at most n connections open
// at once: Accept waits while n are open (further clients wait in the
// kernel's backlog), so a flood of idle keep-alive connections cannot
// exhaust the process's file descriptors. It behaves like
// golang.org/x/net/netutil.LimitListener and is safe for concurrent use.
func LimitConnections(l net.Listener, n int) net.Listener {
	return &limitListener{Listener: l, slots: make(chan struct{}, n), done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	slots     chan struct{} // one token per open connection
	closeOnce sync.Once
	done      chan struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// byteBudget bounds the bytes requests hold at once, their bodies and the
// responses they build (hold): a request reserves bytes before it allocates
// them and returns them when answered.
// It is safe for concurrent use.
type byteBudget struct {
	mu      sync.Mutex
	size    int64 // the bytes in all
	free    int64
	waiting int           // acquires waiting on changed
	changed chan struct{} // closed and replaced when bytes are returned while some wait
}

func newByteBudget(n int64) *byteBudget {
	return &byteBudget{size: n, free: n, changed: make(chan struct{})}
}

// acquire reserves n bytes, waiting up to wait for others to return theirs;
// it reports whether it did.
func (b *byteBudget) acquire(ctx context.Context, n int64, wait time.Duration) bool {
	var timeout <-chan time.Time
	for {
		b.mu.Lock()
		if b.free >= n {
			b.free -= n
			b.mu.Unlock()
			return true
		}
		changed := b.changed
		b.waiting++
		b.mu.Unlock()
		if timeout == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			timeout = t.C
		}
		var woken bool
		select {
		case <-changed:
			woken = true
		case <-timeout:
		case <-ctx.Done():
		}
		b.mu.Lock()
		b.waiting--
		b.mu.Unlock()
		if !woken {
			return false
		}
	}
}

// release returns n bytes and wakes the acquires waiting, if any: every
// request returns its bytes, and most find no one waiting.
func (b *byteBudget) release(n int64) {
	b.mu.Lock()
	b.free += n
	if b.waiting > 0 {
		close(b.changed)
		b.changed = make(chan struct{})
	}
	b.mu.Unlock()
}

// Pace of request bodies.
const (
	// MinBodyRate is the slowest a request body may arrive, in bytes per
	// second, once BodyGrace has passed: a client trickling its body would
	// otherwise hold a connection and its share of the byte budget for the
	// whole read timeout. It is Apache mod_reqtimeout's model: the body's
	// deadline starts BodyGrace after its first read and moves one second
	// later for every MinBodyRate bytes received, so a client may catch up
	// after a pause but never falls below the rate on average.
	MinBodyRate = 64 << 10
	// BodyGrace is how long a body may take before MinBodyRate applies.
	BodyGrace = time.Second
)

// bodyChunk is the smallest step in which a body's or a page's buffer grows
// (and is reserved): a client holds no more of the budget than it has sent,
// plus one chunk.
const bodyChunk = 64 << 10

// errBodyTooSlow is a request_timeout: the body fell below MinBodyRate.
var errBodyTooSlow = hourglass.Errorf(hourglass.CodeRequestTimeout,
	"request body arrived slower than %d bytes per second after its first %s; the request was cut", MinBodyRate, BodyGrace)

// bodyPacer reads a request body no slower than MinBodyRate after
// BodyGrace. Before each read it moves the connection's read deadline to the
// moment the body would fall behind (start + BodyGrace + read/MinBodyRate),
// so a stalled client is cut by the deadline, not only when its next byte
// comes; where the connection has no deadlines (http.ErrNotSupported) it
// checks the pace after each read instead.
//
// Deadlines are in the system clock, as net.Conn's are, not in the server's
// Clock (which may be a database's or a test's). Not safe for concurrent use.
type bodyPacer struct {
	body  io.Reader
	rc    http.ResponseController
	start time.Time
	read  int64
	noDL  bool // the connection takes no read deadlines
}

func newBodyPacer(w http.ResponseWriter, body io.Reader) *bodyPacer {
	// The controller is held by value, in the pacer readBody keeps on its
	// stack: NewResponseController's pointer would cost every request an
	// allocation.
	return &bodyPacer{body: body, rc: *http.NewResponseController(w), start: time.Now()}
}

// due returns when the body falls behind the pace.
func (p *bodyPacer) due() time.Time {
	return p.start.Add(BodyGrace + time.Duration(float64(p.read)/MinBodyRate*float64(time.Second)))
}

// pause moves the pace's start by d: time spent waiting for the server (for
// room in the budget) is not the client's.
func (p *bodyPacer) pause(d time.Duration) { p.start = p.start.Add(d) }

func (p *bodyPacer) Read(b []byte) (int, error) {
	if !p.noDL {
		if err := p.rc.SetReadDeadline(p.due()); errors.Is(err, http.ErrNotSupported) {
			p.noDL = true
		}
	}
	n, err := p.body.Read(b)
	p.read += int64(n)
	if errors.Is(err, os.ErrDeadlineExceeded) || (err == nil && time.Now().After(p.due())) {
		return n, errBodyTooSlow
	}
	return n, err
}

// done lifts the deadline once the body is read whole: the handler's work
// after it is not the client's to pace, and a deadline passing then would
// cancel the request's context (the server's background read fails). A body
// cut short keeps its deadline: nothing more is to be read from it, and the
// connection is closed after the answer.
func (p *bodyPacer) done() {
	if !p.noDL {
		p.rc.SetReadDeadline(time.Time{})
	}
}

// hold is what one request holds of the server's byte budget: its body and
// the response it builds. Everything is returned at once when the request
// has been answered. Not safe for concurrent use (one request's goroutine).
type hold struct {
	budget *byteBudget
	n      int64
}

// take reserves n bytes, waiting up to wait; it reports whether it did.
func (h *hold) take(ctx context.Context, n int64, wait time.Duration) bool {
	if n <= 0 {
		return true
	}
	if !h.budget.acquire(ctx, n, wait) {
		return false
	}
	h.n += n
	return true
}

// give returns n of the bytes held.
func (h *hold) give(n int64) {
	if n <= 0 {
		return
	}
	h.n -= n
	h.budget.release(n)
}

// releaseAll returns every byte held.
func (h *hold) releaseAll() { h.give(h.n) }

type holdKey struct{}

// holdOf returns the request's hold (wrap puts one in every request's
// context).
func holdOf(r *http.Request) *hold { return r.Context().Value(holdKey{}).(*hold) }

// heldBuffer is a byte slice whose capacity is held in a request's budget:
// it grows by doubling, from bodyChunk, and reserves each new capacity
// before allocating it. Not safe for concurrent use.
type heldBuffer struct {
	b    []byte
	h    *hold
	held int // the bytes of b's capacity held in h
}

// ensure makes room for n more bytes, growing to at most limit (which must
// be at least len+n). It reports false, leaving the buffer as it was, when
// the budget had no room within wait.
func (hb *heldBuffer) ensure(ctx context.Context, n, limit int, wait time.Duration) bool {
	need := len(hb.b) + n
	if need <= hb.held {
		return true
	}
	newCap := min(max(2*hb.held, need, bodyChunk), limit)
	if !hb.h.take(ctx, int64(newCap), wait) {
		return false
	}
	nb := make([]byte, len(hb.b), newCap)
	copy(nb, hb.b)
	hb.h.give(int64(hb.held))
	hb.b, hb.held = nb, newCap
	return true
}

// readBody reads r's body (at most MaxBodyBytes) at the pace bodyPacer
// sets, into a buffer held in h that grows as bytes arrive: a client that
// announces a large body and sends little holds little. Errors:
// payload_too_large, request_timeout (too slow), unavailable (no room in
// the budget within BodyWait), invalid_argument (the body broke off).
func readBody(w http.ResponseWriter, r *http.Request, h *hold) ([]byte, error) {
	if r.ContentLength > MaxBodyBytes {
		return nil, hourglass.Errorf(hourglass.CodePayloadTooLarge, "request body exceeds %d bytes", MaxBodyBytes)
	}
	// Of unknown length, read one byte past the most it may be, to tell.
	limit := MaxBodyBytes + 1
	if r.ContentLength >= 0 {
		limit = int(r.ContentLength)
	}
	pacer := newBodyPacer(w, r.Body)
	buf := heldBuffer{h: h}
	for len(buf.b) < limit {
		if len(buf.b) == buf.held {
			start := time.Now()
			ok := buf.ensure(r.Context(), min(bodyChunk, limit-len(buf.b)), limit, BodyWait)
			pacer.pause(time.Since(start))
			if !ok {
				return nil, hourglass.Errorf(hourglass.CodeUnavailable, "too many request bodies in flight; retry shortly")
			}
		}
		n, err := pacer.Read(buf.b[len(buf.b):buf.held])
		buf.b = buf.b[:len(buf.b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			if errors.Is(err, errBodyTooSlow) {
				return nil, err
			}
			return nil, hourglass.Errorf(hourglass.CodeInvalidArgument, "reading request body: %s", err)
		}
	}
	if len(buf.b) > MaxBodyBytes {
		return nil, hourglass.Errorf(hourglass.CodePayloadTooLarge, "request body exceeds %d bytes", MaxBodyBytes)
	}
	if r.ContentLength >= 0 && len(buf.b) < limit {
		return nil, hourglass.Errorf(hourglass.CodeInvalidArgument, "reading request body: %s", io.ErrUnexpectedEOF)
	}
	pacer.done()
	return buf.b, nil
}
