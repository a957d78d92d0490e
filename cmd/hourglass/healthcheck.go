package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// healthcheckCmd probes a running server's /readyz, for a container's
// health check: the image has no curl. It reads the address from
// HOURGLASS_ADDR like serve, so one environment configures both.
type healthcheckCmd struct {
	Addr    string        `help:"The server's address (a wildcard host is probed on 127.0.0.1)." default:"127.0.0.1:8080" env:"HOURGLASS_ADDR"`
	Path    string        `help:"The path to probe." default:"/readyz"`
	Timeout time.Duration `help:"How long the probe may take." default:"3s"`
}

// AfterApply runs the probe once kong has parsed the command line, and
// exits: 0 when the server answers 200, 1 otherwise with the reason on
// stderr. It runs here rather than in main's switch, so the command is one
// line in the CLI struct and this file.
func (h *healthcheckCmd) AfterApply() error {
	if err := h.probe(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "hourglass healthcheck: "+err.Error())
		os.Exit(1)
	}
	os.Exit(0)
	return nil
}

// probe GETs the path on the address and returns nil for a 200, or an
// error naming the status and the server's message.
func (h *healthcheckCmd) probe(ctx context.Context) error {
	host, port, err := net.SplitHostPort(h.Addr)
	if err != nil {
		return fmt.Errorf("--addr %q: %w", h.Addr, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	ctx, cancel := context.WithTimeout(ctx, h.Timeout)
	defer cancel()
	url := "http://" + net.JoinHostPort(host, port) + h.Path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}
