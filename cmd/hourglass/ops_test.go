package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/engine"
	"github.com/hourglass/hourglass/internal/cliout"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/node"
	"github.com/hourglass/hourglass/node/nodetest"
	"github.com/hourglass/hourglass/webhook"
)

// opsToken is the test server's token; the command line is given it as the
// first item of a rotation list.
const opsToken = "ops-token-0123456789"

// opsServer is a real node on loopback (on a new database of the store
// HOURGLASS_TEST_STORE names) with a token, webhooks to 127.0.0.1 retried quickly, and a client.
type opsServer struct {
	url    string
	client *api.Client
}

func startOpsServer(t *testing.T) *opsServer {
	t.Helper()
	allow, err := webhook.ParseAllowList("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, node.Config{
		Engine: engine.Config{SweepInterval: 200 * time.Millisecond, SweepGrace: 500 * time.Millisecond},
		Webhooks: webhook.Config{Allow: allow, Jitter: -1, Timeout: 5 * time.Second, Retry: []time.Duration{10 * time.Millisecond},
			PollInterval: 50 * time.Millisecond, Window: 2 * time.Second, LoadInterval: 500 * time.Millisecond},
		Tokens: []string{opsToken},
	})
	url := nodetest.URL(n)
	return &opsServer{url: url, client: api.NewClient(url, opsToken, &http.Client{Timeout: 30 * time.Second})}
}

// run runs `hourglass args…` against s, as main does, and returns the exit
// status, stdout and stderr.
func (s *opsServer) run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), append(args, "--server", s.url), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// ok runs args, fails the test unless the exit status is 0, and decodes
// stdout (-o json) into out.
func (s *opsServer) ok(t *testing.T, out any, args ...string) {
	t.Helper()
	code, stdout, stderr := s.run(t, append(args, "-o", "json")...)
	if code != 0 {
		t.Fatalf("%q: exit %d, stderr %s", args, code, stderr)
	}
	if err := json.Unmarshal([]byte(stdout), out); err != nil {
		t.Fatalf("%q: stdout is not the JSON expected: %v\n%s", args, err, stdout)
	}
}

// fails runs args and fails the test unless the exit status is code and
// stderr holds want.
func (s *opsServer) fails(t *testing.T, code int, want string, args ...string) {
	t.Helper()
	got, stdout, stderr := s.run(t, args...)
	if got != code || !strings.Contains(stderr, want) {
		t.Errorf("%q: exit %d, stderr %q; want exit %d with %q (stdout %q)", args, got, stderr, code, want, stdout)
	}
}

// table runs args with the default output and checks the exit status and
// the header line; it returns the lines.
func (s *opsServer) table(t *testing.T, header string, args ...string) []string {
	t.Helper()
	code, stdout, stderr := s.run(t, args...)
	lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
	if code != 0 || len(strings.Fields(lines[0])) == 0 || strings.Join(strings.Fields(lines[0]), " ") != header {
		t.Fatalf("%q: exit %d, stderr %s, stdout:\n%s\nwant the header %q", args, code, stderr, stdout, header)
	}
	return lines
}

func (s *opsServer) createOrders(t *testing.T, users ...string) []api.OrderJSON {
	t.Helper()
	if _, err := s.client.PutProduct(t.Context(), "mug", "Mug", "kitchen", 1000); err != nil {
		t.Fatal(err)
	}
	var out []api.OrderJSON
	for _, u := range users {
		o, _, err := s.client.CreateOrder(t.Context(), api.CreateOrderRequest{UserID: u, Items: []api.ItemJSON{{SKU: "mug", Quantity: 1}}, TimeoutMs: 3_600_000}, "")
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, o)
	}
	return out
}

func ids(orders []api.OrderJSON) (out []int64) {
	for _, o := range orders {
		out = append(out, o.ID)
	}
	return out
}

