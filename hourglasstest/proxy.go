package hourglasstest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections from a loopback port to a service, so a
// test can cut a client off the service without stopping the service (which
// other tests may be using). Cut closes every forwarded connection and
// refuses new ones until Restore. Safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	mu     sync.Mutex
	down   bool
	conns  []net.Conn
}

// NewProxy listens on 127.0.0.1 and forwards to target (host:port). It is
// closed in t.Cleanup.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{target: target, ln: ln}
	t.Cleanup(func() { ln.Close(); p.Cut() })
	go p.accept()
	return p
}

// Addr is the proxy's host:port, to give the client instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			in.Close()
			continue
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			in.Close()
			continue
		}
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		go pipe(in, out)
		go pipe(out, in)
	}
}

func pipe(dst, src net.Conn) {
	io.Copy(dst, src) // ends when either side is closed
	dst.Close()
	src.Close()
}

// Cut closes every forwarded connection and refuses new ones.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Restore accepts connections again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}
