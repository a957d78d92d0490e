package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/alecthomas/kong"
	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/internal/cliout"
)

// opsFlags are the flags of every command of a running server's API: where
// it is, the token, and the output format.
type opsFlags struct {
	Server  string        `help:"The server's base URL." default:"http://127.0.0.1:8080" env:"HOURGLASS_SERVER"`
	Token   string        `help:"The API token, sent as 'Authorization: Bearer <token>'. A comma-separated list (the server's --api-token during a rotation) sends its first item." env:"HOURGLASS_API_TOKEN"`
	Output  string        `short:"o" help:"Output: table (aligned columns), json (one document: an object, or an array for a list), jsonl (one object per line)." enum:"table,json,jsonl" default:"table"`
	Timeout time.Duration `help:"How long each request may take." default:"30s"`
}

// ordersCmd, timersCmd and deadlettersCmd are the API's command groups
// (ops_orders.go, ops_timers.go, ops_deadletters.go).
type ordersCmd struct {
	opsFlags `embed:""`
	Get      ordersGetCmd     `cmd:"" help:"Print an order."`
	List     ordersListCmd    `cmd:"" help:"List orders, by id or (with a deadline or creation range) by that time."`
	Extend   ordersExtendCmd  `cmd:"" help:"Move a pending_payment order's deadline later (or, with a filter, of every order it selects)."`
	Cancel   ordersCancelCmd  `cmd:"" help:"Cancel a pending_payment order (or, with a filter, every order it selects; their stock is released)."`
	History  ordersHistoryCmd `cmd:"" help:"Print an order's story: its timing (deadlines, when, how late, by what and on which node it closed) and its events and deliveries."`
}

type timersCmd struct {
	opsFlags `embed:""`
	Get      timersGetCmd     `cmd:"" help:"Print a timer."`
	List     timersListCmd    `cmd:"" help:"List timers, by key or (with a fire range) by fire time."`
	Arm      timersArmCmd     `cmd:"" help:"Arm (create or re-arm) a timer."`
	Cancel   timersCancelCmd  `cmd:"" help:"Cancel a timer that has not fired (or, with a filter, every timer it selects)."`
	History  timersHistoryCmd `cmd:"" help:"Print a timer's story: its timing (fire times, when, how late, by what and on which node it fired) and its events and deliveries."`
}

type deadlettersCmd struct {
	opsFlags `embed:""`
	List     deadlettersListCmd   `cmd:"" help:"List webhook dead letters, by id or (with a failure range) by failure time."`
	Retry    deadlettersRetryCmd  `cmd:"" help:"Send dead letters again (due now, attempts reset), by id or every one a filter selects."`
	Delete   deadlettersDeleteCmd `cmd:"" help:"Delete dead letters, by id or every one a filter selects."`
}

// opsGroup returns the flags of the API command group cmd is in.
func (c *cli) opsGroup(cmd string) (opsFlags, bool) {
	switch group, _, _ := strings.Cut(cmd, " "); group {
	case "orders":
		return c.Orders.opsFlags, true
	case "timers":
		return c.Timers.opsFlags, true
	case "deadletters":
		return c.Deadletters.opsFlags, true
	case "bulk":
		return c.Bulk.opsFlags, true
	}
	return opsFlags{}, false
}

// opsEnv is what an API command's Run is given: the client and where and
// how to print.
type opsEnv struct {
	client *api.Client
	format cliout.Format
	stdout io.Writer
	stderr io.Writer
	stdin  io.Reader // a bulk action's question on a terminal
}