func TestOrdersCommands(t *testing.T) {
	t.Setenv("HOURGLASS_API_TOKEN", opsToken+",old-token")
	s := startOpsServer(t)
	orders := s.createOrders(t, "ann", "bob", "ann", "cy", "ann")

	var got api.OrderJSON
	s.ok(t, &got, "orders", "get", fmt.Sprint(orders[1].ID))
	if got.ID != orders[1].ID || got.UserID != "bob" || got.Status != "pending_payment" {
		t.Errorf("get: %+v", got)
	}
	lines := s.table(t, "ID USER STATUS ITEMS CREATED DEADLINE CLOSED REASON", "orders", "get", fmt.Sprint(orders[1].ID))
	if len(lines) != 2 || !strings.Contains(lines[1], "mug×1") {
		t.Errorf("get table: %q", lines)
	}

	var list []api.OrderJSON
	s.ok(t, &list, "orders", "list", "--user-id", "ann")
	if fmt.Sprint(ids(list)) != fmt.Sprint([]int64{orders[0].ID, orders[2].ID, orders[4].ID}) {
		t.Errorf("list --user-id ann: %v", ids(list))
	}
	// One page of two, then --all in pages of the server's size, and
	// --all bounded by --limit across pages.
	code, stdout, stderr := s.run(t, "orders", "list", "--limit", "2", "-o", "jsonl")
	if n := strings.Count(stdout, "\n"); code != 0 || n != 2 || !strings.Contains(stderr, "--all") {
		t.Errorf("list --limit 2: exit %d, %d lines, stderr %q", code, n, stderr)
	}
	s.ok(t, &list, "orders", "list", "--all")
	if len(list) != 5 {
		t.Errorf("list --all: %v", ids(list))
	}
	s.ok(t, &list, "orders", "list", "--all", "--limit", "3", "--status", "pending_payment")
	if fmt.Sprint(ids(list)) != fmt.Sprint(ids(orders[:3])) {
		t.Errorf("list --all --limit 3: %v", ids(list))
	}
	// At or after the third's deadline: the orders created in the same
	// millisecond as the third share it.
	deadline, _ := time.Parse(time.RFC3339Nano, orders[2].Deadline)
	var want []api.OrderJSON
	for _, o := range orders {
		if d, _ := time.Parse(time.RFC3339Nano, o.Deadline); !d.Before(deadline) {
			want = append(want, o)
		}
	}
	s.ok(t, &list, "orders", "list", "--deadline-after", deadline.Format(time.RFC3339Nano), "--all")
	if len(want) < 3 || fmt.Sprint(ids(list)) != fmt.Sprint(ids(want)) {
		t.Errorf("list --deadline-after the third's: %v, want %v", ids(list), ids(want))
	}
	s.ok(t, &list, "orders", "list", "--user-id", "nobody")
	if list == nil || len(list) != 0 {
		t.Errorf("empty list: %v", list)
	}
	lines = s.table(t, "ID USER STATUS ITEMS CREATED DEADLINE CLOSED REASON", "orders", "list", "--user-id", "nobody")
	if len(lines) != 1 {
		t.Errorf("empty table: %q", lines)
	}
	lines = s.table(t, "ID USER STATUS ITEMS CREATED DEADLINE CLOSED REASON", "orders", "list")
	if len(lines) != 6 {
		t.Errorf("table: %q", lines)
	}

	// extend: --by, then --deadline; the same deadline again is refused by the API.
	s.ok(t, &got, "orders", "extend", fmt.Sprint(orders[0].ID), "--by", "10m")
	old, _ := time.Parse(time.RFC3339Nano, orders[0].Deadline)
	if d, _ := time.Parse(time.RFC3339Nano, got.Deadline); !d.Equal(old.Add(10 * time.Minute)) {
		t.Errorf("extend --by 10m: deadline %s, was %s", got.Deadline, orders[0].Deadline)
	}
	later := old.Add(time.Hour).UTC().Format(time.RFC3339)
	s.ok(t, &got, "orders", "extend", fmt.Sprint(orders[0].ID), "--deadline", later)
	if d, _ := time.Parse(time.RFC3339Nano, got.Deadline); !d.Equal(old.Add(time.Hour).Truncate(time.Second)) {
		t.Errorf("extend --deadline %s: deadline %s", later, got.Deadline)
	}
	s.fails(t, 1, "hourglass: invalid_argument: ", "orders", "extend", fmt.Sprint(orders[0].ID), "--deadline", old.UTC().Format(time.RFC3339))

	s.ok(t, &got, "orders", "cancel", fmt.Sprint(orders[3].ID))
	if got.Status != "cancelled" {
		t.Errorf("cancel: %+v", got)
	}
	s.fails(t, 1, "hourglass: invalid_transition: ", "orders", "cancel", fmt.Sprint(orders[3].ID))
	s.fails(t, 1, "hourglass: not_found: ", "orders", "get", "999999")
	s.fails(t, 1, "hourglass: invalid_argument: ", "orders", "list", "--status", "nonsense")

	// Usage errors: exit 2 before any request.
	s.fails(t, 2, "expected a valid 64 bit int", "orders", "get", "abc")
	s.fails(t, 2, "--deadline-after", "orders", "list", "--deadline-after", "yesterday")
	s.fails(t, 2, "can't be used together", "orders", "extend", "1", "--by", "1m", "--deadline", later)
	s.fails(t, 2, "give one of --deadline and --by", "orders", "extend", "1")
	s.fails(t, 2, "--by must be positive", "orders", "extend", "1", "--by=-1m")
	s.fails(t, 2, "--limit must not be negative", "orders", "list", "--limit=-1")
	s.fails(t, 2, "-o", "orders", "list", "-o", "yaml")
	s.fails(t, 2, "unexpected argument", "orders", "frobnicate")
}

