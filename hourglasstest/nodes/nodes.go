// Package nodes runs several `hourglass serve` processes of a built binary on
// one shared database, as a cluster, breaks them on purpose (SIGKILL,
// SIGTERM, SIGSTOP) while a load of creates and payments (and, if asked,
// timer arms, re-arms and cancels) goes to the live ones, and judges the
// outcome from the database: no acknowledged order lost, none closed
// early, twice or later than a bound, none both paid and closed, stock
// conserved; every timer not cancelled fired once, at its last time, not
// early nor later than the bound, a cancelled one never.
//
// It is black-box on purpose: it knows the binary's flags, its HTTP API and
// the store package, nothing of the engine or the cluster package, so it
// checks the contract (issue 9), not an implementation. The integration
// tests in cmd/hourglass and the chaos soak command (cmd/hourglass-chaos)
// both drive it; it takes no testing.T, so it returns errors rather than
// failing a test (its waits on the wall clock are testenv.Until's, which
// end with the caller's context).
package nodes

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Defaults of Config.
const (
	// ReadyTimeoutDefault bounds a node's start, from exec to /readyz 200.
	ReadyTimeoutDefault = 30 * time.Second
	// TermTimeoutDefault bounds a SIGTERM's shutdown before Term gives up
	// and kills the process.
	TermTimeoutDefault = 20 * time.Second
)

// Build compiles the hourglass command into dir and returns the binary's
// path. It runs `go build` in the current directory, which must be inside
// the hourglass module (a test's package directory, or the repository when
// run with `go run`); elsewhere, build the binary yourself and pass its path.
func Build(ctx context.Context, dir string) (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("nodes: build: the go tool is not on PATH: %w", err)
	}
	bin := filepath.Join(dir, "hourglass")
	cmd := exec.CommandContext(ctx, goTool, "build", "-o", bin, "github.com/hourglass/hourglass/cmd/hourglass")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("nodes: go build (run it inside the hourglass module, or pass a binary): %w\n%s", err, out)
	}
	return bin, nil
}

// SupportsCluster reports whether the binary at bin knows the cluster flags
// of issue 9 (`serve --node-id`); a binary from before them runs as
// independent processes on one database (Config.OmitClusterFlags).
func SupportsCluster(ctx context.Context, bin string) (bool, error) {
	out, err := exec.CommandContext(ctx, bin, "serve", "--help").CombinedOutput()
	if err != nil {
		return false, fmt.Errorf("nodes: %s serve --help: %w\n%s", bin, err, out)
	}
	return bytes.Contains(out, []byte("--node-id")), nil
}

// Config describes the cluster Start runs. Binary, DatabaseURL (or
// DatabaseURLs) and LogDir are required; the zero value of every other
// field is its default.
type Config struct {
	// Binary is the path of the hourglass binary (see Build).
	Binary string
	// DatabaseURL is the --database-url every node shares: postgres://…
	// or mysql://….
	DatabaseURL string
	// DatabaseURLs, when not empty, gives each node its own --database-url:
	// node i uses DatabaseURLs[i % len], for a database that is one
	// cluster reached through several servers (MariaDB Galera: each
	// hourglass node on a different Galera node). Every URL must name the
	// same database; DatabaseURL may then be empty.
	DatabaseURLs []string
	// LeaseTTL is --lease-ttl; 0 leaves the binary's default.
	LeaseTTL time.Duration
	// LogDir receives each run of each node's output, as
	// <node id>.<run>.log, kept for failure reports.
	LogDir string
	// Args are more serve flags, given to every node after the harness's.
	Args []string
	// OmitClusterFlags leaves out --node-id and --lease-ttl, for a binary
	// from before issue 9 (see SupportsCluster): the processes then share
	// the database without dividing the work.
	OmitClusterFlags bool
	// ReadyTimeout bounds each start (default ReadyTimeoutDefault).
	ReadyTimeout time.Duration
	// TermTimeout bounds each SIGTERM shutdown (default TermTimeoutDefault).
	TermTimeout time.Duration
	// Logf receives a line per node event (start, ready, kill, …); nil
	// discards them.
	Logf func(format string, args ...any)
}