// usageError is a flag value the command refuses before asking the server
// (exit status 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// errReported is a failure already printed on stderr (exit status 1).
var errReported = errors.New("reported")

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// runOps runs the API command kctx selected and returns its exit status:
// 0, 1 for an answer of the API that is an error or a network failure
// ("hourglass: <code>: <message>" on stderr), 2 for a usage error.
func runOps(ctx context.Context, kctx *kong.Context, f opsFlags, stdout, stderr io.Writer) int {
	if f.Timeout <= 0 {
		fmt.Fprintf(stderr, "hourglass: --timeout must be positive, got %s\n", f.Timeout)
		return 2
	}
	token, _, _ := strings.Cut(f.Token, ",")
	env := &opsEnv{
		client: api.NewClient(f.Server, strings.TrimSpace(token), &http.Client{Timeout: f.Timeout}),
		format: cliout.Format(f.Output),
		stdout: stdout,
		stderr: stderr,
		stdin:  os.Stdin,
	}
	kctx.BindTo(ctx, (*context.Context)(nil))
	err := kctx.Run(env)
	return exitStatus(stderr, err)
}

// exitStatus prints err on stderr and returns its exit status.
func exitStatus(stderr io.Writer, err error) int {
	if err == nil {
		return 0
	}
	if errors.Is(err, errReported) {
		return 1
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "hourglass: %s\n", ue.msg)
		return 2
	}
	var ae *api.Error
	if errors.As(err, &ae) {
		fmt.Fprintf(stderr, "hourglass: %s: %s\n", ae.Code, ae.Message)
		return 1
	}
	fmt.Fprintf(stderr, "hourglass: %s\n", strings.TrimPrefix(err.Error(), "hourglass api: "))
	return 1
}

// listFlags are a list command's paging flags.
type listFlags struct {
	Limit int  `help:"Most items: the page size, or with --all the total (0: the server's page size, and with --all no total)." default:"0"`
	All   bool `help:"Follow the pages to the end of the list (or to --limit items)."`
}

// pages calls fetch for each page a list command asks for, with the page
// size to ask and the after of the page ("" for the first), until the list
// ends, --limit items are read or, without --all, after one page. fetch
// returns how many items the page held and its next ("" on the last). When
// a page was the last asked for but the list goes on, a hint goes to stderr.
func (l listFlags) pages(env *opsEnv, max int, fetch func(limit int, after string) (int, string, error)) error {
	if l.Limit < 0 {
		return usagef("--limit must not be negative, got %d", l.Limit)
	}
	if !l.All {
		_, next, err := fetch(l.Limit, "")
		if err == nil && next != "" {
			fmt.Fprintln(env.stderr, "hourglass: more items follow; --all reads them")
		}
		return err
	}
	after, read := "", 0
	for {
		size := max
		if l.Limit > 0 {
			size = min(max, l.Limit-read)
		}
		n, next, err := fetch(size, after)
		if err != nil {
			return err
		}
		read += n
		if next == "" || l.Limit > 0 && read >= l.Limit {
			return nil
		}
		after = next
	}
}

// list writes the items of the pages l asks for, fetched by fetch (given
// the page size and after, returning the items and the page's next).
func list[T any](env *opsEnv, l listFlags, max int, cols []cliout.Column[T], fetch func(limit int, after string) ([]T, string, error)) error {
	out := cliout.NewList(env.stdout, env.format, cols)
	err := l.pages(env, max, func(limit int, after string) (int, string, error) {
		items, next, err := fetch(limit, after)
		if err != nil {
			return 0, "", err
		}
		out.Add(items...)
		return len(items), next, out.Flush()
	})
	if err != nil {
		return err
	}
	return out.Close()
}

// one returns a function that writes the item of a get or an action, or
// returns its error: one(env, cols)(env.client.Order(ctx, id)).
func one[T any](env *opsEnv, cols []cliout.Column[T]) func(T, error) error {
	return func(v T, err error) error {
		if err != nil {
			return err
		}
		return cliout.WriteOne(env.stdout, env.format, cols, v)
	}
}

// parseTime reads an RFC 3339 flag value; "" is the zero time (no filter).
func parseTime(flag, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, usagef("%s: %q is not an RFC 3339 time (e.g. 2026-11-24T10:00:00Z)", flag, v)
	}
	return t, nil
}

// optInt64 renders an optional number, "" for nil.
func optInt64(n *int64) string {
	if n == nil {
		return ""
	}
	return fmt.Sprint(*n)
}
