package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/internal/cliout"
)

// bulkCmd is `hourglass bulk`: the filtered bulk actions a filter flag of
// timers cancel, orders cancel|extend and deadletters retry|delete
// starts.
type bulkCmd struct {
	opsFlags `embed:""`
	List     bulkListCmd `cmd:"" help:"List bulk actions, newest first."`
	Get      bulkGetCmd  `cmd:"" help:"Print a bulk action's progress."`
	Stop     bulkStopCmd `cmd:"" help:"Stop a running bulk action (no item is done after the stop)."`
}

// bulkColumns are the columns of a bulk action table.
var bulkColumns = []cliout.Column[api.BulkActionJSON]{
	{Header: "ID", Cell: func(a api.BulkActionJSON) string { return a.ID }},
	{Header: "ACTION", Cell: func(a api.BulkActionJSON) string { return a.Action }},
	{Header: "STATE", Cell: func(a api.BulkActionJSON) string { return a.State }},
	{Header: "MATCHED", Cell: func(a api.BulkActionJSON) string { return fmt.Sprint(a.Matched) }},
	{Header: "DONE", Cell: func(a api.BulkActionJSON) string { return fmt.Sprint(a.Done) }},
	{Header: "FAILED", Cell: func(a api.BulkActionJSON) string { return fmt.Sprint(a.Failed) }},
	{Header: "CREATED", Cell: func(a api.BulkActionJSON) string { return a.CreatedAt }},
	{Header: "FINISHED", Cell: func(a api.BulkActionJSON) string { return cliout.Opt(a.FinishedAt) }},
	{Header: "REASON", Cell: func(a api.BulkActionJSON) string { return cliout.Truncate(a.Reason, 40) }},
}

type bulkListCmd struct {
	listFlags `embed:""`
}

func (c *bulkListCmd) Run(ctx context.Context, env *opsEnv) error {
	return list(env, c.listFlags, api.MaxBulkListLimit, bulkColumns, func(limit int, after string) ([]api.BulkActionJSON, string, error) {
		p, err := env.client.BulkActions(ctx, limit, after)
		return p.BulkActions, cliout.Opt(p.Next), err
	})
}

type bulkGetCmd struct {
	ID string `arg:"" help:"The bulk action's id."`
}

func (c *bulkGetCmd) Run(ctx context.Context, env *opsEnv) error {
	return one(env, bulkColumns)(env.client.BulkAction(ctx, c.ID))
}

type bulkStopCmd struct {
	ID string `arg:"" help:"The bulk action's id."`
}

func (c *bulkStopCmd) Run(ctx context.Context, env *opsEnv) error {
	return one(env, bulkColumns)(env.client.StopBulkAction(ctx, c.ID))
}

// bulkFlags turn a command with a filter flag into a bulk action.
type bulkFlags struct {
	Reason string `help:"Why (required with a filter): kept with the bulk action."`
	Yes    bool   `help:"Act on every item the filter selects without asking (without it, the count is printed and the command refuses, or asks on a terminal)."`
	Rate   int    `help:"With a filter: at most this many items a second (0: no bound)."`
}

// filter collects a command's filter flags as the API's filter: only the
// flags given, each checked (times as RFC 3339) before any request.
type filter map[string]string

func (f filter) set(name, v string) {
	if v != "" {
		f[name] = v
	}
}

func (f filter) time(flag, name, v string) error {
	t, err := parseTime(flag, v)
	if err != nil {
		return err
	}
	if !t.IsZero() {
		f[name] = t.UTC().Format(time.RFC3339Nano)
	}
	return nil
}