func (c Config) validate() error {
	switch {
	case c.Binary == "":
		return errors.New("nodes: Config.Binary is empty")
	case c.DatabaseURL == "" && len(c.DatabaseURLs) == 0:
		return errors.New("nodes: Config.DatabaseURL and Config.DatabaseURLs are empty")
	case slices.Contains(c.DatabaseURLs, ""):
		return errors.New("nodes: Config.DatabaseURLs holds an empty URL")
	case c.LogDir == "":
		return errors.New("nodes: Config.LogDir is empty")
	case c.LeaseTTL < 0:
		return fmt.Errorf("nodes: Config.LeaseTTL must be >= 0, got %s", c.LeaseTTL)
	}
	return nil
}

// NodeDatabaseURL returns the --database-url of the node of index i:
// DatabaseURLs[i % len] when DatabaseURLs is set, DatabaseURL otherwise.
func (c Config) NodeDatabaseURL(i int) string {
	if len(c.DatabaseURLs) > 0 {
		return c.DatabaseURLs[i%len(c.DatabaseURLs)]
	}
	return c.DatabaseURL
}

func (c Config) logf(format string, args ...any) {
	if c.Logf != nil {
		c.Logf(format, args...)
	}
}

// Cluster is a set of hourglass processes on one database. Its methods are
// safe for concurrent use.
type Cluster struct {
	cfg   Config
	run   string // a random tag shared by this cluster's node ids
	nodes []*Node
}

// Start starts n nodes and returns once every one answers /readyz with 200.
// The first node starts alone (it applies the schema's migrations), the
// others together. On error every node already started is killed.
func Start(ctx context.Context, cfg Config, n int) (*Cluster, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if n < 1 {
		return nil, fmt.Errorf("nodes: Start: want at least 1 node, got %d", n)
	}
	if err := os.MkdirAll(cfg.LogDir, 0o755); err != nil {
		return nil, fmt.Errorf("nodes: log directory: %w", err)
	}
	c := &Cluster{cfg: cfg, run: strings.ToLower(rand.Text()[:6])}
	for i := range n {
		id := fmt.Sprintf("node%d-%s", i, c.run)
		c.nodes = append(c.nodes, &Node{c: c, Index: i, base: id, id: id})
	}
	if err := c.nodes[0].start(ctx); err != nil {
		c.Close()
		return nil, err
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, nd := range c.nodes[1:] {
		wg.Go(func() { errs[i+1] = nd.start(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Config returns the configuration the cluster was started with.
func (c *Cluster) Config() Config { return c.cfg }

// Nodes returns every node, running or not, by index.
func (c *Cluster) Nodes() []*Node { return c.nodes }

// Node returns the node of index i.
func (c *Cluster) Node(i int) *Node { return c.nodes[i] }

// Live returns the nodes that are running and not paused: the ones a
// request can expect an answer from.
func (c *Cluster) Live() []*Node {
	var out []*Node
	for _, n := range c.nodes {
		if n.Live() {
			out = append(out, n)
		}
	}
	return out
}

// Close kills every node still running (resuming a paused one first, so
// that it dies at once) and waits for them to exit. It is idempotent.
func (c *Cluster) Close() {
	for _, n := range c.nodes {
		n.Kill()
	}
}

// LogTails returns the last max bytes of each node's current log, headed
// by the node and the file, for a failure report.
func (c *Cluster) LogTails(max int) string {
	var b strings.Builder
	for _, n := range c.nodes {
		n.mu.Lock()
		path := n.logPath
		n.mu.Unlock()
		if path == "" {
			continue
		}
		fmt.Fprintf(&b, "==== %s (%s) ====\n%s\n", n.ID(), path, tail(path, max))
	}
	return b.String()
}

// Node is one hourglass process of a Cluster, across its restarts. Its
// methods are safe for concurrent use; the signal methods wait for their
// effect (Kill and Term until the process has exited).
type Node struct {
	c *Cluster
	// Index is the node's place in Cluster.Nodes.
	Index int

	mu        sync.Mutex
	base      string // the first id; a new id is base-r<run>
	id        string
	addr      string // host:port; kept across restarts while it is free
	cmd       *exec.Cmd
	exited    chan struct{} // closed when the current process has exited
	paused    bool
	runs      int    // processes started so far
	logPath   string // the current run's log
	startedAt time.Time
	readyAt   time.Time
}

// ID returns the node's --node-id (its current one: see Restart).
func (n *Node) ID() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.id
}

// URL returns the node's API base URL, http://127.0.0.1:port.
func (n *Node) URL() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return "http://" + n.addr
}

// Addr returns the node's --addr.
func (n *Node) Addr() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.addr
}

// Running reports whether the node's process has been started and has not
// exited (a paused process is running).
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.runningLocked()
}

func (n *Node) runningLocked() bool {
	if n.exited == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// Live reports whether the node runs and is not paused.
func (n *Node) Live() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.runningLocked() && !n.paused
}

// Paused reports whether the node is stopped by SIGSTOP.
func (n *Node) Paused() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.paused
}

// ReadyAt returns when the current run first answered /readyz with 200.
func (n *Node) ReadyAt() time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.readyAt
}

