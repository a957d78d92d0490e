// Command hourglass-chaos is the cluster's chaos soak (issue 9): it runs
// several `hourglass serve` nodes on one PostgreSQL or MySQL database (or
// one MariaDB Galera cluster, the nodes spread over its servers), sends
// them orders and payments, kills, terminates and pauses random nodes for a
// while, and prints a verdict (orders lost, duplicated, closed early,
// closed twice or later than the bound, stock) with the kill-to-takeover
// times. It exits with status 1 on a bad verdict. It only parses flags: the
// soak is hourglasstest/nodes.Soak.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/alecthomas/kong"
	"github.com/hourglass/hourglass/hourglasstest/nodes"
	"github.com/hourglass/hourglass/store"
)

type cli struct {
	DatabaseURL  []string      `help:"The server to soak on: postgres://… or mysql://…. A new database is created on it for the soak (the user needs CREATE DATABASE) unless --in-place. Repeat it for the servers of one clustered database (MariaDB Galera): node i connects to the i-th URL modulo their count, the new database is created through the first and reached under the same name through the others." required:"" env:"HOURGLASS_DATABASE_URL" sep:"none"`
	InPlace      bool          `help:"Use the URL's database itself instead of a new one (its data is judged too: use an empty database)."`
	KeepDatabase bool          `help:"Keep the soak's new database after a good verdict (it is always kept after a bad one)."`
	Bin          string        `help:"The hourglass binary; default: build ./cmd/hourglass (run from inside the repository)." type:"existingfile"`
	Nodes        int           `help:"Nodes to run (2..64)." default:"3"`
	Duration     time.Duration `help:"How long the chaos lasts." default:"10m"`
	LeaseTTL     time.Duration `help:"The nodes' --lease-ttl (0: the binary's default, 5s)." default:"0"`
	Actions      []string      `help:"Chaos actions to draw from: kill (SIGKILL), term (SIGTERM), pause (SIGSTOP, then SIGCONT)." default:"kill,term,pause"`
	Gap          time.Duration `help:"Mean time between two actions (0: twice the TTL)." default:"0"`
	Rate         float64       `help:"Creates per second across the nodes." default:"50"`
	PayShare     float64       `help:"Share of orders paid (some after their deadline)." default:"0.4"`
	LateBound    time.Duration `help:"Closes later than this after their deadline fail the verdict (0: the TTL + 1s)." default:"0"`
	Seed         uint64        `help:"Seed of the chaos and the load (0: from the clock; the report prints it)." default:"0"`
	LogDir       string        `help:"Where each node's logs go (default: a new temporary directory, kept)."`
	Legacy       bool          `help:"Leave out --node-id and --lease-ttl, for a binary from before issue 9 (independent processes on one database)."`
	Args         []string      `help:"More serve flags for every node, e.g. --args=--sweep-grace=1s." sep:"none"`
	Quiet        bool          `help:"Print only the report, not each action."`
}

func main() {
	var c cli
	kong.Parse(&c,
		kong.Name("hourglass-chaos"),
		kong.Description("Chaos soak of an hourglass cluster: random SIGKILLs, SIGTERMs and SIGSTOPs under load, then a verdict from the database."),
		kong.UsageOnError(),
	)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ok, err := c.run(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hourglass-chaos:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

func (c *cli) run(ctx context.Context) (bool, error) {
	logf := func(format string, args ...any) {
		fmt.Printf("%s %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
	quietf := logf
	if c.Quiet {
		quietf = nil
	}
	logDir := c.LogDir
	if logDir == "" {
		dir, err := os.MkdirTemp("", "hourglass-chaos-*")
		if err != nil {
			return false, err
		}
		logDir = dir
	}
	bin := c.Bin
	if bin == "" {
		dir, err := os.MkdirTemp("", "hourglass-chaos-bin-*")
		if err != nil {
			return false, err
		}
		defer os.RemoveAll(dir)
		logf("building ./cmd/hourglass")
		if bin, err = nodes.Build(ctx, dir); err != nil {
			return false, err
		}
	}
	dbURLs := c.DatabaseURL
	var drop func(context.Context) error
	if !c.InPlace {
		scratch, dropScratch, err := nodes.ScratchDatabase(ctx, c.DatabaseURL[0])
		if err != nil {
			return false, err
		}
		drop = dropScratch
		dbURLs = []string{scratch}
		for _, u := range c.DatabaseURL[1:] {
			same, err := nodes.SameDatabase(u, scratch)
			if err != nil {
				return false, err
			}
			dbURLs = append(dbURLs, same)
		}
		logf("soak database: %s", store.Redact(scratch))
	}
	dbURL := dbURLs[0]

	report, err := nodes.Soak(ctx, nodes.SoakConfig{
		Cluster: nodes.Config{
			Binary:           bin,
			DatabaseURLs:     dbURLs,
			LeaseTTL:         c.LeaseTTL,
			LogDir:           logDir,
			Args:             c.Args,
			OmitClusterFlags: c.Legacy,
			Logf:             quietf,
		},
		Nodes:     c.Nodes,
		Duration:  c.Duration,
		Load:      nodes.LoadConfig{Rate: c.Rate, PayShare: c.PayShare},
		Actions:   c.Actions,
		Gap:       c.Gap,
		LateBound: c.LateBound,
		Seed:      c.Seed,
	})
	ok := err == nil && report.OK()
	if drop != nil {
		if ok && !c.KeepDatabase {
			if err := drop(context.WithoutCancel(ctx)); err != nil {
				slog.Warn("hourglass-chaos: drop the soak database", "err", err)
			}
		} else {
			logf("kept the soak database %s", store.Redact(dbURL))
		}
	}
	if err != nil {
		return false, fmt.Errorf("%w (node logs in %s)", err, logDir)
	}
	fmt.Print(report.Report())
	fmt.Printf("node logs: %s\n", logDir)
	if !ok {
		fmt.Println("BAD VERDICT")
	}
	return ok, nil
}
