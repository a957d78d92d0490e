package main

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

// debugFlags are the settings of the profiling listener.
type debugFlags struct {
	DebugAddr string `help:"Serve Go's runtime profiles (/debug/pprof/: CPU, heap, goroutines) on this address, apart from the API and without its token; empty: off. Bind it to loopback: profiles show what the process does." env:"HOURGLASS_DEBUG_ADDR"`
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