// LogPath returns the current run's log file.
func (n *Node) LogPath() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.logPath
}

// Kill sends SIGKILL (after SIGCONT if paused, so that it dies now) and
// waits for the process to exit. Killing a node that is not running does
// nothing.
func (n *Node) Kill() error {
	n.mu.Lock()
	if !n.runningLocked() {
		n.mu.Unlock()
		return nil
	}
	cmd, exited := n.cmd, n.exited
	err := cmd.Process.Signal(syscall.SIGKILL)
	if n.paused {
		cmd.Process.Signal(syscall.SIGCONT)
		n.paused = false
	}
	n.mu.Unlock()
	<-exited
	n.c.cfg.logf("nodes: %s killed (SIGKILL)", n.ID())
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("nodes: kill %s: %w", n.ID(), err)
	}
	return nil
}

// Term sends SIGTERM (a graceful shutdown, which hands the node's
// partitions over) and waits for the process to exit. If it has not exited
// within Config.TermTimeout, Term kills it and returns an error saying so.
// A node that is not running is left alone.
func (n *Node) Term() error {
	n.mu.Lock()
	if !n.runningLocked() {
		n.mu.Unlock()
		return nil
	}
	cmd, exited := n.cmd, n.exited
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		n.mu.Unlock()
		return fmt.Errorf("nodes: terminate %s: %w", n.id, err)
	}
	if n.paused {
		cmd.Process.Signal(syscall.SIGCONT)
		n.paused = false
	}
	n.mu.Unlock()
	timeout := cmp.Or(n.c.cfg.TermTimeout, TermTimeoutDefault)
	select {
	case <-exited:
		n.c.cfg.logf("nodes: %s terminated (SIGTERM): %v", n.ID(), cmd.ProcessState)
		return nil
	case <-time.After(timeout):
		n.Kill()
		return fmt.Errorf("nodes: %s did not exit within %s of SIGTERM; killed", n.ID(), timeout)
	}
}

// Pause sends SIGSTOP: the process keeps its connections and its leases in
// the database but does nothing until Resume, as in a long GC pause or a
// frozen VM.
func (n *Node) Pause() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.runningLocked() || n.paused {
		return nil
	}
	if err := n.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("nodes: pause %s: %w", n.id, err)
	}
	n.paused = true
	n.c.cfg.logf("nodes: %s paused (SIGSTOP)", n.id)
	return nil
}

// Resume sends SIGCONT to a paused node.
func (n *Node) Resume() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.runningLocked() || !n.paused {
		return nil
	}
	if err := n.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("nodes: resume %s: %w", n.id, err)
	}
	n.paused = false
	n.c.cfg.logf("nodes: %s resumed (SIGCONT)", n.id)
	return nil
}