// runBulk runs req (with its filter) as the bulk flags say: counts what it
// selects, asks or refuses without --yes, starts it and follows it to its
// end with a progress bar on stderr, then prints it. what names the items
// ("timers") in messages. Exit status: 0 when done, 1 when it stopped or
// failed, 2 when --yes is missing off a terminal.
func runBulk(ctx context.Context, env *opsEnv, b bulkFlags, what string, req api.BulkRequest) error {
	if strings.TrimSpace(b.Reason) == "" {
		return usagef("--reason is required with a filter (why every matching item is changed)")
	}
	if b.Rate < 0 {
		return usagef("--rate must not be negative, got %d", b.Rate)
	}
	req.Reason, req.Rate = b.Reason, b.Rate
	n, err := env.client.BulkCount(ctx, req)
	if err != nil {
		return err
	}
	count := fmt.Sprint(n.Matched)
	if n.More {
		count = "more than " + count
	}
	if n.Matched == 0 {
		fmt.Fprintf(env.stderr, "hourglass: no %s match; nothing to do\n", what)
		return nil
	}
	verb := strings.ReplaceAll(req.Action, "_", " ") // "cancel timers"
	if !b.Yes {
		if !env.interactive() {
			return usagef("%s %s match: %s them with --yes", count, what, verb)
		}
		fmt.Fprintf(env.stderr, "%s %s match. %s them (reason %q)? [y/N] ", count, what, verb, b.Reason)
		line, _ := bufio.NewReader(env.stdin).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
			return usagef("not confirmed; nothing changed")
		}
	}
	a, created, err := env.client.StartBulkAction(ctx, req)
	if err != nil {
		return err
	}
	if !created {
		fmt.Fprintf(env.stderr, "hourglass: the same action runs already (%s); following it\n", a.ID)
	}
	a, err = follow(ctx, env, a, n.Matched)
	if err != nil {
		return err
	}
	if err := one(env, bulkColumns)(a, nil); err != nil {
		return err
	}
	if a.State != "done" {
		msg := ""
		if a.Error != "" {
			msg = ": " + a.Error
		}
		fmt.Fprintf(env.stderr, "hourglass: bulk action %s %s after %d done, %d failed%s\n", a.ID, a.State, a.Done, a.Failed, msg)
		return errReported
	}
	return nil
}

// followEvery is how often a followed action is read.
const followEvery = 300 * time.Millisecond

// follow reads a until it is no longer running, showing its progress on
// stderr against total: a bar redrawn in place on a terminal, else a line
// at most every few seconds. Interrupted (ctx ended), it says how to
// follow it again.
func follow(ctx context.Context, env *opsEnv, a api.BulkActionJSON, total int64) (api.BulkActionJSON, error) {
	bar := progress{w: env.stderr, tty: env.isTTY(env.stderr), total: total}
	for a.State == "running" {
		bar.show(a, false)
		select {
		case <-ctx.Done():
			bar.end()
			fmt.Fprintf(env.stderr, "hourglass: stopped following; it runs on: hourglass bulk get %s\n", a.ID)
			return a, ctx.Err()
		case <-time.After(followEvery):
		}
		next, err := env.client.BulkAction(ctx, a.ID)
		if err != nil {
			bar.end()
			return a, err
		}
		a = next
	}
	bar.show(a, true)
	bar.end()
	return a, nil
}

// progress draws a bulk action's progress.
type progress struct {
	w         io.Writer
	tty       bool
	total     int64
	last      time.Time
	lastCount int64
	drawn     bool
}

const barWidth = 30

func (p *progress) show(a api.BulkActionJSON, final bool) {
	n := a.Done + a.Failed
	total := max(p.total, a.Matched, n)
	if p.tty {
		filled := 0
		if total > 0 {
			filled = int(int64(barWidth) * n / total)
		}
		fmt.Fprintf(p.w, "\r%s [%s%s] %d/%d done %d failed %d %s ", a.ID, strings.Repeat("#", filled), strings.Repeat(".", barWidth-filled), n, total, a.Done, a.Failed, a.State)
		p.drawn = true
		return
	}
	now := time.Now()
	if !final && (n == p.lastCount && !p.last.IsZero() || now.Sub(p.last) < 2*time.Second && !p.last.IsZero()) {
		return
	}
	p.last, p.lastCount = now, n
	fmt.Fprintf(p.w, "hourglass: bulk action %s %s: %d of %d (done %d, failed %d)\n", a.ID, a.State, n, total, a.Done, a.Failed)
}

func (p *progress) end() {
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}

// isTTY reports whether v (stdin, stderr) is a terminal.
func (e *opsEnv) isTTY(v any) bool {
	f, ok := v.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// interactive reports whether a question can be asked: stdin and stderr
// are terminals.
func (e *opsEnv) interactive() bool {
	return e.stdin != nil && e.isTTY(e.stderr) && e.isTTY(e.stdin)
}