// TestOpsAuthAndNetwork: a wrong token is the API's unauthorized (exit 1),
// as is a server that does not answer; --help exits 0.
func TestOpsAuthAndNetwork(t *testing.T) {
	t.Setenv("HOURGLASS_API_TOKEN", "")
	s := startOpsServer(t)
	s.fails(t, 1, "hourglass: unauthorized: ", "orders", "list", "--token", "wrong")
	code, _, _ := s.run(t, "orders", "list", "--token", " "+opsToken+" , other")
	if code != 0 {
		t.Errorf("the first item of a token list: exit %d", code)
	}
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"orders", "list", "--server", "http://127.0.0.1:1"}, &stdout, &stderr); code != 1 || !strings.HasPrefix(stderr.String(), "hourglass: ") {
		t.Errorf("no server: exit %d, stderr %q", code, stderr.String())
	}
	stdout.Reset()
	if code := run(t.Context(), []string{"timers", "arm", "--help"}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "--fire-at") {
		t.Errorf("--help: exit %d, stdout %q", code, stdout.String())
	}
}

func TestTimersCommands(t *testing.T) {
	t.Setenv("HOURGLASS_API_TOKEN", opsToken)
	s := startOpsServer(t)
	fireAt := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)

	var tm api.TimerJSON
	s.ok(t, &tm, "timers", "arm", "job.a", "--fire-at", fireAt.Format(time.RFC3339Nano), "--payload", `{"n":1}`)
	if f, _ := time.Parse(time.RFC3339Nano, tm.FireAt); tm.Key != "job.a" || tm.Status != "scheduled" || !f.Equal(fireAt) || !jsonEqual(tm.Payload, `{"n":1}`) {
		t.Errorf("arm --fire-at: %+v", tm)
	}
	s.ok(t, &tm, "timers", "arm", "job.b", "--delay", "2h")
	s.ok(t, &tm, "timers", "arm", "other", "--delay", "30m")
	s.ok(t, &tm, "timers", "get", "job.a")
	if tm.Key != "job.a" {
		t.Errorf("get: %+v", tm)
	}
	s.table(t, "KEY STATUS FIRE_AT FIRED_AT WEBHOOK PAYLOAD", "timers", "get", "job.a")

	var list []api.TimerJSON
	keys := func() string {
		var k []string
		for _, tm := range list {
			k = append(k, tm.Key)
		}
		return strings.Join(k, " ")
	}
	s.ok(t, &list, "timers", "list", "--prefix", "job.")
	if keys() != "job.a job.b" {
		t.Errorf("list --prefix job.: %s", keys())
	}
	s.ok(t, &list, "timers", "list", "--all", "--limit", "2", "--fire-before", fireAt.Add(time.Second).Format(time.RFC3339))
	if keys() != "other job.a" {
		t.Errorf("list by fire time: %s", keys())
	}
	s.ok(t, &list, "timers", "list", "--all")
	if keys() != "job.a job.b other" {
		t.Errorf("list --all: %s", keys())
	}
	if lines := s.table(t, "KEY STATUS FIRE_AT FIRED_AT WEBHOOK PAYLOAD", "timers", "list"); len(lines) != 4 {
		t.Errorf("table: %q", lines)
	}

	s.ok(t, &tm, "timers", "cancel", "job.b")
	if tm.Status != "cancelled" {
		t.Errorf("cancel: %+v", tm)
	}
	s.ok(t, &list, "timers", "list", "--status", "cancelled")
	if keys() != "job.b" {
		t.Errorf("list --status cancelled: %s", keys())
	}
	s.fails(t, 1, "hourglass: not_found: ", "timers", "get", "missing")
	s.fails(t, 1, "hourglass: invalid_argument: ", "timers", "arm", "x", "--delay", "1s", "--payload", "[1]")

	s.fails(t, 2, "can't be used together", "timers", "arm", "x", "--delay", "1s", "--fire-at", fireAt.Format(time.RFC3339))
	s.fails(t, 2, "give one of --fire-at and --delay", "timers", "arm", "x")
	s.fails(t, 2, "--fire-at", "timers", "arm", "x", "--fire-at", "tomorrow")
	s.fails(t, 2, "--payload: not valid JSON", "timers", "arm", "x", "--delay", "1s", "--payload", "{")
	s.fails(t, 2, "--delay must be at least 1ms", "timers", "arm", "x", "--delay=-1s")
	s.fails(t, 2, "--fire-after", "timers", "list", "--fire-after", "now")
}