// Restart starts the node again after Kill or Term, on the same address
// while it is free, and waits until it is ready. With newID the node joins
// under a new --node-id (a replacement process); without, under its old one
// (a restarted process that finds its own leases). A running node is
// killed first.
func (n *Node) Restart(ctx context.Context, newID bool) error {
	if err := n.Kill(); err != nil {
		return err
	}
	if newID {
		n.mu.Lock()
		n.id = fmt.Sprintf("%s-r%d", n.base, n.runs+1)
		n.mu.Unlock()
	}
	return n.start(ctx)
}

// start runs a new process and waits until it is ready. It tries the
// node's address first, then a fresh port if that one was taken meanwhile.
func (n *Node) start(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		n.mu.Lock()
		if n.addr == "" || attempt > 0 {
			addr, err := freeAddr()
			if err != nil {
				n.mu.Unlock()
				return err
			}
			n.addr = addr
		}
		n.mu.Unlock()
		err := n.startOnce(ctx)
		if err == nil || attempt == 2 || !errors.Is(err, errAddrInUse) {
			return err
		}
	}
}

var errAddrInUse = errors.New("address in use")

func (n *Node) startOnce(ctx context.Context) error {
	cfg := n.c.cfg
	n.mu.Lock()
	n.runs++
	logPath := filepath.Join(cfg.LogDir, fmt.Sprintf("%s.%d.log", n.id, n.runs))
	args := []string{"serve", "--addr", n.addr, "--database-url", cfg.NodeDatabaseURL(n.Index)}
	if !cfg.OmitClusterFlags {
		args = append(args, "--node-id", n.id)
		if cfg.LeaseTTL > 0 {
			args = append(args, "--lease-ttl", cfg.LeaseTTL.String())
		}
	}
	args = append(args, cfg.Args...)
	id, addr := n.id, n.addr
	n.mu.Unlock()

	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("nodes: %s: log file: %w", id, err)
	}
	cmd := exec.Command(cfg.Binary, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = procAttr()
	startedAt := time.Now()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("nodes: %s: start %s: %w", id, cfg.Binary, err)
	}
	logFile.Close() // the child holds its own copy
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	n.mu.Lock()
	n.cmd, n.exited, n.paused, n.logPath = cmd, exited, false, logPath
	n.startedAt, n.readyAt = startedAt, time.Time{}
	n.mu.Unlock()
	cfg.logf("nodes: %s starting on %s (pid %d, log %s)", id, addr, cmd.Process.Pid, logPath)

	readyAt, err := waitReady(ctx, "http://"+addr, exited, cmp.Or(cfg.ReadyTimeout, ReadyTimeoutDefault))
	if err != nil {
		n.Kill()
		log := tail(logPath, 2000)
		if strings.Contains(log, "address already in use") {
			return errAddrInUse
		}
		return fmt.Errorf("nodes: %s on %s: %w; its log's end:\n%s", id, addr, err, log)
	}
	n.mu.Lock()
	n.readyAt = readyAt
	n.mu.Unlock()
	cfg.logf("nodes: %s ready after %s", id, readyAt.Sub(startedAt).Round(time.Millisecond))
	return nil
}

// waitReady polls base/readyz until it answers 200, the process exits, or
// timeout passes.
func waitReady(ctx context.Context, base string, exited <-chan struct{}, timeout time.Duration) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	probe := &http.Client{Timeout: time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
		if resp, err := probe.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Now(), nil
			}
		}
		select {
		case <-exited:
			return time.Time{}, errors.New("exited before /readyz answered 200")
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("/readyz not 200 within %s", timeout)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// freeAddr returns a loopback address with a port nothing listens on now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("nodes: find a free port: %w", err)
	}
	defer ln.Close()
	return "127.0.0.1:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port), nil
}

// tail returns the last max bytes of a file, or why it could not.
func tail(path string, max int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	if len(b) > max {
		b = b[len(b)-max:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

// Pid returns the process id of the node's current run, or 0 before its
// first start.
func (n *Node) Pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.cmd.Process == nil {
		return 0
	}
	return n.cmd.Process.Pid
}
