package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// MaxHeaderBytes bounds a request's header block: the API's headers are a
// token, a content type and an idempotency key, far below it.
const MaxHeaderBytes = 16 << 10

// newHTTPServer returns the API's http.Server: timeouts against slow
// clients and a small header limit (a larger header block is a 431).
func newHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// loopback reports whether addr, a listener's address, accepts only
// connections from this machine (127.0.0.0/8, ::1); 0.0.0.0 and :: do not.
func loopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// startDebug serves the pprof handlers on addr until ctx ends, when addr
// is set. It returns a one-line error when addr cannot be listened on.
func startDebug(ctx context.Context, addr string, log *slog.Logger) error {
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--debug-addr %s: %w", addr, err)
	}
	if !loopback(ln.Addr()) {
		log.Warn("hourglass: --debug-addr is not a loopback address: anyone who can reach it can read profiles of this process", "addr", ln.Addr().String())
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	// A CPU profile or a trace takes as long as its seconds parameter.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 10 * time.Minute}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("hourglass: the --debug-addr listener stopped", "err", err)
		}
	}()
	context.AfterFunc(ctx, func() { srv.Close() })
	log.Info("hourglass: serving profiles", "url", "http://"+ln.Addr().String()+"/debug/pprof/")
	return nil
}