func TestDeadlettersCommands(t *testing.T) {
	t.Setenv("HOURGLASS_API_TOKEN", opsToken)
	s := startOpsServer(t)
	fail := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "down", http.StatusInternalServerError)
	}))
	t.Cleanup(fail.Close)
	hook, err := s.client.CreateWebhook(t.Context(), api.CreateWebhookRequest{URL: fail.URL, Events: []string{"order.created"}, Secret: "whsec-cli-0123456789"})
	if err != nil {
		t.Fatal(err)
	}
	s.createOrders(t, "ann", "bob", "cy")
	var list []api.DeadLetterJSON
	testenv.Eventually(t, 20*time.Second, "three dead letters", func() bool {
		l, err := s.client.FindDeadLetters(t.Context(), api.DeadLetterQuery{})
		return err == nil && len(l.DeadLetters) == 3
	})

	s.ok(t, &list, "deadletters", "list", "--webhook-id", fmt.Sprint(hook.ID), "--event-type", "order.created", "--all")
	if len(list) != 3 || list[0].WebhookID != hook.ID || list[0].Attempts != 2 {
		t.Fatalf("list: %+v", list)
	}
	s.ok(t, &list, "deadletters", "list", "--all", "--limit", "2", "--failed-after", "2000-01-01T00:00:00Z")
	if len(list) != 2 {
		t.Errorf("list --all --limit 2 by failure time: %+v", list)
	}
	s.ok(t, &list, "deadletters", "list", "--event-type", "order.closed")
	if len(list) != 0 {
		t.Errorf("list --event-type order.closed: %+v", list)
	}
	if lines := s.table(t, "ID WEBHOOK EVENT_TYPE ORDER ATTEMPTS FAILED_AT LAST_ERROR", "deadletters", "list"); len(lines) != 4 {
		t.Errorf("table: %q", lines)
	}
	s.ok(t, &list, "deadletters", "list")
	a, b, c := list[0].ID, list[1].ID, list[2].ID

	if lines := s.table(t, "ID WEBHOOK EVENT_TYPE ORDER ATTEMPTS FAILED_AT LAST_ERROR", "deadletters", "delete", fmt.Sprint(a)); len(lines) != 2 || !strings.HasPrefix(lines[1], fmt.Sprint(a)+" ") {
		t.Errorf("delete: %q", lines)
	}
	if lines := s.table(t, "ID STATUS", "deadletters", "retry", fmt.Sprint(b)); len(lines) != 2 || strings.Join(strings.Fields(lines[1]), " ") != fmt.Sprint(b)+" pending" {
		t.Errorf("retry: %q", lines)
	}
	// An unknown id among known ones: the others are still done, exit 1.
	code, stdout, stderr := s.run(t, "deadletters", "retry", fmt.Sprint(a), fmt.Sprint(c), "-o", "json")
	var retried []api.RetryJSON
	if err := json.Unmarshal([]byte(stdout), &retried); err != nil || code != 1 || len(retried) != 1 ||
		retried[0] != (api.RetryJSON{ID: c, Status: "pending"}) ||
		!strings.Contains(stderr, fmt.Sprintf("hourglass: dead letter %d: not_found: ", a)) {
		t.Errorf("retry a c: exit %d, stdout %s, stderr %q", code, stdout, stderr)
	}
	s.fails(t, 1, "not_found", "deadletters", "delete", fmt.Sprint(a))
	s.fails(t, 2, "expected", "deadletters", "retry", "x")
	s.fails(t, 2, "--failed-before", "deadletters", "list", "--failed-before", "1/2/2026")
}

