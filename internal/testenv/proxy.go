package testenv

import (
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections from a loopback port to a service, so a
// test can cut a client off the service without stopping the service (which
// other tests may be using). Cut closes every forwarded connection and
// refuses new ones until Restore; Hold stops forwarding without closing
// anything (a stalled network) until Release. Safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	mu     sync.Mutex
	down   bool
	conns  []net.Conn
	held   chan struct{} // non-nil while held: closed by Release
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
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

// pipe copies src to dst until either side is closed, holding each read's
// bytes while the proxy is held.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			held := p.held
			p.mu.Unlock()
			if held != nil {
				<-held
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Hold stops forwarding: connections old and new stay open, nothing is
// refused or closed, and the bytes either side sends wait in the proxy
// until Release (or Cut, which closes them). A client sees a database that
// neither answers nor fails.
func (p *Proxy) Hold() {
	p.mu.Lock()
	if p.held == nil {
		p.held = make(chan struct{})
	}
	p.mu.Unlock()
}

// Release forwards again, the held bytes first.
func (p *Proxy) Release() {
	p.mu.Lock()
	if p.held != nil {
		close(p.held)
		p.held = nil
	}
	p.mu.Unlock()
}

// Cut closes every forwarded connection and refuses new ones (it ends a
// Hold: the held bytes are dropped).
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	if p.held != nil {
		close(p.held)
		p.held = nil
	}
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
