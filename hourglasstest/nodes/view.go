package nodes

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
)

// View is the answer of GET /v1/cluster: the nodes alive within the lease
// TTL and the partitions each owns, as one node sees them.
type View struct {
	Partitions int        `json:"partitions"`
	Nodes      []ViewNode `json:"nodes"`
}

// ViewNode is one node of a View.
type ViewNode struct {
	ID         string `json:"id"`
	Addr       string `json:"addr"`
	StartedAt  string `json:"started_at"`
	LastSeen   string `json:"last_seen"`
	Partitions []int  `json:"partitions"`
	Self       bool   `json:"self"`
}

// Owner returns the id of the node that owns partition p, or "" if none
// does.
func (v View) Owner(p int) string {
	for _, n := range v.Nodes {
		if slices.Contains(n.Partitions, p) {
			return n.ID
		}
	}
	return ""
}

// Owned returns the partitions node id owns.
func (v View) Owned(id string) []int {
	for _, n := range v.Nodes {
		if n.ID == id {
			return slices.Clone(n.Partitions)
		}
	}
	return nil
}

// Unowned returns the partitions no node owns.
func (v View) Unowned() []int {
	var out []int
	for p := range cmp.Or(v.Partitions, hourglass.Partitions) {
		if v.Owner(p) == "" {
			out = append(out, p)
		}
	}
	return out
}

// Summary is a short line: each node with how many partitions it owns.
func (v View) Summary() string {
	var parts []string
	for _, n := range v.Nodes {
		parts = append(parts, fmt.Sprintf("%s:%d", n.ID, len(n.Partitions)))
	}
	if u := v.Unowned(); len(u) > 0 {
		parts = append(parts, fmt.Sprintf("unowned:%d", len(u)))
	}
	return strings.Join(parts, " ")
}

// ErrNoClusterAPI is returned by Node.View when the binary has no
// /v1/cluster (it is from before issue 9).
var ErrNoClusterAPI = errors.New("nodes: the binary has no GET /v1/cluster")

var probeClient = &http.Client{Timeout: 2 * time.Second}

// View returns the cluster as the node sees it (GET /v1/cluster). Errors:
// ErrNoClusterAPI on a 404, otherwise what the request or decoding met.
func (n *Node) View(ctx context.Context) (View, error) {
	var v View
	body, status, err := get(ctx, n.URL()+"/v1/cluster")
	switch {
	case err != nil:
		return v, fmt.Errorf("nodes: %s: GET /v1/cluster: %w", n.ID(), err)
	case status == http.StatusNotFound:
		return v, ErrNoClusterAPI
	case status != http.StatusOK:
		return v, fmt.Errorf("nodes: %s: GET /v1/cluster: %d %s", n.ID(), status, body)
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return v, fmt.Errorf("nodes: %s: GET /v1/cluster: %w", n.ID(), err)
	}
	return v, nil
}

// Metrics returns the node's Prometheus metrics (GET /metrics), each name's
// samples summed over their labels.
func (n *Node) Metrics(ctx context.Context) (map[string]float64, error) {
	samples, err := n.Samples(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for name, v := range samples {
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name = name[:j]
		}
		out[name] += v
	}
	return out, nil
}

// Samples returns the node's Prometheus samples (GET /metrics) by their
// name and labels as exposed, e.g. `hourglass_db_retries_total{reason="certification"}`.
func (n *Node) Samples(ctx context.Context) (map[string]float64, error) {
	body, status, err := get(ctx, n.URL()+"/metrics")
	if err != nil || status != http.StatusOK {
		return nil, fmt.Errorf("nodes: %s: GET /metrics: %d %v", n.ID(), status, err)
	}
	return parseSamples(body)
}

// parseSamples reads Prometheus's text format: one sample a line, the value
// after the last space; comments and unparsable values are skipped.
func parseSamples(body []byte) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] += v
	}
	return out, sc.Err()
}

func get(ctx context.Context, url string) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := probeClient.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	return body, resp.StatusCode, err
}

// View returns the cluster as the first live node that answers sees it.
func (c *Cluster) View(ctx context.Context) (View, *Node, error) {
	var errs []error
	for _, n := range c.Live() {
		v, err := n.View(ctx)
		if err == nil {
			return v, n, nil
		}
		if errors.Is(err, ErrNoClusterAPI) {
			return v, n, err
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return View{}, nil, errors.New("nodes: no live node to ask for /v1/cluster")
	}
	return View{}, nil, errors.Join(errs...)
}

// pollInterval is how often the Wait methods ask /v1/cluster: it is the
// resolution of the takeover times they measure.
const pollInterval = 20 * time.Millisecond

// WaitBalanced waits until every partition is owned and the live nodes'
// shares are fair (they differ by at most one partition), as the live
// nodes see it, and returns that view.
func (c *Cluster) WaitBalanced(ctx context.Context, timeout time.Duration) (View, error) {
	return c.waitView(ctx, timeout, func(v View) bool {
		if len(v.Unowned()) > 0 {
			return false
		}
		least, most := hourglass.Partitions, 0
		for _, n := range c.Live() {
			k := len(v.Owned(n.ID()))
			least, most = min(least, k), max(most, k)
		}
		return least > 0 && most-least <= 1
	})
}

// WaitTakenOver waits until none of parts is owned by gone (a node that was
// killed, terminated or paused) or unowned, and every one is owned by a
// live node, as the live nodes see it. It returns the time from since to
// the first view that shows it, to pollInterval, and that view.
func (c *Cluster) WaitTakenOver(ctx context.Context, since time.Time, gone string, parts []int, timeout time.Duration) (time.Duration, View, error) {
	v, err := c.waitView(ctx, timeout, func(v View) bool {
		live := map[string]bool{}
		for _, n := range c.Live() {
			live[n.ID()] = true
		}
		for _, p := range parts {
			if o := v.Owner(p); o == "" || o == gone || !live[o] {
				return false
			}
		}
		return true
	})
	return time.Since(since), v, err
}

func (c *Cluster) waitView(ctx context.Context, timeout time.Duration, done func(View) bool) (View, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last View
	var lastErr error
	for {
		v, _, err := c.View(ctx)
		if errors.Is(err, ErrNoClusterAPI) {
			return v, err
		}
		if err == nil {
			last = v
			if done(v) {
				return v, nil
			}
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("nodes: not within %s; last view: %s (last error: %v)", timeout, last.Summary(), lastErr)
		case <-time.After(pollInterval):
		}
	}
}