func jsonEqual(raw json.RawMessage, want string) bool {
	var b bytes.Buffer
	return json.Compact(&b, raw) == nil && b.String() == want
}

// TestListFollowsNext: --all follows next across pages (here of 2, the
// server's largest page being far above a test's list), and --limit bounds
// the total by asking the last page for what is left.
func TestListFollowsNext(t *testing.T) {
	s := startOpsServer(t)
	orders := s.createOrders(t, "a", "b", "c", "d", "e")
	for _, tt := range []struct {
		flags listFlags
		sizes string // the page sizes asked
		want  []api.OrderJSON
	}{
		{listFlags{All: true}, "[2 2 2]", orders},
		{listFlags{All: true, Limit: 3}, "[2 1]", orders[:3]},
		{listFlags{All: true, Limit: 4}, "[2 2]", orders[:4]},
		{listFlags{Limit: 2}, "[2]", orders[:2]},
	} {
		var stdout, stderr bytes.Buffer
		env := &opsEnv{client: s.client, format: cliout.JSON, stdout: &stdout, stderr: &stderr}
		var sizes []int
		err := list(env, tt.flags, 2, orderColumns, func(limit int, after string) ([]api.OrderJSON, string, error) {
			sizes = append(sizes, limit)
			p, err := s.client.FindOrders(t.Context(), api.OrderQuery{Limit: limit, After: after})
			return p.Orders, p.Next, err
		})
		var got []api.OrderJSON
		if err != nil || json.Unmarshal(stdout.Bytes(), &got) != nil || fmt.Sprint(ids(got)) != fmt.Sprint(ids(tt.want)) || fmt.Sprint(sizes) != tt.sizes {
			t.Errorf("%+v: %v, pages %v, got %s; want %v in pages %s", tt.flags, err, sizes, stdout.String(), ids(tt.want), tt.sizes)
		}
	}
}

// TestUsageExitStatus: any command line kong refuses exits 2 with the
// error and the usage on stderr, nothing on stdout; --help exits 0.
func TestUsageExitStatus(t *testing.T) {
	for _, args := range [][]string{{}, {"serve", "--window", "soon"}, {"orders"}, {"timers", "get"}, {"nonsense"}} {
		var stdout, stderr bytes.Buffer
		if code := run(t.Context(), args, &stdout, &stderr); code != 2 || stdout.Len() != 0 || !strings.Contains(stderr.String(), "hourglass: error: ") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, stdout.String(), stderr.String())
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"deadletters", "--help"}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "deadletters retry") {
		t.Errorf("--help: exit %d, stdout %q", code, stdout.String())
	}
}

