package api

import (
	"context"
	"net"
	"sync"
	"time"
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

// byteBudget bounds the bytes of request bodies held at once: a request
// reserves its body's size before reading it and returns it when answered.
// It is safe for concurrent use.
type byteBudget struct {
	mu      sync.Mutex
	free    int64
	changed chan struct{} // closed and replaced whenever bytes are returned
}

func newByteBudget(n int64) *byteBudget {
	return &byteBudget{free: n, changed: make(chan struct{})}
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
		b.mu.Unlock()
		if timeout == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-changed:
		case <-timeout:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// release returns n bytes.
func (b *byteBudget) release(n int64) {
	b.mu.Lock()
	b.free += n
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}