// TestBulkCommands: a filter flag turns timers cancel, orders cancel and
// extend, and deadletters retry into a bulk action: without --reason or
// --yes it refuses (exit 2, the count printed), with them it runs to done
// with its progress on stderr and the action on stdout; bulk list, get and
// stop read and stop them.
func TestBulkCommands(t *testing.T) {
	t.Setenv("HOURGLASS_API_TOKEN", opsToken)
	s := startOpsServer(t)
	batch := api.TimerBatchRequest{}
	for i := range 30 {
		d := int64(3_600_000)
		batch.Arm = append(batch.Arm, api.TimerBatchArm{Key: fmt.Sprintf("coupon:spring:%02d", i), DelayMs: &d})
	}
	if _, err := s.client.TimerBatch(t.Context(), batch); err != nil {
		t.Fatal(err)
	}
	s.fails(t, 2, "--reason is required", "timers", "cancel", "--prefix", "coupon:spring:", "--yes")
	s.fails(t, 2, "30 timers match", "timers", "cancel", "--prefix", "coupon:spring:", "--reason", "campaign ended")
	s.fails(t, 2, "not both", "timers", "cancel", "k", "--prefix", "coupon:")
	s.fails(t, 2, "give a timer's key, or a filter", "timers", "cancel")
	s.fails(t, 2, "--fire-after", "timers", "cancel", "--fire-after", "soon", "--reason", "r", "--yes")
	s.fails(t, 1, "invalid_argument", "timers", "cancel", "--prefix", "a b", "--reason", "r", "--yes")
	if tm, err := s.client.Timer(t.Context(), "coupon:spring:00"); err != nil || tm.Status != "scheduled" {
		t.Fatalf("after refusals: %+v %v", tm, err)
	}
	code, stdout, stderr := s.run(t, "timers", "cancel", "--prefix", "coupon:spring:", "--reason", "campaign ended", "--yes", "-o", "json")
	var a api.BulkActionJSON
	if code != 0 || json.Unmarshal([]byte(stdout), &a) != nil || a.State != "done" || a.Done != 30 || a.Action != "cancel_timers" {
		t.Fatalf("cancel by prefix: exit %d, stdout %s, stderr %s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "bulk action "+a.ID+" done: 30 of 30") {
		t.Errorf("progress on stderr: %q", stderr)
	}
	if tm, _ := s.client.Timer(t.Context(), "coupon:spring:29"); tm.Status != "cancelled" {
		t.Errorf("coupon:spring:29 %s", tm.Status)
	}

	orders := s.createOrders(t, "ann", "bob", "ann", "bob")
	code, stdout, stderr = s.run(t, "orders", "cancel", "--user-id", "ann", "--reason", "fraud", "--yes", "-o", "json")
	if code != 0 || json.Unmarshal([]byte(stdout), &a) != nil || a.Done != 2 {
		t.Fatalf("orders cancel --user-id ann: exit %d, stdout %s, stderr %s", code, stdout, stderr)
	}
	s.ok(t, &a, "orders", "extend", "--user-id", "bob", "--by", "10m", "--reason", "support", "--yes")
	if a.Done != 2 || a.Action != "extend_orders" {
		t.Fatalf("orders extend --user-id bob: %+v", a)
	}
	var o api.OrderJSON
	s.ok(t, &o, "orders", "get", fmt.Sprint(orders[1].ID))
	if o.Deadline == orders[1].Deadline {
		t.Errorf("bob's order not extended: %s", o.Deadline)
	}
	s.fails(t, 2, "not both", "orders", "cancel", "1", "--user-id", "ann")
	s.fails(t, 2, "give an order id, or a filter", "orders", "cancel")
	code, _, stderr = s.run(t, "deadletters", "retry", "--event-type", "order.created", "--reason", "r", "--yes")
	if code != 0 || !strings.Contains(stderr, "no dead letters match") {
		t.Errorf("retry with none: exit %d, stderr %q", code, stderr)
	}
	s.fails(t, 2, "give ids or a filter, not both", "deadletters", "delete", "1", "--webhook-id", "2")

	var list []api.BulkActionJSON
	s.ok(t, &list, "bulk", "list")
	if len(list) != 3 || list[0].Action != "extend_orders" || list[2].Action != "cancel_timers" {
		t.Fatalf("bulk list: %+v", list)
	}
	lines := s.table(t, "ID ACTION STATE MATCHED DONE FAILED CREATED FINISHED REASON", "bulk", "list")
	if len(lines) != 4 {
		t.Errorf("bulk list table: %q", lines)
	}
	var got api.BulkActionJSON
	s.ok(t, &got, "bulk", "get", list[2].ID)
	if got.ID != list[2].ID || got.Reason != "campaign ended" {
		t.Errorf("bulk get: %+v", got)
	}
	s.ok(t, &got, "bulk", "stop", list[2].ID) // finished: as it is
	if got.State != "done" {
		t.Errorf("bulk stop of a finished one: %+v", got)
	}
	s.fails(t, 1, "hourglass: not_found: ", "bulk", "get", "0123abc")
	s.fails(t, 1, "hourglass: invalid_argument: ", "bulk", "stop", "a b")
}
